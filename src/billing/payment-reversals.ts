import { sql } from 'drizzle-orm';
import { queryRows, type Db } from '../db/client.js';
import { recordDebt } from './debt.js';
import { usdOfCents } from './par.js';
import {
  debtAccount,
  ensureDebtAccount,
  ensureOrgAccounts,
  lockAccounts,
  orgAccount,
  poolAccount,
  SOURCE_PURCHASES,
  transfer,
} from './ledger.js';

// Money leaving a payment, and coming back: the one take-back that refunds (refunds.ts) and dispute
// withdrawals (disputes.ts) share, and its exact reverse for a dispute that is won.
//
// A take-back claws back the payment's tokens in proportion to the money that left (cumulative
// rounding: round(total left so far × granted / paid) − already taken, so parts that add up to the
// whole payment take back exactly the grant). The client gives what it has minus its holds, then the
// owner's unallocated pool, then the owner's other clients' unheld balances (CONTRACT §8, in the order of
// their ids); what none has was already spent: the `shortfall`, recorded as the owner's debt (debt.ts), so
// a balance never goes below zero and nothing is lost. Ledger rows keyed `<key>` (the client's, shown as a
// negative `refund`), `<key>:from:<org>` (another client's tokens to the pool), `<key>:pool` and
// `<key>:debt`, so each happens once.
//
// Lock order, the same on every path: the payment row (billing_payments), then the refund or dispute
// row, then the ledger accounts (ascending id, ledger.ts).

export interface PaymentRow {
  payment_intent: string;
  grant_key: string | null;
  org_key: string | null;
  owner_id: string | null;
  credits: unknown;
  amount_cents: unknown;
  refunded_cents: unknown;
  refunded_credits: unknown;
}

export const num = (v: unknown): number => Number(v ?? 0);
/** 1000 → "$10.00" (src/billing/par.ts: money as every page shows it). */
export const usd = usdOfCents;
export const tokens = (n: number) => n.toLocaleString('en-US');

/** Claims (creating if needed) and locks a payment's row; every refund, dispute and grant path starts here. */
export async function lockPayment(tx: Db, paymentIntent: string): Promise<PaymentRow> {
  await tx.execute(
    sql`insert into billing_payments (payment_intent) values (${paymentIntent}) on conflict do nothing`,
  );
  const [row] = await queryRows<PaymentRow>(
    tx,
    sql`select * from billing_payments where payment_intent = ${paymentIntent} for update`,
  );
  return row!;
}

export interface TakenBack {
  /** Tokens due back (the proportional share), split into what the client and the pool gave and the shortfall. */
  credits: number;
  fromClient: number;
  fromPool: number;
  shortfall: number;
  /** Cents counted against the payment (the amount, capped at what had not left yet). */
  reversedCents: number;
}

/**
 * Takes back the tokens `amountCents` of the payment's money stands for (the payment's row locked by the
 * caller, its grant known). `describe` words the ledger rows once the split is known.
 */
