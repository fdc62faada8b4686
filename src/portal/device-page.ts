import { Router, type Request, type Response } from 'express';
import { z } from 'zod';
import type { Deps } from '../deps.js';
import type { Auth } from '../auth/principal.js';
import { principalOf } from '../auth/principal.js';
import { approveUserCode, denyUserCode, findByUserCode, type DeviceCodeRow } from '../device/store.js';
import { normaliseUserCode } from '../device/user-code.js';
import { liveMemberships, type LiveOrg } from '../orgs/membership.js';
import { BUILTIN_CLI_CLIENT_ID, orgIdOf, parseOrgId } from '../ids.js';
import { html, verifyCsrfField } from '../page-kit/html.js';
import { requirePageSession } from '../auth/page-session.js';
import { errorOf, COMMON_ERRORS } from '../http/errors.js';
import { allOrganizationsField, allOrganizationsTicked } from '../page-kit/org-boundary.js';
import { ACCOUNT_SCOPE, ACCOUNT_SCOPE_TEXT } from '../../oauth/resources.js';
import {
  alert,
  applyErrorHeaders,
  clientError,
  errorStatus,
  errorText,
  field,
  formValue,
  hidden,
  type Notice,
  parseForm,
  postForm,
  queryValue,
  show,
} from './components.js';

// /account/device (CONTRACT §4, §6): the person enters (or confirms, from verification_uri_complete)
// the user code a terminal or an OAuth device client shows, picks the organization to act for and
// approves or denies. Terminal and OAuth device codes go through the same store functions as
// POST /v1/auth/device/authorize and /deny, so the rules (live membership, default org, the per-user
// wrong-code limit) are the API's own.

const decisionBody = z.object({
  user_code: z.string().trim().min(1, 'Enter the code shown on your device.').max(64),
  client_id: z.string().trim().max(80).optional(),
  decision: z.enum(['approve', 'deny']).optional(),
});

const RESOURCE_LABELS: Record<string, string> = {
  platform: 'Platform tools (projects, reports, files)',
  model: 'Model access (chat completions, billed to the organization)',
};
/** A `platform:read` request (CONTRACT §10). */
const PLATFORM_READ_LABEL = 'Platform tools, read only (projects, reports, files; nothing can be changed)';

function resourceLabel(resource: string): string {
  if (RESOURCE_LABELS[resource]) return RESOURCE_LABELS[resource];
  if (resource.endsWith('/mcp/platform')) return RESOURCE_LABELS.platform!;
  if (resource.endsWith('/v1')) return RESOURCE_LABELS.model!;
  return resource;
}

/** A resource as the page names it; the platform one says "read only" for a `platform:read` request. */
function deviceResourceLabel(resource: string, scope: string | null): string {
  const label = resourceLabel(resource);
  return label === RESOURCE_LABELS.platform && scope?.split(' ').includes('platform:read')
    ? PLATFORM_READ_LABEL
    : label;
}

/** The code as the device shows it (XXXX-XXXX), for display only. */
function displayCode(userCode: string): string {
  const n = normaliseUserCode(userCode);
  return n ? `${n.slice(0, 4)}-${n.slice(4)}` : userCode;
}

