import { Router, type Request, type Response } from 'express';
import { sql } from 'drizzle-orm';
import type { Deps } from '../deps.js';
import type { Auth } from '../auth/principal.js';
import { principalOf } from '../auth/principal.js';
import { queryRows } from '../db/client.js';
import { AppError, errorOf, COMMON_ERRORS } from '../http/errors.js';
import { requestOrigin } from '../http/origin.js';
import { clientIdOf, parseOrgId } from '../ids.js';
import { liveRole } from '../orgs/membership.js';
import {
  clientBalance,
  CREDITS_PER_CENT,
  findLiveOrg,
  PRO_PERIOD_CREDITS,
  ownerBalance,
  setAllocation,
} from '../billing/service.js';
import {
  getSubscription,
  listInvoices,
  listTransactions,
  openPortal,
  paymentMethods,
  startCheckout,
} from '../billing/payments.js';
import { html, verifyCsrfField, type SafeHtml } from '../page-kit/html.js';
import { requirePageSession } from '../auth/page-session.js';
import { auditOriginOf } from '../audit/context.js';
import { billingEventsActions, billingEventsCards, revealedSecretCard } from './billing-events-card.js';
import { autoTopupCard, billingControlsActions, budgetsCard } from './billing-controls-card.js';
import { notFoundPage } from './org-page-kit.js';
import { CHECKOUT_NOTICES, NOTICES, processorOrigins } from './billing-notices.js';
import { tokensAndMoney, usdOfTokens } from './money.js';
import { allocationCard, allocationMovesTable, type AllocationError } from './allocation-card.js';
import { PRO_PRICE_CENTS } from '../billing/dev-events.js';
import {
  errorField,
  fmtTime,
  fmtTokens,
  fmtUsd,
  isChargeCents,
  parseUsdAmount,
  type BillingCard,
  type BillingOrg,
  type CardError,
} from './billing-card-kit.js';
import {
  alert,
  applyErrorHeaders,
  formValue,
  clientError,
  errorText,
  postForm,
  queryValue,
  show,
  type Notice,
} from './components.js';

// The billing page of an organization, on the services of the billing routes
// (docs/billing.md) with their access rule (CONTRACT §8): members read; only the owner allocates, tops
// up, subscribes or opens the processor's portal; viewers see no billing. Every form is a plain POST
// with its CSRF field; one that ends at the processor (checkout, portal) answers 303 there, so the page
// lists the processor's origins in its form-action.

const date = (unix: number) => new Date(unix * 1000).toISOString().slice(0, 10);
const PAGE_SIZE = 20;

/** The page's sections, each a link from its top (docs/portal.md "What a person finds where"). */
function sectionsNav(owner: boolean): SafeHtml {
  const sections: [string, string][] = [
    ['overview', 'Overview'],
    ...(owner ? ([['buy', 'Buy tokens']] as [string, string][]) : []),
    ['automations', 'Automations'],
    ['budgets', "Members' budgets"],
    ['invoices', 'Invoices'],
    ['transactions', 'Transactions'],
  ];
  return html`<nav class="sections" aria-label="Billing sections"><ul>${sections.map(([id, label]) => html`<li><a href="#${id}">${label}</a></li>`)}</ul></nav>`;
}

