import { sql } from 'drizzle-orm';
import { queryRows, type Db } from '../db/client.js';
import { HOLD_RETENTION_DAYS } from './hold-retention.js';
import { rollupDiffersFull } from './usage-rollup-check.js';

// The ledger invariants (docs/contributing/billing-internals.md), checked against the database.
// Each query returns the offending rows; an empty result means the invariant holds. The tests run them one
// by one (checkInvariants); reconciliation's full check (reconcile-full.ts) finds the same in fewer passes
// and names what it found with these queries.

export interface Check {
  name: string;
  query: ReturnType<typeof sql>;
}

export const CHECKS: Check[] = [
  {
    name: 'inside account below zero (holds included)',
    query: sql`select id, balance, held from billing_accounts
               where kind in ('org', 'pool') and (balance < held or held < 0 or balance < 0)`,
  },
  {
    // debt:<owner> holds minus what the owner owes (debt.ts): debt is never negative.
    name: 'debt account above zero',
    query: sql`select id, balance from billing_accounts where kind = 'debt' and balance > 0`,
  },
  {
    name: 'stored balance differs from the sum of its ledger rows',
    query: sql`select a.id, a.balance, coalesce(i.s, 0) - coalesce(o.s, 0) as ledger
               from billing_accounts a
               left join (select to_account, sum(amount) s from billing_entries group by to_account) i on i.to_account = a.id
               left join (select from_account, sum(amount) s from billing_entries group by from_account) o on o.from_account = a.id
               where a.balance <> coalesce(i.s, 0) - coalesce(o.s, 0)`,
  },
  {
    name: 'accounts do not sum to zero',
    query: sql`select sum(balance) as total from billing_accounts having sum(balance) <> 0`,
  },
  {
    name: 'held differs from the sum of active holds',
    query: sql`select a.id, a.held, coalesce(h.s, 0) as holds from billing_accounts a
               left join (select account_id, sum(amount) s from billing_holds where status = 'held' group by account_id) h
                 on h.account_id = a.id
               where a.held <> coalesce(h.s, 0)`,
  },
  {
    name: 'settled hold differs from its usage row',
    query: sql`select h.request_id, h.debited, e.amount from billing_holds h
               left join billing_entries e on e.key = 'usage:' || h.request_id
               where (h.status = 'settled' and h.debited > 0 and (e.amount is null or e.amount <> h.debited))
                  or (h.status <> 'settled' and e.id is not null)
                  or (h.status = 'settled' and h.debited = 0 and e.id is not null)
                  or h.debited > h.amount`,
  },
  {
    // Closed holds are deleted after HOLD_RETENTION_DAYS (hold-retention.ts): older usage rows had theirs.
    name: 'usage row without a settled hold',
    // The hold is looked up by its primary key, read off the entry's key (`usage:<request id>` or
    // `usage:<request id>:excess`): matching the keys as expressions of every hold planned as a nested
    // loop over all usage rows × all settled holds, and hung past a few hundred thousand rows.
    query: sql`select e.key from billing_entries e
               where e.type = 'usage' and e.created_at > now() - make_interval(days => ${HOLD_RETENTION_DAYS - 1})
                 and not exists (
                 select 1 from billing_holds h where h.status = 'settled'
                   and h.request_id in (substr(e.key, 7), regexp_replace(substr(e.key, 7), ':excess$', '')))`,
  },
  {
    name: 'deleted client still holds tokens',
    query: sql`select a.id, a.balance from billing_accounts a join orgs o on a.id = 'org:' || o.id
               where o.deleted_at is not null and a.balance <> 0`,
  },
  {
    // A won dispute's give-back also comes from src:purchases (type refund): not a grant, no allocation half.
    name: 'allocation half of a grant missing or different',
    // The grant pays the owner's debt first (`<key>:debt`, ledger.ts grantToOrg): the two halves add up.
    query: sql`select g.key from billing_entries g
               left join billing_entries a on a.key = g.key || ':allocate'
               left join billing_entries d on d.key = g.key || ':debt' and d.type = 'debt_payment'
               where g.from_account like 'src:%' and g.key not like 'test:%' and g.type not in ('refund', 'debt')
                 and coalesce(a.amount, 0) + coalesce(d.amount, 0) <> g.amount`,
  },
  // A paid invoice grants at most once, and only with money paid; one of another price than
  // STRIPE_PRICE_PRO grants nothing (the price is not stored, so "exactly one" is not checkable here:
  // reconcile re-applies paid invoices from Stripe instead). CONTRACT §8 "Grants come only from what was paid".
  {
    name: 'paid subscription invoice granted twice or without money paid',
    query: sql`select i.id from billing_invoices i
               where i.status = 'paid' and i.billing_reason in ('subscription_create', 'subscription_cycle')
                 and ((select count(*) from billing_entries e where e.key = 'grant:invoice:' || i.id) > 1
                   or (i.amount_paid_cents <= 0
                       and exists (select 1 from billing_entries e where e.key = 'grant:invoice:' || i.id)))`,
  },
  {
    name: 'completed top-up session without exactly one grant',
    query: sql`select s.id from billing_checkout_sessions s
               where s.kind = 'topup' and s.status = 'complete'
                 and (select count(*) from billing_entries e where e.key = 'grant:session:' || s.id) <> 1`,
  },
  // Refunds (refunds.ts): each refund id moves tokens at most once per side (unique ledger keys), and
  // what moved is what its row says; a payment never gives back more than it granted (refunds and
  // withdrawn disputes together, payment-reversals.ts).
  {
    name: 'refund ledger rows differ from their refund',
    query: sql`select r.id, r.status, r.from_client, r.from_pool, c.amount as client_row, p.amount as pool_row
               from billing_refunds r
               left join billing_entries c on c.key = 'refund:' || r.id
               left join billing_entries p on p.key = 'refund:' || r.id || ':pool'
               where coalesce(c.amount, 0) <> r.from_client or coalesce(p.amount, 0) <> r.from_pool
                  or (r.status <> 'applied' and (c.id is not null or p.id is not null))`,
  },
  {
    name: 'refund row without an applied refund',
    query: sql`select e.key from billing_entries e
               where e.type = 'refund' and e.key not like 'dispute:%' and not exists (
                 select 1 from billing_refunds r where r.status = 'applied'
                   and (e.key = 'refund:' || r.id or e.key = 'refund:' || r.id || ':pool'))`,
  },
  // Disputes (disputes.ts): the withdrawal rows equal what the dispute took while it is withdrawn or
  // reinstated, the reinstatement rows equal it once reinstated, and no other dispute rows exist.
  {
    name: 'dispute ledger rows differ from their dispute',
    query: sql`select d.id, d.state, d.from_client, d.from_pool, c.amount as client_row, p.amount as pool_row,
                      rc.amount as client_back, rp.amount as pool_back
               from billing_disputes d
               left join billing_entries c on c.key = 'dispute:' || d.id
               left join billing_entries p on p.key = 'dispute:' || d.id || ':pool'
               left join billing_entries rc on rc.key = 'dispute:' || d.id || ':reinstated'
               left join billing_entries rp on rp.key = 'dispute:' || d.id || ':reinstated:pool'
               where (d.state in ('withdrawn', 'reinstated')
                        and (coalesce(c.amount, 0) <> d.from_client or coalesce(p.amount, 0) <> d.from_pool))
                  or (d.state not in ('withdrawn', 'reinstated') and (c.id is not null or p.id is not null or d.credits <> 0))
                  or (d.state = 'reinstated' and (coalesce(rc.amount, 0) <> d.from_client or coalesce(rp.amount, 0) <> d.from_pool))
                  or (d.state <> 'reinstated' and (rc.id is not null or rp.id is not null))`,
  },
  {
    name: 'dispute row without its dispute',
    query: sql`select e.key from billing_entries e
               where e.type = 'refund' and e.key like 'dispute:%' and not exists (
                 select 1 from billing_disputes d
                 where e.key in ('dispute:' || d.id, 'dispute:' || d.id || ':pool',
                                 'dispute:' || d.id || ':reinstated', 'dispute:' || d.id || ':reinstated:pool'))`,
  },
  {
    name: 'payment refunded beyond its grant or differing from its refunds',
    query: sql`select p.payment_intent, p.credits, p.refunded_credits, coalesce(s.credits, 0) as refunds,
                      coalesce(d.credits, 0) as disputes
               from billing_payments p
               left join (select payment_intent, sum(credits) credits from billing_refunds where status = 'applied'
                          group by payment_intent) s on s.payment_intent = p.payment_intent
               left join (select payment_intent, sum(credits) credits from billing_disputes where state = 'withdrawn'
                          group by payment_intent) d on d.payment_intent = p.payment_intent
               where p.refunded_credits > p.credits or p.refunded_cents > p.amount_cents
                  or p.refunded_credits <> coalesce(s.credits, 0) + coalesce(d.credits, 0)`,
  },
  {
    // The usage API's totals read the rollup (docs/usage.md "The rollup"): it must sum the records.
    name: 'usage rollup differs from its usage records',
    query: rollupDiffersFull,
  },
];

export interface Violation {
  check: string;
  rows: unknown[];
}

/** Every invariant violated right now (empty when the ledger is sound). */
export async function checkInvariants(db: Db): Promise<Violation[]> {
  const out: Violation[] = [];
  for (const c of CHECKS) {
    const rows = await queryRows<unknown>(db, c.query);
    if (rows.length > 0) out.push({ check: c.name, rows: rows.slice(0, 20) });
  }
  return out;
}