export function devicePageRoutes(deps: Deps, auth: Auth): Router {
  const router = Router();
  const session = requirePageSession(auth);

  function entryView(
    req: Request,
    res: Response,
    opts: { userCode?: string; notice?: Notice | null; status?: number },
  ) {
    const form = postForm(
      req,
      res,
      '/account/device',
      html`${field({
        label: 'Code',
        name: 'user_code',
        value: opts.userCode ?? '',
        className: 'code',
        autocomplete: 'off',
        required: true,
        autofocus: true,
        maxlength: 20,
        hint: 'as shown on your device, e.g. BCDF-GHJK',
      })}
<div class="actions"><button type="submit">Continue</button></div>`,
    );
    show(req, res, {
      title: 'Connect a device',
      narrow: true,
      status: opts.status ?? 200,
      body: html`<div class="card"><h1>Connect a device</h1>
<p>Enter the code your terminal or application shows.</p>${alert(opts.notice)}${form}</div>`,
    });
  }

  function confirmView(
    req: Request,
    res: Response,
    row: DeviceCodeRow,
    userCode: string,
    orgs: LiveOrg[],
    opts: { notice?: Notice | null; status?: number; selected?: string },
  ) {
    const requester =
      row.flow === 'oauth'
        ? html`<p>The application <strong>${row.oauthClientId ?? 'unknown'}</strong> asks to act for you.</p>
<h2>It will get</h2><ul>${(row.resources?.length ? row.resources : ['model', 'platform'])
            .filter((r) => !(r === 'model' && row.scope && !row.scope.split(' ').includes('model')))
            .map((r) => html`<li>${deviceResourceLabel(r, row.scope)}</li>`)}
${row.scope?.split(' ').includes(ACCOUNT_SCOPE) ? html`<li>${ACCOUNT_SCOPE_TEXT.title}: ${ACCOUNT_SCOPE_TEXT.text}</li>` : ''}</ul>`
        : html`<p>A terminal asks to sign in as you. It will receive an API credential for the organization you choose; any earlier credential of yours there is replaced.</p>`;
    const viewer = principalOf(req).userId;
    const options = orgs.map(
      (o) =>
        html`<option value="${orgIdOf(o.orgKey)}"${opts.selected === o.orgKey ? html` selected` : ''}>${o.name} (${o.role}${o.isDefault && o.ownerId === viewer ? ', your default' : ''})</option>`,
    );
    const form = postForm(
      req,
      res,
      '/account/device',
      html`${hidden('user_code', userCode)}
<div class="field"><label for="f-client_id">Organization <span class="hint">billing and access go to this organization</span></label>
<select id="f-client_id" name="client_id">${options}</select></div>
${row.flow === 'oauth' && row.oauthClientId !== BUILTIN_CLI_CLIENT_ID ? allOrganizationsField() : ''}
<div class="actions"><button type="submit" name="decision" value="approve">Approve</button>
<button type="submit" name="decision" value="deny" class="danger">Deny</button></div>`,
    );
    show(req, res, {
      title: 'Approve this device?',
      narrow: true,
      status: opts.status ?? 200,
      body: html`<div class="card"><h1>Approve this device?</h1>
<p>Code: <span class="usercode">${displayCode(userCode)}</span></p>
<p class="muted">Only approve if this code is on the screen of a device you are using right now.</p>
${requester}${alert(opts.notice)}${form}</div>`,
    });
  }

  function doneView(req: Request, res: Response, decision: string) {
    const approved = decision === 'approved';
    show(req, res, {
      title: approved ? 'Device connected' : 'Request denied',
      narrow: true,
      body: html`<div class="card"><h1>${approved ? 'Device connected' : 'Request denied'}</h1>
${alert(approved ? { kind: 'ok', text: 'Done. You can return to your device; it will finish signing in by itself.' } : { kind: 'info', text: 'The device was refused. Nothing was shared.' })}
<p><a href="/account">Back to your account</a></p></div>`,
    });
  }

  /** Shows the confirmation for a pending code, or the entry form with an error. */
  async function lookupAndShow(
    req: Request,
    res: Response,
    userCode: string,
    opts: { notice?: Notice | null; status?: number; selected?: string } = {},
  ) {
    const userId = principalOf(req).userId;
    let row: DeviceCodeRow | null;
    try {
      row = await findByUserCode(deps, userCode, { userId });
    } catch (caught) {
      const err = clientError(caught);
      applyErrorHeaders(res, err);
      entryView(req, res, {
        userCode,
        notice: { kind: 'error', text: errorText(err) },
        status: errorStatus(err),
      });
      return;
    }
    if (!row) {
      entryView(req, res, {
        userCode,
        notice: { kind: 'error', text: 'This code is not valid or has expired. Start again on your device.' },
        status: 400,
      });
      return;
    }
    const orgs = await liveMemberships(deps.db, userId);
    confirmView(req, res, row, userCode, orgs, opts);
  }

  router.get('/account/device', deps.limits.perIp, session, async (req, res) => {
    const done = queryValue(req, 'done');
    if (done === 'approved' || done === 'denied') return doneView(req, res, done);
    const userCode = queryValue(req, 'user_code', 64).trim();
    if (!userCode) return entryView(req, res, {});
    await lookupAndShow(req, res, userCode);
  });

  router.post('/account/device', deps.limits.perIp, session, async (req, res) => {
    const userId = principalOf(req).userId;
    const parsed = parseForm(decisionBody, req.body);
    const typed = formValue(req, 'user_code', 64);
    try {
      verifyCsrfField(req);
    } catch (err) {
      return entryView(req, res, {
        userCode: typed,
        notice: { kind: 'error', text: errorText(err) },
        status: 403,
      });
    }
    if (!parsed.ok) {
      return entryView(req, res, {
        userCode: typed,
        notice: { kind: 'error', text: Object.values(parsed.errors)[0]! },
        status: 400,
      });
    }
    const { user_code: userCode, client_id: clientId, decision } = parsed.data;
    // Without a decision this was the entry form: show the confirmation (PRG keeps the URL shareable).
    if (!decision) return res.redirect(303, `/account/device?user_code=${encodeURIComponent(userCode)}`);
    const orgKey = clientId ? parseOrgId(clientId) : undefined;
    try {
      if (clientId && !orgKey) throw errorOf(COMMON_ERRORS, 'NO_ACCESS', 'choose one of your organizations');
      if (decision === 'approve') {
        await approveUserCode(deps, {
          userCode,
          userId,
          ...(orgKey ? { orgKey } : {}),
          allOrgs: allOrganizationsTicked(req.body),
        });
        return res.redirect(303, '/account/device?done=approved');
      }
      await denyUserCode(deps, { userCode, userId });
      return res.redirect(303, '/account/device?done=denied');
    } catch (caught) {
      const err = clientError(caught);
      applyErrorHeaders(res, err);
      const status = errorStatus(err);
      const text = errorText(err);
      // Wrong or expired code: back to entry. Anything else (wrong org, rate limit): keep the choice on screen.
      if (status === 400 || status === 429)
        return entryView(req, res, { userCode, notice: { kind: 'error', text }, status });
      await lookupAndShow(req, res, userCode, {
        notice: { kind: 'error', text },
        status,
        ...(orgKey ? { selected: orgKey } : {}),
      });
    }
  });

  return router;
}
