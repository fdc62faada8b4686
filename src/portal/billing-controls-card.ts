import type { Request, Response } from 'express';
import type { Deps } from '../deps.js';
import { principalOf } from '../auth/principal.js';
import { disableAutoTopup, getAutoTopup, setAutoTopup } from '../billing/auto-topup-settings.js';
import { auditOriginOf } from '../audit/context.js';
import {
  budgetTargets,
  clearBudget,
  listBudgets,
  setBudget,
  tokenHolder,
  type BudgetJson,
} from '../billing/budgets.js';
import { BUDGET_PERIODS, type BudgetPeriod } from '../db/tables/budgets.js';
import { CREDITS_PER_CENT } from '../billing/service.js';
import { html, type SafeHtml } from '../page-kit/html.js';
import { formValue, postForm } from './components.js';
import {
  billingPath,
  cardMessage,
  fieldMistake,
  fieldState,
  fmtTime,
  fmtTokens,
  fmtUsd,
  isChargeCents,
  parseCents,
  parseTokens,
  type BillingOrg,
  type CardError,
  type OwnerAction,
} from './billing-card-kit.js';
import { tokensAndMoney } from './money.js';

// The billing page's cards for auto top-up and member budgets: auto top-up (trigger, amount, monthly cap; the
// owner turns it on, changes it or off, members see it) and member budgets (the owner sets or removes a
// budget of a member or of one of a member's svc_ tokens; a member sees their own). On the services the
// API routes use (PUT …/auto-topup, PUT …/members/{user}/budget, PUT …/tokens/{id}/budget), with the
// same limits (CONTRACT §8: amounts in cents, 1.00 to 10,000.00 USD a charge).

const CAP_MAX = 100_000_000;

/** "who" a budget row is about, in words. */
type Names = Map<string, string>;
const whoOf = (b: BudgetJson, people: Names, tokens: Map<number, string>) =>
  b.token_id === null
    ? (people.get(b.user_id) ?? b.user_id)
    : `token ${tokens.get(b.token_id) ?? `#${String(b.token_id)}`} of ${people.get(b.user_id) ?? b.user_id}`;

export async function autoTopupCard(
  req: Request,
  res: Response,
  deps: Deps,
  org: BillingOrg,
  error?: CardError,
): Promise<SafeHtml> {
  const base = billingPath(org.orgKey);
  const s = await getAutoTopup(deps.db, org.orgKey);
  const on = s?.enabled === true;
  const status = s
    ? html`<p>${on ? html`<strong>On</strong>: when the balance falls below ${tokensAndMoney(s.trigger_credits)}, ${fmtUsd(s.amount_usd)} (${fmtTokens(s.amount_usd * CREDITS_PER_CENT)} tokens) is charged to the default card, at most ${fmtUsd(s.monthly_cap_usd)} a month.` : html`<strong>Off.</strong>`}</p>
${s.disabled_reason ? html`<p><span class="badge warn">Turned off by svc</span> ${s.disabled_reason}. Check the card, then save the settings to turn it on again.</p>` : ''}
<p class="muted">Charged this month: ${fmtUsd(s.charged_this_month_usd)} of ${fmtUsd(s.monthly_cap_usd)}.</p>`
    : html`<p><strong>Off.</strong></p>`;
  if (org.role !== 'owner')
    return html`<section class="card" aria-labelledby="h-autotopup"><h2 id="h-autotopup">Auto top-up</h2>${status}<p class="muted">Only the organization's owner changes it.</p></section>`;
  const mine = error?.card === 'autotopup';
  const value = (name: string, current: string) => (mine ? formValue(req, name, 32) : current);
  const trigger = fieldState(error, 'autotopup', 'trigger', 'f-at-trigger', 'f-at-trigger-hint');
  const amount = fieldState(error, 'autotopup', 'amount', 'f-at-amount', 'f-at-amount-hint');
  const cap = fieldState(error, 'autotopup', 'cap', 'f-at-cap', 'f-at-cap-hint');
  return html`<section class="card" aria-labelledby="h-autotopup"><h2 id="h-autotopup">Auto top-up</h2>${status}
${cardMessage(error, 'autotopup', ['trigger', 'amount', 'cap'])}
${postForm(
  req,
  res,
  `${base}/auto-topup`,
  html`<div class="field"><label for="f-at-trigger">When the balance falls below (tokens) <span class="hint" id="f-at-trigger-hint">once each time it falls below; a top-up back above it arms it again</span></label>
<input id="f-at-trigger" name="trigger" type="text" inputmode="numeric" autocomplete="off" required value="${value('trigger', s ? String(s.trigger_credits) : '')}"${trigger.attrs}>${trigger.message}</div>
<div class="field"><label for="f-at-amount">Charge (US dollars) <span class="hint" id="f-at-amount-hint">1.00 to 10,000.00, charged to the default card without asking you</span></label>
<input id="f-at-amount" name="amount" type="text" inputmode="decimal" autocomplete="off" required value="${value('amount', s ? (s.amount_usd / 100).toFixed(2) : '')}"${amount.attrs}>${amount.message}</div>
<div class="field"><label for="f-at-cap">At most per month (US dollars) <span class="hint" id="f-at-cap-hint">a charge that would pass it is not made</span></label>
<input id="f-at-cap" name="cap" type="text" inputmode="decimal" autocomplete="off" required value="${value('cap', s ? (s.monthly_cap_usd / 100).toFixed(2) : '')}"${cap.attrs}>${cap.message}</div>
<div class="actions"><button type="submit" class="secondary">${on ? 'Save auto top-up' : 'Turn on auto top-up'}</button></div>`,
)}
${on ? postForm(req, res, `${base}/auto-topup/off`, html`<div class="actions"><button type="submit" class="danger">Turn off auto top-up</button></div>`) : ''}</section>`;
}

