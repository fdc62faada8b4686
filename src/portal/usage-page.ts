import { Router, type Request, type Response } from 'express';
import type { Deps } from '../deps.js';
import type { Auth } from '../auth/principal.js';
import { principalOf } from '../auth/principal.js';
import { clientIdOf, parseOrgId } from '../ids.js';
import { liveRole } from '../orgs/membership.js';
import { findLiveOrg } from '../billing/service.js';
import { usageCalls, usageSummary, type UsageGroupRow, type UsagePeriod } from '../usage/service.js';
import { html, type SafeHtml } from '../page-kit/html.js';
import { requirePageSession } from '../auth/page-session.js';
import { queryValue, show } from './components.js';
import { barChart, daysOf } from './usage-chart.js';
import { modelTokens, tokensAndMoney } from './money.js';

// The usage page of an organization (the API is docs/usage.md): tokens per day for the
// chosen period as a chart and a table, totals by member and by credential (API token or app), and the
// call log. The same reads and the same access rule as the API: owners and members see everything,
// viewers the daily totals only.

const PERIODS = [7, 30, 90] as const;
const PAGE_SIZE = 20;
const fmt = new Intl.NumberFormat('en-US');
const n = (v: number) => fmt.format(v);

function totalsTable(caption: string, keyHeader: string, rows: UsageGroupRow[]): SafeHtml {
  if (rows.length === 0) return html`<h3>${caption}</h3><p class="muted">No calls in this period.</p>`;
  return html`<h3 id="h-${keyHeader.toLowerCase()}">${caption}</h3><table class="stack" aria-labelledby="h-${keyHeader.toLowerCase()}">
<thead><tr><th scope="col">${keyHeader}</th><th scope="col" class="num">Calls</th><th scope="col" class="num">Model tokens</th><th scope="col" class="num">Debited</th></tr></thead>
<tbody>${rows.map((r) => html`<tr><td>${r.label}</td><td class="num" data-label="Calls">${n(r.calls)}</td><td class="num" data-label="Model tokens">${modelTokens(r.prompt_tokens, r.completion_tokens)}</td><td class="num" data-label="Debited">${tokensAndMoney(r.credits_debited)}</td></tr>`)}</tbody></table>`;
}

