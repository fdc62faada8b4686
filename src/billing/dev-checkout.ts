import { Router, type Request, type Response } from 'express';
import { sql } from 'drizzle-orm';
import { z } from 'zod';
import type { Deps } from '../deps.js';
import { queryRows } from '../db/client.js';
import { notFound } from '../http/errors.js';
import { parse } from '../http/validate.js';
import { csrfField, html, renderPage, sendPage, verifyCsrfField } from '../page-kit/html.js';
import { nowUnix } from '../ids.js';
import { devId } from './dev-processor.js';
import { tokensAndMoney, usdOfCents } from './par.js';
import { PERIOD_SECONDS, PRO_PRICE_CENTS, onlyDevIds, type DevEvents } from './dev-events.js';
import { auditOriginOf, type AuditOrigin } from '../audit/context.js';

// The dev processor's checkout (CONTRACT §8): `/dev/checkout/{session_id}` is a plain form that submits
// decision=pay or decision=fail; paying delivers the events Stripe sends for a paid Checkout session
// (dev-events.ts), then redirects to success_url (or cancel_url).

interface SessionRow {
  id: string;
  org_key: string;
  customer_id: string;
  kind: 'topup' | 'subscription';
  credits: unknown;
  amount_cents: unknown;
  status: string;
  success_url: string;
  cancel_url: string;
}

/** Stripe replaces this placeholder in success_url with the session id; so does the dev processor. */
const withSessionId = (url: string, id: string) =>
  url.replaceAll('{CHECKOUT_SESSION_ID}', encodeURIComponent(id));

export function devCheckoutRoutes(deps: Deps, ev: DevEvents): Router {
  const router = Router();
  const { db } = deps;
  onlyDevIds(router, 'session_id');

  async function findSession(id: string): Promise<SessionRow | null> {
    const [row] = await queryRows<SessionRow>(
      db,
      sql`select * from billing_checkout_sessions where id = ${id}`,
    );
    return row ?? null;
  }

  async function pay(s: SessionRow, origin: AuditOrigin) {
    await ev.ensureCard(s.customer_id);
    const pi = devId('pi');
    const cents = Number(s.amount_cents);
    const metadata = { org_key: s.org_key, kind: s.kind, credits: String(s.credits) };
    if (s.kind === 'topup') {
      const session = {
        id: s.id,
        object: 'checkout.session',
        mode: 'payment',
        status: 'complete',
        payment_status: 'paid',
        customer: s.customer_id,
        amount_total: cents,
        currency: 'usd',
        client_reference_id: s.org_key,
        payment_intent: pi,
        metadata,
      };
      await ev.deliver('checkout.session.completed', session, origin);
      await ev.deliver(
        'invoice.paid',
        ev.invoiceObject(s, {
          status: 'paid',
          billing_reason: 'manual',
          amount_due: cents,
          amount_paid: cents,
          payments: ev.paidBy(pi),
        }),
        origin,
      );
      return;
    }
    const start = nowUnix();
    const end = start + PERIOD_SECONDS;
    const subId = devId('sub');
    await ev.deliver(
      'customer.subscription.created',
      {
        id: subId,
        object: 'subscription',
        customer: s.customer_id,
        status: 'active',
        cancel_at_period_end: false,
        metadata: { org_key: s.org_key },
        items: {
          object: 'list',
          data: [
            {
              id: devId('si'),
              object: 'subscription_item',
              current_period_start: start,
              current_period_end: end,
            },
          ],
        },
      },
      origin,
    );
    await ev.deliver(
      'checkout.session.completed',
      {
        id: s.id,
        object: 'checkout.session',
        mode: 'subscription',
        status: 'complete',
        payment_status: 'paid',
        customer: s.customer_id,
        subscription: subId,
        amount_total: PRO_PRICE_CENTS,
        metadata,
      },
      origin,
    );
    await ev.deliver(
      'invoice.paid',
      ev.proInvoicePaid(s, subId, 'subscription_create', pi, { start, end }),
      origin,
    );
  }

  async function fail(s: SessionRow, origin: AuditOrigin) {
    const cents = s.kind === 'topup' ? Number(s.amount_cents) : PRO_PRICE_CENTS;
    await ev.deliver(
      'invoice.payment_failed',
      ev.invoiceObject(s, {
        status: 'open',
        billing_reason: s.kind === 'topup' ? 'manual' : 'subscription_create',
        amount_due: cents,
        amount_paid: 0,
      }),
      origin,
    );
    await ev.deliver(
      'checkout.session.expired',
      {
        id: s.id,
        object: 'checkout.session',
        status: 'expired',
        customer: s.customer_id,
        metadata: { org_key: s.org_key },
      },
      origin,
    );
  }

  function page(req: Request, res: Response, s: SessionRow, status = 200, note?: string) {
    const what = s.kind === 'topup' ? tokensAndMoney(Number(s.credits)) : 'Pro plan, 210,000 tokens a month';
    const cents = s.kind === 'topup' ? Number(s.amount_cents) : PRO_PRICE_CENTS;
    const open = s.status === 'open';
    const body = html`<h1>Dev checkout</h1>
<p class="alert info">This is the built-in development processor: no money moves. Paying delivers signed webhook events to this server.</p>
<dl><dt>Item</dt><dd>${what}</dd><dt>Amount</dt><dd>${usdOfCents(cents)}</dd><dt>Session</dt><dd><code>${s.id}</code></dd><dt>Status</dt><dd>${s.status}</dd></dl>
${note ? html`<p class="alert warn">${note}</p>` : ''}
${
  open
    ? html`<form method="post" action="/dev/checkout/${s.id}">${csrfField(req, res)}
<div class="actions"><button type="submit" name="decision" value="pay">Pay ${usdOfCents(cents)}</button>
<button type="submit" name="decision" value="fail" class="danger">Simulate a declined card</button></div></form>`
    : ''
}`;
    const origins = [s.success_url, s.cancel_url].flatMap((u) => {
      try {
        return [new URL(u).origin];
      } catch {
        return [];
      }
    });
    sendPage(res, renderPage({ title: 'Dev checkout', body, narrow: true }), status, { formAction: origins });
  }

  router.get('/dev/checkout/:session_id', async (req, res) => {
    const s = await findSession(String(req.params.session_id));
    if (!s) throw notFound('no such checkout session');
    page(req, res, s);
  });

  router.post('/dev/checkout/:session_id', async (req, res) => {
    verifyCsrfField(req);
    const { decision } = parse(z.object({ decision: z.enum(['pay', 'fail']) }), req.body);
    const id = String(req.params.session_id);
    // Claim the session: of two racing submissions exactly one pays.
    const [claimed] = await queryRows<SessionRow>(
      db,
      sql`update billing_checkout_sessions set status = 'paying' where id = ${id} and status = 'open' returning *`,
    );
    if (!claimed) {
      const s = await findSession(id);
      if (!s) throw notFound('no such checkout session');
      page(req, res, s, 409, 'This checkout is already closed.');
      return;
    }
    const origin = auditOriginOf(req);
    if (decision === 'pay') await pay(claimed, origin);
    else await fail(claimed, origin);
    res.redirect(303, withSessionId(decision === 'pay' ? claimed.success_url : claimed.cancel_url, id));
  });

  return router;
}
