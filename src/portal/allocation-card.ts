import type { Request, Response } from 'express';
import { sql } from 'drizzle-orm';
import { principalOf } from '../auth/principal.js';
import { queryRows, type Db } from '../db/client.js';
import { ownerBalance } from '../billing/service.js';
import { orgAccount, poolAccount } from '../billing/ledger.js';
import { html, type SafeHtml } from '../page-kit/html.js';
import { tokensAndMoney } from './money.js';
import { fmtTime } from './billing-card-kit.js';
import { formValue, postForm } from './components.js';

// The owner's pool on the billing page: every organization's allocation in one form, and the moves
// between the pool and this organization. A refused allocation re-renders the page with what was typed
// and the focus on the organization's field in error, which the browser scrolls into view: the person
// is back where the form is. (Not through a `#pool` fragment: a page opened at a fragment skips
// autofocus.)

/** A refused allocation: the message, and whose field it is about (its `client_…` id). */
export interface AllocationError {
  text: string;
  orgId?: string;
}

export async function allocationCard(
  db: Db,
  req: Request,
  res: Response,
  error?: AllocationError,
): Promise<SafeHtml> {
  const pool = await ownerBalance(db, principalOf(req).userId);
  const inError = error?.orgId ?? pool.allocations[0]?.org_id;
  const rows = pool.allocations.map((a, i) => {
    const id = `f-alloc-${i}`;
    const value = error ? formValue(req, a.org_id, 40) : String(a.allocated_credits);
    const mine = error !== undefined && a.org_id === inError;
    return html`<div class="field"><label for="${id}">${a.name}${a.is_default ? ' (personal)' : ''} <span class="hint">now ${tokensAndMoney(a.allocated_credits)}</span></label>
<input id="${id}" name="${a.org_id}" type="text" inputmode="numeric" value="${value}" autocomplete="off"${mine ? html` aria-invalid="true" aria-describedby="f-alloc-error" autofocus` : ''}></div>`;
  });
  return html`<section class="card" id="pool" aria-labelledby="h-pool"><h2 id="h-pool">Your tokens across organizations</h2>
<p><strong>${tokensAndMoney(pool.global_credits)}</strong> in all: ${tokensAndMoney(pool.unallocated_credits)} not allocated, the rest allocated below. ${tokensAndMoney(pool.lifetime_granted_credits)} granted since you joined.</p>
${error ? html`<div class="field-error" id="f-alloc-error" role="alert">${error.text}</div>` : ''}
${postForm(req, res, '/account/allocations', html`<input type="hidden" name="return_to" value="${req.path}">${rows}<div class="actions"><button type="submit" class="secondary">Save allocations</button></div>`)}</section>`;
}

const MOVES_SHOWN = 10;

/**
 * The newest allocation moves between the owner's pool and this organization (ledger types `allocate`
 * and `reclaim`), which the API's transaction list leaves out (interface document, Transaction: its
 * five types). Read along their own partial index (`billing_entries_org_moves_idx`, in its order: -id),
 * which no call writes.
 */
export async function allocationMovesTable(db: Db, orgKey: string, ownerId: string): Promise<SafeHtml> {
  const pool = poolAccount(ownerId);
  const org = orgAccount(orgKey);
  const moves = await queryRows<{
    amount: unknown;
    org_amount: unknown;
    org_balance_after: unknown;
    created_at: string | Date;
  }>(
    db,
    sql`select amount, org_amount, org_balance_after, created_at from billing_entries
        where type in ('allocate', 'reclaim') and org_key = ${orgKey}
          and ((from_account = ${pool} and to_account = ${org}) or (to_account = ${pool} and from_account = ${org}))
        order by -id limit ${MOVES_SHOWN}`,
  );
  if (moves.length === 0) return html`<p class="muted">No allocation moves yet.</p>`;
  return html`<table class="stack" aria-labelledby="h-moves"><thead><tr><th scope="col">Time (UTC)</th><th scope="col">Move</th><th scope="col" class="num">Amount</th><th scope="col" class="num">Balance after</th></tr></thead>
<tbody>${moves.map((m) => {
    const amount = Number(m.org_amount ?? 0);
    const unix = Math.floor(new Date(m.created_at).getTime() / 1000);
    return html`<tr><td data-label="Time (UTC)">${fmtTime(unix)}</td><td data-label="Move">${amount >= 0 ? "From the owner's pool" : "Back to the owner's pool"}</td><td class="num" data-label="Amount">${amount > 0 ? '+' : ''}${tokensAndMoney(amount)}</td><td class="num" data-label="Balance after">${tokensAndMoney(Number(m.org_balance_after ?? 0))}</td></tr>`;
  })}</tbody></table>`;
}
