import type { Request, Response } from 'express';
import type { Deps } from '../deps.js';
import { principalOf } from '../auth/principal.js';
import { auditOriginOf } from '../audit/context.js';
import { getBalanceAlert, setBalanceAlert } from '../billing/balance-alerts.js';
import {
  createEndpoint,
  deleteEndpoint,
  listDeliveries,
  listEndpoints,
  revealSecret,
} from '../events/endpoints.js';
import { endpointBody } from '../events/schema.js';
import { EVENT_TYPES } from '../events/types.js';
import { parse } from '../http/validate.js';
import { html, type SafeHtml } from '../page-kit/html.js';
import { formValue, postForm } from './components.js';
import {
  billingPath,
  cardMessage,
  fieldMistake,
  fieldState,
  fmtTime,
  parseTokens,
  type CardError,
  type OwnerAction,
} from './billing-card-kit.js';
import { tokensAndMoney } from './money.js';

// The billing page's owner cards for alerts and events: the low-balance alert threshold and the
// webhook endpoints with their recent deliveries, on the same services as GET/PUT …/balance-alert and
// …/webhook-endpoints (docs/billing.md). Plain forms with their CSRF field; a saved change answers 303
// back to the billing page (POST/redirect/GET: a reload repeats nothing), a mistake is shown on the
// billing page next to its field. A new endpoint's secret is shown once, on the GET after its POST
// (revealSecret: redeemed once by the page session that created it; docs/decisions/0043-a-secret-shown-once-after-a-redirect.md).

/** Deliveries shown per endpoint (the API pages through the whole log). */
const RECENT_DELIVERIES = 5;

/** The two cards, for the owner (the billing page renders them after the allocations). */
export async function billingEventsCards(
  req: Request,
  res: Response,
  deps: Deps,
  orgKey: string,
  error?: CardError,
): Promise<SafeHtml> {
  const base = billingPath(orgKey);
  const [alertSetting, endpoints] = await Promise.all([
    getBalanceAlert(deps.db, orgKey),
    listEndpoints(deps.db, orgKey),
  ]);
  const t = alertSetting.threshold_credits;
  const threshold = fieldState(error, 'alert', 'threshold', 'f-threshold', 'f-threshold-hint');
  const alertCard = html`<section class="card" aria-labelledby="h-alert"><h2 id="h-alert">Low-balance alert</h2>
<p>${t === null ? 'Off.' : t === 0 ? 'On, when the balance reaches 0.' : html`On, below <strong>${tokensAndMoney(t)}</strong> and at 0.`}</p>
${cardMessage(error, 'alert', ['threshold'])}
${postForm(
  req,
  res,
  `${base}/alert`,
  html`<div class="field"><label for="f-threshold">Alert me below this many tokens <span class="hint" id="f-threshold-hint">a mail to you and the balance.low event, once each time the balance falls below it; leave empty for no alert</span></label>
<input id="f-threshold" name="threshold" type="text" inputmode="numeric" autocomplete="off" value="${error?.card === 'alert' ? formValue(req, 'threshold', 32) : t === null ? '' : String(t)}"${threshold.attrs}>${threshold.message}</div>
<div class="actions"><button type="submit" class="secondary">Save the alert</button></div>`,
)}</section>`;

  const logs = await Promise.all(
    endpoints.data.map((e) => listDeliveries(deps.db, orgKey, e.id, { limit: RECENT_DELIVERIES, offset: 0 })),
  );
  const list =
    endpoints.data.length === 0
      ? html`<p class="muted">No endpoints.</p>`
      : endpoints.data.map((e, i) => {
          const log = logs[i]!.data;
          const hid = `h-hook-${String(i)}`;
          return html`<section aria-labelledby="${hid}"><h3 id="${hid}">${e.url}</h3>
<p>Events: ${e.events.join(', ')}</p>
${
  log.length === 0
    ? html`<p class="muted">No deliveries yet.</p>`
    : html`<div class="scroll" role="region" tabindex="0" aria-label="Recent deliveries to ${e.url}"><table aria-label="Recent deliveries to ${e.url}"><thead><tr><th scope="col">Created</th><th scope="col">Event</th><th scope="col">Status</th><th scope="col" class="num">Attempts</th><th scope="col">Last error</th></tr></thead>
<tbody>${log.map((d) => html`<tr><td>${fmtTime(d.created_at)}</td><td>${d.event_type}<div class="sub">${d.event_id}</div></td><td>${d.status}${d.status === 'pending' && d.next_attempt_at ? html`<div class="sub">next ${fmtTime(d.next_attempt_at)}</div>` : ''}</td><td class="num">${String(d.attempts)}</td><td>${d.last_error ?? '—'}</td></tr>`)}</tbody></table></div>`
}
${postForm(req, res, `${base}/webhook-endpoints/${e.id}/delete`, html`<div class="actions"><button type="submit" class="danger" aria-label="Remove the endpoint ${e.url}">Remove</button></div>`)}</section>`;
        });
  const boxes = EVENT_TYPES.map(
    (type, i) =>
      html`<div><input type="checkbox" id="f-event-${String(i)}" name="events" value="${type}"> <label for="f-event-${String(i)}">${type}</label></div>`,
  );
  const url = fieldState(error, 'hooks', 'url', 'f-hook-url');
  const hooksCard = html`<section class="card" aria-labelledby="h-hooks"><h2 id="h-hooks">Webhook endpoints</h2>
<p class="muted">svc posts signed events to these URLs (header svc-signature; see the API docs).</p>
${list}
<h3>Add an endpoint</h3>
${cardMessage(error, 'hooks', ['url'])}
${postForm(
  req,
  res,
  `${base}/webhook-endpoints`,
  html`<div class="field"><label for="f-hook-url">URL</label><input id="f-hook-url" name="url" type="url" required autocomplete="off" placeholder="https://example.com/svc-events"${error?.card === 'hooks' ? html` value="${formValue(req, 'url', 2000)}"` : ''}${url.attrs}>${url.message}</div>
<fieldset><legend>Events</legend>${boxes}</fieldset>
<div class="actions"><button type="submit" class="secondary">Add the endpoint</button></div>`,
)}</section>`;
  return html`${alertCard}${hooksCard}`;
}

