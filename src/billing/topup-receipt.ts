import { sql } from 'drizzle-orm';
import type { AfterCommit } from './after-commit.js';
import { queryRows, type Db } from '../db/client.js';
import { clientIdOf } from '../ids.js';
import { topupReceiptMail } from '../mail/receipt-mail.js';

// Every paid top-up — a checkout's or auto top-up's — gets the same two records a person can find
// (docs/billing.md "Receipts"): an invoice row (the processor's for a checkout; svc's own for an
// off-session charge, which the processor invoices nowhere) and a receipt mail to the owner, sent once
// the grant's transaction committed.

export interface PaidTopupFacts {
  orgKey: string;
  paidCents: number;
  credits: number;
  auto: boolean;
}

/** In the grant's transaction: whom to mail, as the step that mails them once it committed. */
export async function receiptStep(tx: Db, t: PaidTopupFacts): Promise<AfterCommit | null> {
  const [owner] = await queryRows<{ email: string; name: string }>(
    tx,
    sql`select u.email, o.name from orgs o join users u on u.id = o.owner_id where o.id = ${t.orgKey}`,
  );
  if (!owner) return null;
  return async (deps) => {
    const mail = topupReceiptMail({
      to: owner.email,
      orgName: owner.name,
      paidCents: t.paidCents,
      credits: t.credits,
      auto: t.auto,
      link: `${deps.config.v2Url}/account/clients/${clientIdOf(t.orgKey)}/billing#invoices`,
    });
    await deps.mailer
      .send(mail)
      .catch((err: unknown) => deps.log.warn({ err, org: t.orgKey }, 'top-up receipt mail not sent'));
  };
}

/**
 * In the grant's transaction: the invoice row of an auto top-up's charge (`in_<charge id>`, reason
 * `auto_topup`), paid, naming its payment intent so the invoice page's refund and dispute find it.
 */
export async function recordAutoTopupInvoice(
  tx: Db,
  row: {
    chargeId: string;
    orgKey: string;
    customerId: string | null;
    paymentIntent: string;
    paidCents: number;
  },
): Promise<void> {
  await tx.execute(sql`
    insert into billing_invoices (id, org_key, customer_id, subscription_id, billing_reason, amount_due_cents,
                                  amount_paid_cents, status, currency, invoice_pdf, created_at_unix, due_date,
                                  payment_failed_at, event_created, payment_intent)
    values (${`in_${row.chargeId}`}, ${row.orgKey}, ${row.customerId ?? ''}, null, 'auto_topup', ${row.paidCents},
            ${row.paidCents}, 'paid', 'usd', null, extract(epoch from now())::bigint, null, null,
            extract(epoch from now())::bigint, ${row.paymentIntent})
    on conflict (id) do nothing`);
}