export function billingPageRoutes(deps: Deps, auth: Auth): Router {
  const router = Router();
  const session = requirePageSession(auth);
  const { db } = deps;

  async function orgOf(req: Request): Promise<BillingOrg | null> {
    const orgKey = parseOrgId(String(req.params.clientId));
    const role = orgKey ? await liveRole(db, principalOf(req).userId, orgKey) : null;
    const org = orgKey && role ? await findLiveOrg(db, orgKey) : null;
    return org && role ? { orgKey: org.id, name: org.name, role } : null;
  }

  const base = (org: BillingOrg) => `/account/clients/${clientIdOf(org.orgKey)}/billing`;

  /** A declined card sends the person back through cancel_url: the processor's failed invoice tells them apart. */
  async function returnNotice(req: Request, org: BillingOrg): Promise<Notice | null> {
    const checkout = queryValue(req, 'checkout');
    if (checkout === 'cancelled') {
      const [failed] = await queryRows<{ one: number }>(
        db,
        sql`select 1 as one from billing_invoices where org_key = ${org.orgKey}
            and payment_failed_at > now() - interval '10 minutes' limit 1`,
      );
      return failed ? CHECKOUT_NOTICES.declined! : CHECKOUT_NOTICES.cancelled!;
    }
    return CHECKOUT_NOTICES[checkout] ?? NOTICES[queryValue(req, 'notice')] ?? null;
  }

  async function page(
    req: Request,
    res: Response,
    org: BillingOrg,
    opts: {
      notice?: Notice | null;
      status?: number;
      topupError?: string;
      allocationError?: AllocationError;
      cardError?: CardError;
    } = {},
  ) {
    if (org.role === 'viewer') {
      return show(req, res, {
        title: `Billing · ${org.name}`,
        body: html`<h1>Billing of ${org.name}</h1><div class="card"><p>Viewers do not see an organization's billing. Ask its owner.</p></div>`,
      });
    }
    const owner = org.role === 'owner';
    const offset = Math.max(0, Math.min(1_000_000, Number.parseInt(queryValue(req, 'offset'), 10) || 0));
    const [balance, subscription, invoices, methods, transactions] = await Promise.all([
      clientBalance(db, org.orgKey),
      getSubscription(db, org.orgKey).catch((err: unknown) => {
        if (err instanceof AppError && err.status === 404) return null;
        throw err;
      }),
      listInvoices(db, org.orgKey, 10, 0),
      paymentMethods(db, deps.billing, org.orgKey),
      listTransactions(db, org.orgKey, PAGE_SIZE + 1, offset),
    ]);
    const notice = opts.notice ?? (await returnNotice(req, org));

    const balanceCard = html`<section class="card" aria-labelledby="h-balance"><h2 id="h-balance">Balance</h2>
<p><strong>${tokensAndMoney(balance.balance_credits)}</strong> left of an allocation of ${tokensAndMoney(balance.allocation_credits)}.</p>
<p class="muted">Model calls of this organization's members are paid from this balance. One US dollar buys ${fmtTokens(100 * CREDITS_PER_CENT)} tokens.</p></section>`;

    const poolCard = owner ? await allocationCard(db, req, res, opts.allocationError) : html``;
    const cardError = opts.cardError;
    const eventsCards = owner ? await billingEventsCards(req, res, deps, org.orgKey, cardError) : html``;
    const autoTopup = await autoTopupCard(req, res, deps, org, cardError);
    const budgets = await budgetsCard(req, res, deps, org, cardError);
    // Shown by the GET that follows an endpoint's creation, once (POST/redirect/GET).
    const secretCard = owner ? await revealedSecretCard(req, deps, org.orgKey) : null;

    const topupCard = owner
      ? html`<section class="card" aria-labelledby="h-topup"><h2 id="h-topup">Buy tokens</h2>
${postForm(
  req,
  res,
  `${base(org)}/topup`,
  html`<div class="field"><label for="f-amount">Amount in US dollars <span class="hint" id="f-amount-hint">1.00 to 10,000.00; you see the tokens it buys before paying</span></label>
<input id="f-amount" name="amount" type="text" inputmode="decimal" required autocomplete="off" aria-describedby="f-amount-hint${opts.topupError ? ' f-amount-error' : ''}"${opts.topupError ? html` aria-invalid="true" autofocus` : ''}>
${opts.topupError ? html`<div class="field-error" id="f-amount-error">${opts.topupError}</div>` : ''}</div>
<div class="actions"><button type="submit" class="secondary">Review</button></div>`,
)}</section>`
      : html``;

    const proCard = html`<section class="card" aria-labelledby="h-pro"><h2 id="h-pro">Pro plan</h2>
${
  subscription
    ? html`<p>Status: <strong>${subscription.status}</strong>${subscription.cancel_at_period_end ? html` · <span class="badge warn">ends ${date(subscription.current_period_end)}</span>` : html` · renews ${date(subscription.current_period_end)}`}</p>
<p class="muted">Current period ${date(subscription.current_period_start)} to ${date(subscription.current_period_end)}.</p>
${owner ? postForm(req, res, `${base(org)}/portal`, html`<div class="actions"><button type="submit" class="secondary">${subscription.cancel_at_period_end ? 'Resume or manage the subscription' : 'Cancel or manage the subscription'}</button></div>`) : ''}`
    : html`<p>No subscription. <strong>Pro: ${usdOfTokens(PRO_PRICE_CENTS * CREDITS_PER_CENT)} / month, ${fmtTokens(PRO_PERIOD_CREDITS)} tokens</strong> added to this organization every month (worth ${usdOfTokens(PRO_PERIOD_CREDITS)} at par).</p>
${owner ? postForm(req, res, `${base(org)}/subscribe`, html`<div class="actions"><button type="submit">Subscribe to Pro</button></div>`) : ''}`
}</section>`;

    const invoicesCard = html`<section class="card" aria-labelledby="h-invoices"><h2 id="h-invoices">Invoices</h2>
${
  invoices.length === 0
    ? html`<p class="muted">No invoices yet.</p>`
    : html`<div class="scroll" role="region" tabindex="0" aria-labelledby="h-invoices"><table class="stack" aria-labelledby="h-invoices"><thead><tr><th scope="col">Date</th><th scope="col" class="num">Amount</th><th scope="col">Status</th><th scope="col">PDF</th></tr></thead>
<tbody>${invoices.map((i) => html`<tr><td data-label="Date">${date(i.created_at)}</td><td class="num" data-label="Amount">${fmtUsd(i.amount_due_cents)}</td><td data-label="Status">${i.status}${'payment_failed' in i ? html` <span class="badge warn">payment failed</span>` : ''}</td><td data-label="PDF">${i.invoice_pdf ? html`<a href="${i.invoice_pdf}">Invoice ${date(i.created_at)} (PDF)</a>` : '—'}</td></tr>`)}</tbody></table></div>`
}
<h3>Payment methods</h3>
${
  methods.length === 0
    ? html`<p class="muted">None on file.</p>`
    : html`<ul>${methods.map((m) => html`<li>${m.brand} ending ${m.last4}, expires ${String(m.exp_month).padStart(2, '0')}/${m.exp_year}${m.is_default ? ' (default)' : ''}</li>`)}</ul>`
}${owner ? html`<p class="muted">Change them through “manage the subscription” or at your next checkout.</p>` : ''}</section>`;

    const live = await findLiveOrg(db, org.orgKey);
    const moves = live ? await allocationMovesTable(db, org.orgKey, live.ownerId) : html``;
    const more = transactions.length > PAGE_SIZE;
    const link = (o: number, label: string) => html`<a href="${base(org)}?offset=${o}">${label}</a>`;
    const transactionsCard = html`<section class="card" aria-labelledby="h-tx"><h2 id="h-tx">Transactions</h2>
${
  transactions.length === 0
    ? html`<p class="muted">No transactions.</p>`
    : html`<div class="scroll" role="region" tabindex="0" aria-labelledby="h-tx"><table class="stack" aria-labelledby="h-tx"><thead><tr><th scope="col">Time (UTC)</th><th scope="col">Type</th><th scope="col" class="num">Amount</th><th scope="col" class="num">Balance after</th></tr></thead>
<tbody>${transactions.slice(0, PAGE_SIZE).map((t) => html`<tr><td data-label="Time (UTC)">${fmtTime(t.created_at)}</td><td data-label="Type">${t.transaction_type}<div class="sub">${t.description}</div></td><td class="num" data-label="Amount">${t.amount_credits > 0 ? '+' : ''}${tokensAndMoney(t.amount_credits)}</td><td class="num" data-label="Balance after">${tokensAndMoney(t.balance_after_credits)}</td></tr>`)}</tbody></table></div>`
}
<div class="pager">${offset > 0 ? link(Math.max(0, offset - PAGE_SIZE), '← Newer') : ''}${more ? link(offset + PAGE_SIZE, 'Older →') : ''}</div>
<h3 id="h-moves">Allocation moves</h3>${moves}</section>`;

    show(req, res, {
      title: `Billing · ${org.name}`,
      status: opts.status ?? 200,
      formAction: owner ? processorOrigins(deps) : undefined,
      body: html`<h1>Billing of ${org.name}</h1>${alert(notice)}${secretCard ?? ''}
${sectionsNav(owner)}
<div id="overview" class="grid">${balanceCard}${proCard}</div>${poolCard}<div id="buy">${topupCard}</div>
<div id="automations">${autoTopup}${eventsCards}</div><div id="budgets">${budgets}</div>
<div id="invoices">${invoicesCard}</div><div id="transactions">${transactionsCard}</div>`,
    });
  }

  router.get('/account/clients/:clientId/billing', session, async (req, res) => {
    const org = await orgOf(req);
    if (!org) return notFoundPage(req, res);
    await page(req, res, org);
  });

  /**
   * The owner's actions; a person's mistake shows on the page (in `card`, next to its field, when the
   * action belongs to one), anything else goes to the error page.
   */
  function ownerAction(
    path: string,
    act: (req: Request, res: Response, org: BillingOrg) => Promise<void>,
    card?: BillingCard,
  ) {
    router.post(`/account/clients/:clientId/billing/${path}`, session, async (req, res) => {
      const org = await orgOf(req);
      if (!org) return notFoundPage(req, res);
      try {
        verifyCsrfField(req);
        if (org.role !== 'owner')
          throw errorOf(COMMON_ERRORS, 'NO_ACCESS', "only the organization's owner may do this");
        await act(req, res, org);
      } catch (caught) {
        const err = clientError(caught);
        applyErrorHeaders(res, err);
        const field = errorField(err);
        await page(
          req,
          res,
          org,
          card
            ? { status: err.status, cardError: { card, text: errorText(err), ...(field ? { field } : {}) } }
            : { status: err.status, notice: { kind: 'error', text: errorText(err) } },
        );
      }
    });
  }
  billingEventsActions(deps, (path, card, act) => ownerAction(path, act, card));
  billingControlsActions(deps, (path, card, act) => ownerAction(path, act, card));

  const returnUrls = (req: Request, org: BillingOrg) => {
    const here = `${requestOrigin(req, deps.config)}${base(org)}`;
    return { successUrl: `${here}?checkout=success`, cancelUrl: `${here}?checkout=cancelled` };
  };

  // Top-up, step 1: the amount → what it buys, before anything is charged.
  ownerAction('topup', async (req, res, org) => {
    const amount = formValue(req, 'amount', 32);
    const cents = parseUsdAmount(amount);
    if (cents === null)
      return page(req, res, org, {
        status: 400,
        topupError: 'Enter an amount from 1.00 to 10,000.00 US dollars, like 25 or 12.50.',
      });
    show(req, res, {
      title: `Buy tokens · ${org.name}`,
      narrow: true,
      formAction: processorOrigins(deps),
      body: html`<div class="card"><h1>Buy tokens</h1>
<p><strong>${fmtUsd(cents)}</strong> buys <strong>${fmtTokens(cents * CREDITS_PER_CENT)} tokens</strong> for ${org.name}, added to its allocation once paid.</p>
${postForm(req, res, `${base(org)}/topup/pay`, html`<input type="hidden" name="amount_cents" value="${String(cents)}"><div class="actions"><button type="submit">Pay ${fmtUsd(cents)}</button><a href="${base(org)}">Cancel</a></div>`)}</div>`,
    });
  });

  // Top-up, step 2: the processor's checkout.
  ownerAction('topup/pay', async (req, res, org) => {
    const cents = Number(formValue(req, 'amount_cents', 32));
    if (!isChargeCents(cents))
      throw errorOf(
        COMMON_ERRORS,
        'VALIDATION_ERROR',
        'the amount must be from 1.00 to 10,000.00 US dollars',
      );
    const p = principalOf(req);
    const { checkout_url } = await startCheckout(db, deps.billing, {
      orgKey: org.orgKey,
      userId: p.userId,
      email: p.email,
      kind: 'topup',
      amountCents: cents,
      priceId: deps.config.stripe.pricePro,
      ...returnUrls(req, org),
    });
    res.redirect(303, checkout_url);
  });

  ownerAction('subscribe', async (req, res, org) => {
    const p = principalOf(req);
    const { checkout_url } = await startCheckout(db, deps.billing, {
      orgKey: org.orgKey,
      userId: p.userId,
      email: p.email,
      kind: 'subscription',
      priceId: deps.config.stripe.pricePro,
      ...returnUrls(req, org),
    });
    res.redirect(303, checkout_url);
  });

  ownerAction('portal', async (req, res, org) => {
    const url = await openPortal(
      db,
      deps.billing,
      org.orgKey,
      principalOf(req).email,
      `${requestOrigin(req, deps.config)}${base(org)}`,
    );
    res.redirect(303, url);
  });

  // Every allocation of the owner in one form: PUT …/allocation for each one that changed, the lowered
  // ones first so that their tokens can fund the raised ones.
  router.post('/account/allocations', session, async (req, res) => {
    verifyCsrfField(req);
    const p = principalOf(req);
    const back = formValue(req, 'return_to');
    const m = /^\/account\/clients\/([a-z]+_[A-Za-z0-9]+)\/billing$/.exec(back);
    const pool = await ownerBalance(db, p.userId);
    const wanted: { orgId: string; name: string; from: number; to: number }[] = [];
    for (const a of pool.allocations) {
      const raw = (req.body as Record<string, unknown> | undefined)?.[a.org_id];
      if (typeof raw !== 'string') continue;
      const text = raw.replace(/[\s,_]/g, '');
      if (!/^\d{1,15}$/.test(text)) {
        return allocationError(req, res, m?.[1], {
          text: `The allocation of ${a.name} must be a whole number of tokens, 0 or more.`,
          orgId: a.org_id,
        });
      }
      if (Number(text) !== a.allocated_credits)
        wanted.push({ orgId: a.org_id, name: a.name, from: a.allocated_credits, to: Number(text) });
    }
    wanted.sort((x, y) => x.to - x.from - (y.to - y.from));
    const done: string[] = [];
    const origin = auditOriginOf(req);
    for (const w of wanted) {
      try {
        await deps.models.spares.release(parseOrgId(w.orgId)!);
        await setAllocation(db, { userId: p.userId, orgKey: parseOrgId(w.orgId)!, target: w.to, origin });
        done.push(w.name);
      } catch (caught) {
        const err = clientError(caught);
        const why =
          err.code === 'INSUFFICIENT_UNALLOCATED'
            ? `Not enough unallocated tokens to give ${w.name} ${fmtTokens(w.to)}: lower another organization's allocation first, or buy tokens.`
            : `${w.name}: ${errorText(err)}`;
        const saved = done.length ? ` Saved before that: ${done.join(', ')}.` : '';
        return allocationError(req, res, m?.[1], { text: why + saved, orgId: w.orgId }, err.status);
      }
    }
    res.redirect(303, m ? `${back}?notice=allocated` : '/account');
  });

  async function allocationError(
    req: Request,
    res: Response,
    clientId: string | undefined,
    error: AllocationError,
    status = 400,
  ) {
    req.params.clientId = clientId ?? '';
    const org = clientId ? await orgOf(req) : null;
    if (!org) return notFoundPage(req, res);
    res.status(status);
    await page(req, res, org, { status, allocationError: error });
  }

  return router;
}