export async function budgetsCard(
  req: Request,
  res: Response,
  deps: Deps,
  org: BillingOrg,
  error?: CardError,
): Promise<SafeHtml> {
  const base = billingPath(org.orgKey);
  const owner = org.role === 'owner';
  const userId = principalOf(req).userId;
  const [budgets, targets] = await Promise.all([
    listBudgets(deps.db, org.orgKey, owner ? undefined : userId),
    budgetTargets(deps.db, org.orgKey),
  ]);
  const people: Names = new Map(targets.members.map((m) => [m.user_id, `${m.name} (${m.email})`]));
  const tokens = new Map(targets.tokens.map((t) => [t.token_id, `${t.token_name} (${t.token_prefix}…)`]));
  const rows = budgets.map((b, i) => {
    const who = whoOf(b, people, tokens);
    const target = b.token_id === null ? `member:${b.user_id}` : `token:${String(b.token_id)}`;
    return html`<tr><td data-label="Who">${owner ? who : b.token_id === null ? 'You' : who}</td><td data-label="Period">${b.period}</td><td class="num" data-label="Budget">${tokensAndMoney(b.budget_credits)}</td><td class="num" data-label="Used">${tokensAndMoney(b.spent_credits)}</td><td class="num" data-label="Left">${tokensAndMoney(b.remaining_credits)}</td><td data-label="Resets">${fmtTime(b.period_end)} UTC</td>${
      owner
        ? html`<td>${postForm(req, res, `${base}/budgets/remove`, html`<input type="hidden" name="target" value="${target}"><button type="submit" class="danger" id="f-budget-rm-${String(i)}" aria-label="Remove the budget of ${who}">Remove</button>`)}</td>`
        : ''
    }</tr>`;
  });
  const table =
    budgets.length === 0
      ? html`<p class="muted">${owner ? 'No budgets: every member may spend the whole allocation.' : 'You have no budget here: your calls are limited by the allocation alone.'}</p>`
      : html`<table class="stack" aria-labelledby="h-budgets"><thead><tr><th scope="col">Who</th><th scope="col">Period</th><th scope="col" class="num">Budget</th><th scope="col" class="num">Used</th><th scope="col" class="num">Left</th><th scope="col">Resets</th>${owner ? html`<th scope="col">Remove</th>` : ''}</tr></thead>
<tbody>${rows}</tbody></table>`;
  const intro = owner
    ? html`<p class="muted">A member, or one of a member's API tokens, may spend at most this many tokens a UTC day, week or month, inside the allocation; a call beyond it is refused (402 member_budget_exhausted). A token's budget applies on top of its member's.</p>`
    : html`<p class="muted">What you (and your API token) may spend here per period; calls beyond it are refused.</p>`;
  if (!owner)
    return html`<section class="card" aria-labelledby="h-budgets"><h2 id="h-budgets">Your budget</h2>${intro}${table}</section>`;

  const mine = error?.card === 'budgets';
  const chosen = mine ? formValue(req, 'target', 200) : '';
  const chosenPeriod = mine ? formValue(req, 'period', 16) : 'month';
  const target = fieldState(error, 'budgets', 'target', 'f-budget-target');
  const amount = fieldState(error, 'budgets', 'budget', 'f-budget-amount', 'f-budget-amount-hint');
  const option = (value: string, label: string) =>
    html`<option value="${value}"${value === chosen ? html` selected` : ''}>${label}</option>`;
  return html`<section class="card" aria-labelledby="h-budgets"><h2 id="h-budgets">Member budgets</h2>${intro}${table}
<h3>Set a budget</h3>
${cardMessage(error, 'budgets', ['target', 'budget'])}
${postForm(
  req,
  res,
  `${base}/budgets`,
  html`<div class="field"><label for="f-budget-target">For</label>
<select id="f-budget-target" name="target" required${target.attrs}>${targets.members.map((m) => option(`member:${m.user_id}`, `${m.name} (${m.email})`))}${targets.tokens.map((t) => option(`token:${String(t.token_id)}`, `Token ${t.token_name} (${t.token_prefix}…) of ${people.get(t.user_id) ?? t.user_id}`))}</select>${target.message}</div>
<div class="field"><label for="f-budget-period">Per</label>
<select id="f-budget-period" name="period">${BUDGET_PERIODS.map((p) => html`<option value="${p}"${p === chosenPeriod ? html` selected` : ''}>${p} (UTC)</option>`)}</select></div>
<div class="field"><label for="f-budget-amount">Budget in tokens <span class="hint" id="f-budget-amount-hint">0 stops the member's calls; a new amount keeps what the period used so far</span></label>
<input id="f-budget-amount" name="budget" type="text" inputmode="numeric" autocomplete="off" required value="${mine ? formValue(req, 'budget', 32) : ''}"${amount.attrs}>${amount.message}</div>
<div class="actions"><button type="submit" class="secondary">Save the budget</button></div>`,
)}</section>`;
}