export async function takeBack(
  tx: Db,
  input: { paymentIntent: string; amountCents: number; key: string; describe: (t: TakenBack) => string },
): Promise<TakenBack> {
  const [p] = await queryRows<PaymentRow>(
    tx,
    sql`select * from billing_payments where payment_intent = ${input.paymentIntent}`,
  );
  const paid = num(p!.amount_cents);
  const granted = num(p!.credits);
  const before = num(p!.refunded_cents);
  const after = Math.min(paid, before + input.amountCents);
  const credits =
    paid > 0
      ? Math.max(0, Math.min(granted, Math.round((after * granted) / paid)) - num(p!.refunded_credits))
      : 0;
  const ownerId = p!.owner_id!;
  const org = orgAccount(p!.org_key!);
  const pool = poolAccount(ownerId);
  // The owner's other clients, in a fixed order (their ids), all locked with the rest in the one global
  // order (ledger.ts): two take-backs of one owner never wait on each other crosswise.
  const others = (
    await queryRows<{ id: string }>(
      tx,
      sql`select id from orgs where owner_id = ${ownerId} and id <> ${p!.org_key!} and deleted_at is null order by id`,
    )
  ).map((r) => r.id);
  await ensureDebtAccount(tx, ownerId);
  const accounts = await lockAccounts(tx, [
    debtAccount(ownerId),
    org,
    ...others.map(orgAccount),
    pool,
    SOURCE_PURCHASES,
  ]);
  const available = (id: string) => {
    const a = accounts.get(id);
    return a ? Math.max(0, a.balance - a.held) : 0;
  };
  const fromClient = Math.min(credits, available(org));
  const fromPoolItself = Math.min(credits - fromClient, available(pool));
  // Then the owner's other clients' unheld balances (CONTRACT §8): each gives back to the pool first (a
  // `reclaim` on that client, its allocation lowered), so the pool's one row takes all of it.
  let fromOthers = 0;
  for (const other of others) {
    const take = Math.min(credits - fromClient - fromPoolItself - fromOthers, available(orgAccount(other)));
    if (take <= 0) continue;
    await transfer(tx, {
      key: `${input.key}:from:${other}`,
      from: orgAccount(other),
      to: pool,
      amount: take,
      type: 'reclaim',
      description: 'Taken back for a refund or dispute of another client of the owner',
      shownTo: { orgKey: other, side: 'from' },
    });
    await tx.execute(
      sql`update billing_accounts set allocation = greatest(allocation - ${take}, 0) where id = ${orgAccount(other)}`,
    );
    fromOthers += take;
  }
  const fromPool = fromPoolItself + fromOthers;
  const taken: TakenBack = {
    credits,
    fromClient,
    fromPool,
    shortfall: credits - fromClient - fromPool,
    reversedCents: Math.max(0, after - before),
  };
  const description = input.describe(taken);
  if (fromClient > 0) {
    await transfer(tx, {
      key: input.key,
      from: org,
      to: SOURCE_PURCHASES,
      amount: fromClient,
      type: 'refund',
      description,
      shownTo: { orgKey: p!.org_key!, side: 'from' },
    });
    // The tokens leave the client's allocation as they came in with the grant (ledger.ts grantToOrg).
    await tx.execute(
      sql`update billing_accounts set allocation = greatest(allocation - ${fromClient}, 0) where id = ${org}`,
    );
  }
  if (fromPool > 0) {
    await transfer(tx, {
      key: `${input.key}:pool`,
      from: pool,
      to: SOURCE_PURCHASES,
      amount: fromPool,
      type: 'refund',
      description,
    });
  }
  // What no balance of the owner's could give is the owner's debt, paid by their next grants.
  await recordDebt(tx, {
    key: `${input.key}:debt`,
    ownerId,
    to: SOURCE_PURCHASES,
    amount: taken.shortfall,
    type: 'debt',
    description: `${description}: owed`,
  });
  await tx.execute(sql`
    update billing_payments set refunded_cents = ${after}, refunded_credits = refunded_credits + ${credits}
    where payment_intent = ${input.paymentIntent}`);
  return taken;
}

/**
 * The exact reverse of one take-back (the payment's row locked by the caller): the client's part goes
 * back to the client (its owner's default client if it was deleted meanwhile, as purchases do), the
 * pool's part to the pool, keyed `<key>` and `<key>:pool`; the payment's counters drop by what the
 * take-back added, so a later refund is measured as if the take-back never happened. The shortfall was
 * recorded as the owner's debt: what is still owed of it is cancelled, what was paid comes back to the pool.
 */
