import { Router, type Request, type Response } from 'express';
import type { Deps } from '../deps.js';
import type { Auth } from '../auth/principal.js';
import { principalOf } from '../auth/principal.js';
import { AppError } from '../http/errors.js';
import { clientIdOf, parseOrgId } from '../ids.js';
import { liveRole } from '../orgs/membership.js';
import { findLiveOrg } from '../billing/service.js';
import { getBalanceAlert, setBalanceAlert } from '../billing/balance-alerts.js';
import { createEndpoint, deleteEndpoint, listEndpoints } from '../events/endpoints.js';
import { endpointBody } from '../events/schema.js';
import { EVENT_TYPES } from '../events/types.js';
import { parse } from '../http/validate.js';
import { html, requirePageSession, verifyCsrfField, type SafeHtml } from './html.js';
import { applyErrorHeaders, clientError, errorText, formValue, postForm, show } from './components.js';

// The billing page's owner cards for issue 19 (items 1 and 5): the low-balance alert threshold and the
// webhook endpoints, on the same services as GET/PUT …/balance-alert and …/webhook-endpoints (docs/billing.md).
// Plain forms with their CSRF field; a saved change goes back to the billing page with a notice, a
// mistake shows on a page of its own next to the field, a new endpoint's secret is shown this once.

const fmt = new Intl.NumberFormat('en-US');
const billingPath = (orgKey: string) => `/account/clients/${clientIdOf(orgKey)}/billing`;

/** The two cards, for the owner (the billing page renders them after the allocations). */
export async function billingEventsCards(
  req: Request,
  res: Response,
  deps: Deps,
  orgKey: string,
): Promise<SafeHtml> {
  const base = billingPath(orgKey);
  const [alertSetting, endpoints] = await Promise.all([
    getBalanceAlert(deps.db, orgKey),
    listEndpoints(deps.db, orgKey),
  ]);
  const t = alertSetting.threshold_credits;
  const alertCard = html`<section class="card" aria-labelledby="h-alert"><h2 id="h-alert">Low-balance alert</h2>
<p>${t === null ? 'Off.' : t === 0 ? 'On, when the balance reaches 0.' : html`On, below <strong>${fmt.format(t)}</strong> tokens and at 0.`}</p>
${postForm(
  req,
  res,
  `${base}/alert`,
  html`<div class="field"><label for="f-threshold">Alert me below this many tokens <span class="hint" id="f-threshold-hint">a mail to you and the balance.low event, once each time the balance falls below it; leave empty for no alert</span></label>
<input id="f-threshold" name="threshold" type="text" inputmode="numeric" autocomplete="off" value="${t === null ? '' : String(t)}" aria-describedby="f-threshold-hint"></div>
<div class="actions"><button type="submit" class="secondary">Save the alert</button></div>`,
)}</section>`;

  const list =
    endpoints.data.length === 0
      ? html`<p class="muted">No endpoints.</p>`
      : html`<div class="scroll"><table aria-labelledby="h-hooks"><thead><tr><th scope="col">URL</th><th scope="col">Events</th><th scope="col">Remove</th></tr></thead>
<tbody>${endpoints.data.map(
          (e) =>
            html`<tr><td>${e.url}</td><td>${e.events.join(', ')}</td><td>${postForm(req, res, `${base}/webhook-endpoints/${e.id}/delete`, html`<button type="submit" class="danger" aria-label="Remove the endpoint ${e.url}">Remove</button>`)}</td></tr>`,
        )}</tbody></table></div>`;
  const boxes = EVENT_TYPES.map(
    (type, i) =>
      html`<div><input type="checkbox" id="f-event-${String(i)}" name="events" value="${type}"> <label for="f-event-${String(i)}">${type}</label></div>`,
  );
  const hooksCard = html`<section class="card" aria-labelledby="h-hooks"><h2 id="h-hooks">Webhook endpoints</h2>
<p class="muted">svc posts signed events to these URLs (header svc-signature; see the API docs).</p>
${list}
<h3>Add an endpoint</h3>
${postForm(
  req,
  res,
  `${base}/webhook-endpoints`,
  html`<div class="field"><label for="f-hook-url">URL</label><input id="f-hook-url" name="url" type="url" required autocomplete="off" placeholder="https://example.com/svc-events"></div>
<fieldset><legend>Events</legend>${boxes}</fieldset>
<div class="actions"><button type="submit" class="secondary">Add the endpoint</button></div>`,
)}</section>`;
  return html`${alertCard}${hooksCard}`;
}