/** `member:<user id>` or `token:<id>` of the form → the budget's target in this org (404 when not there). */
async function targetOf(deps: Deps, org: BillingOrg, text: string) {
  const [kind, id] = text.split(':', 2);
  if (kind === 'member' && id && /^usr_[A-Za-z0-9_-]{1,64}$/.test(id))
    return { orgKey: org.orgKey, userId: id, apiTokenId: null };
  if (kind === 'token' && id && /^\d{1,10}$/.test(id)) {
    const apiTokenId = Number(id);
    return { orgKey: org.orgKey, userId: await tokenHolder(deps.db, org.orgKey, apiTokenId), apiTokenId };
  }
  throw fieldMistake('target', 'Choose a member or a token of this organization.');
}

export function billingControlsActions(deps: Deps, ownerAction: OwnerAction): void {
  ownerAction('auto-topup', 'autotopup', async (req, res, org) => {
    const trigger = parseTokens(formValue(req, 'trigger', 32));
    if (trigger === null || trigger > 1_000_000_000_000)
      throw fieldMistake('trigger', 'The trigger must be a whole number of tokens, like 20000.');
    const amount = parseCents(formValue(req, 'amount', 32));
    if (amount === null || !isChargeCents(amount))
      throw fieldMistake('amount', 'Enter an amount from 1.00 to 10,000.00 US dollars, like 10 or 12.50.');
    const cap = parseCents(formValue(req, 'cap', 32));
    if (cap === null || cap > CAP_MAX)
      throw fieldMistake('cap', 'Enter the monthly limit in US dollars, like 50 or 100.00.');
    if (cap < amount) throw fieldMistake('cap', 'The monthly limit must be at least one charge.');
    await setAutoTopup(
      deps.db,
      org.orgKey,
      { trigger_credits: trigger, amount_usd: amount, monthly_cap_usd: cap },
      auditOriginOf(req),
    );
    res.redirect(303, `${billingPath(org.orgKey)}?notice=autotopup_saved`);
  });

  ownerAction('auto-topup/off', 'autotopup', async (req, res, org) => {
    await disableAutoTopup(deps.db, org.orgKey, null, auditOriginOf(req));
    res.redirect(303, `${billingPath(org.orgKey)}?notice=autotopup_off`);
  });

  ownerAction('budgets', 'budgets', async (req, res, org) => {
    const target = await targetOf(deps, org, formValue(req, 'target', 200));
    const period = formValue(req, 'period', 16);
    if (!(BUDGET_PERIODS as readonly string[]).includes(period))
      throw fieldMistake('period', 'Choose a period: day, week or month.');
    const budget = parseTokens(formValue(req, 'budget', 32));
    if (budget === null || budget > Number.MAX_SAFE_INTEGER)
      throw fieldMistake('budget', 'The budget must be a whole number of tokens, 0 or more.');
    await setBudget(deps.db, target, period as BudgetPeriod, budget, auditOriginOf(req));
    res.redirect(303, `${billingPath(org.orgKey)}?notice=budget_saved`);
  });

  ownerAction('budgets/remove', 'budgets', async (req, res, org) => {
    const target = await targetOf(deps, org, formValue(req, 'target', 200));
    await clearBudget(deps.db, target, auditOriginOf(req));
    res.redirect(303, `${billingPath(org.orgKey)}?notice=budget_removed`);
  });
}