/** The card that shows a new endpoint's secret, once (null when this session has none to see). */
export async function revealedSecretCard(req: Request, deps: Deps, orgKey: string): Promise<SafeHtml | null> {
  const p = principalOf(req);
  if (p.kind !== 'session') return null;
  const shown = await revealSecret(deps.db, deps.keys.encryption, orgKey, p.sessionId);
  if (!shown) return null;
  return html`<section class="card" aria-labelledby="h-secret"><h2 id="h-secret">Endpoint added</h2>
<p>svc will post ${shown.events.join(', ')} to <strong>${shown.url}</strong>.</p>
<p>Its signing secret, shown this once (keep it where your receiver can read it; it is not shown again, not even after a reload):</p>
<p><code>${shown.secret}</code></p></section>`;
}

/** The cards' form actions, registered on the billing page's router through its owner-action wrapper. */
export function billingEventsActions(deps: Deps, ownerAction: OwnerAction): void {
  ownerAction('alert', 'alert', async (req, res, org) => {
    const text = formValue(req, 'threshold', 32).trim();
    const threshold = text === '' ? null : parseTokens(text);
    if (text !== '' && threshold === null)
      throw fieldMistake('threshold', 'The threshold must be a whole number of tokens, or empty for none.');
    await setBalanceAlert(deps.db, org.orgKey, threshold, auditOriginOf(req));
    res.redirect(303, `${billingPath(org.orgKey)}?notice=alert_saved`);
  });

  ownerAction('webhook-endpoints', 'hooks', async (req, res, org) => {
    const raw = (req.body as Record<string, unknown> | undefined)?.events;
    const events = Array.isArray(raw) ? raw : raw === undefined ? [] : [raw];
    if (events.length === 0) throw fieldMistake('events', 'Choose at least one event.');
    const body = parse(endpointBody, { url: formValue(req, 'url', 2000), events });
    const p = principalOf(req);
    await createEndpoint(
      deps.db,
      deps.keys.encryption,
      deps.config.devMode,
      org.orgKey,
      body,
      auditOriginOf(req),
      p.kind === 'session' ? p.sessionId : null,
    );
    // POST/redirect/GET: the secret is shown by the GET (revealedSecretCard), so a reload adds nothing.
    res.redirect(303, `${billingPath(org.orgKey)}?notice=endpoint_added`);
  });

  ownerAction('webhook-endpoints/:endpointId/delete', 'hooks', async (req, res, org) => {
    await deleteEndpoint(deps.db, org.orgKey, String(req.params.endpointId).slice(0, 64), auditOriginOf(req));
    res.redirect(303, `${billingPath(org.orgKey)}?notice=endpoint_removed`);
  });
}