export function billingEventsRoutes(deps: Deps, auth: Auth): Router {
  const router = Router();
  const session = requirePageSession(auth);

  /** The owner's organization of the path, or null (404 like a missing one). */
  async function ownedOrg(req: Request): Promise<{ orgKey: string; name: string } | null> {
    const orgKey = parseOrgId(String(req.params.clientId));
    const role = orgKey ? await liveRole(deps.db, principalOf(req).userId, orgKey) : null;
    const org = orgKey && role ? await findLiveOrg(deps.db, orgKey) : null;
    if (!org || !role) return null;
    if (role !== 'owner') throw new AppError(403, 'NO_ACCESS', "only the organization's owner may do this");
    return { orgKey: org.id, name: org.name };
  }

  function result(req: Request, res: Response, status: number, title: string, body: SafeHtml, back: string) {
    show(req, res, {
      title,
      status,
      narrow: true,
      body: html`<div class="card"><h1>${title}</h1>${body}<p><a href="${back}">Back to billing</a></p></div>`,
    });
  }

  function action(path: string, act: (req: Request, res: Response, orgKey: string) => Promise<void>) {
    router.post(`/account/clients/:clientId/billing/${path}`, session, async (req, res) => {
      try {
        verifyCsrfField(req);
        const org = await ownedOrg(req);
        if (!org)
          return result(
            req,
            res,
            404,
            'Not found',
            html`<p>There is no such organization among yours.</p>`,
            '/account',
          );
        await act(req, res, org.orgKey);
      } catch (caught) {
        const err = clientError(caught);
        applyErrorHeaders(res, err);
        result(
          req,
          res,
          err.status,
          'Not saved',
          html`<p class="field-error" role="alert">${errorText(err)}</p>`,
          parseOrgId(String(req.params.clientId))
            ? billingPath(parseOrgId(String(req.params.clientId))!)
            : '/account',
        );
      }
    });
  }

  action('alert', async (req, res, orgKey) => {
    const text = formValue(req, 'threshold', 32).replace(/[\s,_]/g, '');
    if (text !== '' && !/^\d{1,15}$/.test(text))
      throw new AppError(
        400,
        'VALIDATION_ERROR',
        'The threshold must be a whole number of tokens, or empty for none.',
      );
    await setBalanceAlert(deps.db, orgKey, text === '' ? null : Number(text));
    res.redirect(303, `${billingPath(orgKey)}?notice=alert_saved`);
  });

  action('webhook-endpoints', async (req, res, orgKey) => {
    const raw = (req.body as Record<string, unknown> | undefined)?.events;
    const events = Array.isArray(raw) ? raw : raw === undefined ? [] : [raw];
    const body = parse(endpointBody, { url: formValue(req, 'url', 2000), events });
    const created = await createEndpoint(deps.db, deps.keys.encryption, deps.config.devMode, orgKey, body);
    result(
      req,
      res,
      200,
      'Endpoint added',
      html`<p>svc will post ${created.events.join(', ')} to <strong>${created.url}</strong>.</p>
<p>Its signing secret, shown this once (keep it where your receiver can read it):</p>
<p><code>${created.secret}</code></p>`,
      billingPath(orgKey),
    );
  });

  action('webhook-endpoints/:endpointId/delete', async (req, res, orgKey) => {
    await deleteEndpoint(deps.db, orgKey, String(req.params.endpointId).slice(0, 64));
    res.redirect(303, `${billingPath(orgKey)}?notice=endpoint_removed`);
  });

  return router;
}