export async function giveBack(
  tx: Db,
  input: { paymentIntent: string; key: string; taken: TakenBack; description: string },
): Promise<void> {
  const [p] = await queryRows<PaymentRow>(
    tx,
    sql`select * from billing_payments where payment_intent = ${input.paymentIntent}`,
  );
  const { fromClient, fromPool, credits, reversedCents } = input.taken;
  // The client's row locked (FOR SHARE, before any account, as a deletion locks it before its accounts;
  // webhooks.ts grantTarget): a deletion running now is waited for and seen, so the give-back never lands
  // in a client deleted after this read (the concurrent property test saw a deleted client left holding
  // 37,530 tokens that way).
  const [target] = await queryRows<{ id: string }>(
    tx,
    sql`select case when o.deleted_at is null then o.id
                    else (select d.id from orgs d where d.owner_id = o.owner_id and d.is_default) end as id
        from orgs o where o.id = ${p!.org_key} for share`,
  );
  const orgKey = target?.id ?? p!.org_key!;
  await ensureOrgAccounts(tx, orgKey, p!.owner_id!);
  await ensureDebtAccount(tx, p!.owner_id!);
  const locked = await lockAccounts(tx, [
    debtAccount(p!.owner_id!),
    SOURCE_PURCHASES,
    orgAccount(orgKey),
    poolAccount(p!.owner_id!),
  ]);
  // The shortfall became the owner's debt: the debt still owed of it is cancelled, and what later grants
  // already paid of it comes back to the pool (type `debt`, keyed `<key>:debt` and `<key>:debt:paid`).
  const shortfall = input.taken.shortfall;
  const owed = Math.max(0, -(locked.get(debtAccount(p!.owner_id!))?.balance ?? 0));
  const forgiven = Math.min(shortfall, owed);
  for (const [key, to, amount] of [
    [`${input.key}:debt`, debtAccount(p!.owner_id!), forgiven],
    [`${input.key}:debt:paid`, poolAccount(p!.owner_id!), shortfall - forgiven],
  ] as const) {
    if (amount > 0)
      await transfer(tx, {
        key,
        from: SOURCE_PURCHASES,
        to,
        amount,
        type: 'debt',
        description: input.description,
      });
  }
  if (fromClient > 0) {
    await transfer(tx, {
      key: input.key,
      from: SOURCE_PURCHASES,
      to: orgAccount(orgKey),
      amount: fromClient,
      type: 'refund',
      description: input.description,
      shownTo: { orgKey, side: 'to' },
    });
    await tx.execute(
      sql`update billing_accounts set allocation = allocation + ${fromClient} where id = ${orgAccount(orgKey)}`,
    );
  }
  if (fromPool > 0) {
    await transfer(tx, {
      key: `${input.key}:pool`,
      from: SOURCE_PURCHASES,
      to: poolAccount(p!.owner_id!),
      amount: fromPool,
      type: 'refund',
      description: input.description,
    });
  }
  await tx.execute(sql`
    update billing_payments set refunded_cents = greatest(refunded_cents - ${reversedCents}, 0),
                                refunded_credits = greatest(refunded_credits - ${credits}, 0)
    where payment_intent = ${input.paymentIntent}`);
}

/** A reversal whose take-back found tokens already spent (credits asked, shortfall not taken back). */
export interface ReversalShortfall {
  id: string;
  payment_intent: string;
  org_key: string;
  credits: number;
  shortfall: number;
}

/** A reversal waiting for the payment it belongs to. */
export interface ReversalAwaiting {
  id: string;
  payment_intent: string;
  amount_cents: number;
}

/** Where each reversal kind keeps its state: the row that took tokens back, and when it did. */
const REVERSAL_TABLES = {
  refunds: {
    table: sql.raw('billing_refunds'),
    state: sql.raw('status'),
    taken: sql.raw(`'applied'`),
    at: sql.raw('applied_at'),
  },
  disputes: {
    table: sql.raw('billing_disputes'),
    state: sql.raw('state'),
    taken: sql.raw(`'withdrawn'`),
    at: sql.raw('withdrawn_at'),
  },
} as const;

/**
 * Refunds or disputes for reconciliation output: tokens a take-back could not claw back (already
 * spent), and reversals still waiting for the payment they belong to.
 */
export async function reversalReport(
  db: Db,
  kind: keyof typeof REVERSAL_TABLES,
): Promise<{ shortfalls: ReversalShortfall[]; awaiting: ReversalAwaiting[] }> {
  const t = REVERSAL_TABLES[kind];
  // Amounts arrive as strings or numbers (bigint columns, by driver): num() makes them numbers.
  const shortfalls = await queryRows<
    Omit<ReversalShortfall, 'credits' | 'shortfall'> & { credits: unknown; shortfall: unknown }
  >(
    db,
    sql`select r.id, r.payment_intent, p.org_key, r.credits, r.shortfall from ${t.table} r
        join billing_payments p on p.payment_intent = r.payment_intent
        where r.${t.state} = ${t.taken} and r.shortfall > 0 order by r.${t.at} limit 100`,
  );
  const awaiting = await queryRows<Omit<ReversalAwaiting, 'amount_cents'> & { amount_cents: unknown }>(
    db,
    sql`select id, payment_intent, amount_cents from ${t.table} where ${t.state} = 'awaiting_payment' order by created_at limit 100`,
  );
  return {
    shortfalls: shortfalls.map((r) => ({ ...r, credits: num(r.credits), shortfall: num(r.shortfall) })),
    awaiting: awaiting.map((r) => ({ ...r, amount_cents: num(r.amount_cents) })),
  };
}