export function usagePageRoutes(deps: Deps, auth: Auth): Router {
  const router = Router();
  const session = requirePageSession(auth);

  router.get('/account/clients/:clientId/usage', session, async (req: Request, res: Response) => {
    const orgKey = parseOrgId(String(req.params.clientId));
    const role = orgKey ? await liveRole(deps.db, principalOf(req).userId, orgKey) : null;
    const org = orgKey && role ? await findLiveOrg(deps.db, orgKey) : null;
    if (!orgKey || !role || !org) {
      return show(req, res, {
        title: 'Not found',
        status: 404,
        narrow: true,
        body: html`<div class="card"><h1>Not found</h1><p>There is no such organization among yours.</p><p><a href="/account">Back to your account</a></p></div>`,
      });
    }
    const days = PERIODS.find((d) => String(d) === queryValue(req, 'days')) ?? 30;
    const offset = Math.max(0, Math.min(1_000_000, Number.parseInt(queryValue(req, 'offset'), 10) || 0));
    const to = Math.ceil(Date.now() / 86_400_000) * 86_400; // the end of today (UTC)
    const period: UsagePeriod = { orgKey, from: to - days * 86_400, to };
    const reader = role !== 'viewer';

    const byDay = await usageSummary(deps.db, period, 'day');
    const perDay = new Map(byDay.data.map((r) => [r.key, r]));
    const series = daysOf(period.from, period.to).map((day) => ({
      day,
      value: perDay.get(day)?.credits_debited ?? 0,
    }));
    const t = byDay.totals;
    const clientId = clientIdOf(orgKey);
    const base = `/account/clients/${clientId}/usage`;
    const csv = (path: string, extra = '') =>
      `/v1/clients/${clientId}/usage${path}?format=csv&from=${period.from}&to=${period.to}${extra}`;

    const periodForm = html`<form method="get" action="${base}" class="actions"><label for="f-days">Period</label>
<select id="f-days" name="days">${PERIODS.map((d) => html`<option value="${d}"${d === days ? html` selected` : ''}>Last ${d} days</option>`)}</select>
<button type="submit" class="secondary">Show</button></form>`;

    const dayTable = html`<details><summary>Every day as a table</summary><table class="stack">
<caption class="sr">Tokens debited per day</caption>
<thead><tr><th scope="col">Day (UTC)</th><th scope="col" class="num">Calls</th><th scope="col" class="num">Debited</th></tr></thead>
<tbody>${series.map((s) => html`<tr><td>${s.day}</td><td class="num" data-label="Calls">${n(perDay.get(s.day)?.calls ?? 0)}</td><td class="num" data-label="Debited">${tokensAndMoney(s.value)}</td></tr>`)}</tbody></table></details>`;

    let detail: SafeHtml = html`<p class="muted">As a viewer you see the organization's totals; members and owners also see who spent them and with which credential.</p>`;
    if (reader) {
      const [byMember, byCredential, calls] = await Promise.all([
        usageSummary(deps.db, period, 'member'),
        usageSummary(deps.db, period, 'credential'),
        usageCalls(deps.db, period, { limit: PAGE_SIZE + 1, offset }),
      ]);
      const more = calls.length > PAGE_SIZE;
      const shown = calls.slice(0, PAGE_SIZE);
      const pageLink = (o: number, label: string) =>
        html`<a href="${base}?days=${days}&amp;offset=${o}">${label}</a>`;
      detail = html`<section class="card" aria-labelledby="h-who"><h2 id="h-who">Who and with what</h2>
${totalsTable('By member', 'Member', byMember.data)}
${totalsTable('By credential', 'Credential', byCredential.data)}
<p><a href="${csv('', '&group_by=member')}">Download by member (CSV)</a> · <a href="${csv('', '&group_by=credential')}">by credential (CSV)</a></p></section>
<section class="card" aria-labelledby="h-calls"><h2 id="h-calls">Calls</h2>
${
  shown.length === 0
    ? html`<p class="muted">No calls in this period.</p>`
    : html`<table class="stack" aria-labelledby="h-calls"><thead><tr><th scope="col">When (UTC)</th><th scope="col">Who</th><th scope="col">Credential</th><th scope="col" class="num">Model tokens</th><th scope="col" class="num">Debited</th><th scope="col">Outcome</th></tr></thead>
<tbody>${shown.map(
        (
          c,
        ) => html`<tr><td>${new Date(c.created_at * 1000).toISOString().slice(0, 16).replace('T', ' ')}<div class="sub">${c.source === 'run' ? 'run step' : 'chat'} · ${c.duration_ms} ms</div></td>
<td data-label="Who">${c.email ?? c.user_id}</td><td data-label="Credential">${c.credential.type === 'api_token' ? `API token ${c.credential.token_name ?? `#${c.credential.token_id}`}` : `App ${c.credential.client_name ?? c.credential.client_id ?? ''}`}</td>
<td class="num" data-label="Model tokens">${modelTokens(c.prompt_tokens, c.completion_tokens)}</td><td class="num" data-label="Debited">${tokensAndMoney(c.credits_debited)}</td><td data-label="Outcome">${c.outcome}</td></tr>`,
      )}</tbody></table>`
}
<div class="pager">${offset > 0 ? pageLink(Math.max(0, offset - PAGE_SIZE), '← Newer') : ''}${more ? pageLink(offset + PAGE_SIZE, 'Older →') : ''}</div>
<p><a href="${csv('/calls')}">Download the calls (CSV)</a></p></section>`;
    }

    show(req, res, {
      title: `Usage · ${org.name}`,
      body: html`<h1>Usage of ${org.name}</h1>
<section class="card" aria-labelledby="h-daily"><h2 id="h-daily">Tokens per day</h2>${periodForm}
<p><strong>${tokensAndMoney(t.credits_debited)}</strong> debited by <strong>${n(t.calls)}</strong> calls (${modelTokens(t.prompt_tokens, t.completion_tokens)}) in the last ${days} days.</p>
${barChart(series, `Tokens debited per day, last ${days} days`)}${dayTable}
<p><a href="${csv('', '&group_by=day')}">Download per day (CSV)</a></p></section>
${detail}`,
    });
  });

  return router;
}
