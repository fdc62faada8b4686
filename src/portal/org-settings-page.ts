import { Router, type Request, type Response } from 'express';
import { z } from 'zod';
import type { Deps } from '../deps.js';
import type { Auth } from '../auth/principal.js';
import { principalOf } from '../auth/principal.js';
import { auditOriginOf } from '../audit/context.js';
import { clientIdOf } from '../ids.js';
import { deleteClient } from '../orgs/service.js';
import { leaveClient, renameClient } from '../orgs/self-service.js';
import { orgBalanceCredits } from '../billing/spend.js';
import { html } from '../page-kit/html.js';
import { requirePageSession } from '../auth/page-session.js';
import { alert, field, formValue, parseForm, postForm, queryValue, show, type Notice } from './components.js';
import { confirmPage, formAction, notFoundPage, orgOfPage } from './org-page-kit.js';
import { limitsCard, limitsForm } from './limits-card.js';
import { getOrgLimits, setOrgLimits } from '../ratelimit/limit-settings.js';
import { tokensAndMoney } from './money.js';

// An organization's settings: the owner renames it and deletes it (never the default,
// personal one), a member or viewer leaves it; deleting and leaving each ask on a page of their own
// first. Deleting is deleteClient, the service of DELETE /v1/clients/{id}: its balance goes to the
// owner's pool at once and its calls in flight are billed from there (CONTRACT §5, §8; docs/billing.md
// "Deleting a client with calls in flight").

const nameBody = z.object({
  name: z.string().trim().min(1, 'Enter a name.').max(100, 'At most 100 characters.'),
});
const NOTICES: Record<string, Notice> = {
  renamed: { kind: 'ok', text: 'Organization renamed.' },
  limits: { kind: 'ok', text: 'Rate limits saved.' },
};

export function orgSettingsPageRoutes(deps: Deps, auth: Auth): Router {
  const router = Router();
  const session = requirePageSession(auth);
  const path = (orgKey: string, rest: string) => `/account/clients/${clientIdOf(orgKey)}${rest}`;

  async function settingsPage(
    req: Request,
    res: Response,
    opts: {
      notice?: Notice | null;
      status?: number;
      nameError?: string;
      limitErrors?: Record<string, string>;
    } = {},
  ) {
    const found = await orgOfPage(deps, req);
    if (!found) return notFoundPage(req, res);
    const { org, role } = found;
    const limits = limitsCard(req, res, {
      role,
      action: path(org.id, '/settings/limits'),
      limits: role === 'viewer' ? { rpm: null, tpm: null } : await getOrgLimits(deps.db, org.id),
      errors: opts.limitErrors,
    });
    const owner = role === 'owner';
    const rename = html`<section class="card" aria-labelledby="h-name"><h2 id="h-name">Name</h2>${postForm(
      req,
      res,
      path(org.id, '/settings/name'),
      html`${field({ label: 'Organization name', name: 'name', value: formValue(req, 'name', 100) || org.name, required: true, maxlength: 100, autocomplete: 'off', error: opts.nameError, autofocus: Boolean(opts.nameError) })}
<div class="actions"><button type="submit" class="secondary">Rename</button></div>`,
    )}</section>`;
    const end = !owner
      ? html`<section class="card" aria-labelledby="h-leave"><h2 id="h-leave">Leave</h2>
<p>You are a ${role} of this organization. Leaving ends your access to it; your API tokens and app connections for it stop working.</p>
<div class="actions"><a class="button danger" href="${path(org.id, '/leave')}">Leave organization…</a></div></section>`
      : org.isDefault
        ? html`<section class="card" aria-labelledby="h-delete"><h2 id="h-delete">Delete</h2>
<p class="muted">This is your personal organization, made with your account. It cannot be deleted; you can rename it.</p></section>`
        : html`<section class="card" aria-labelledby="h-delete"><h2 id="h-delete">Delete</h2>
<p>Deleting ends the organization for every member. Its balance goes back to your pool.</p>
<div class="actions"><a class="button danger" href="${path(org.id, '/delete')}">Delete organization…</a></div></section>`;
    show(req, res, {
      title: `${org.name}: settings`,
      status: opts.status ?? 200,
      body: html`<p><a href="${path(org.id, '')}">← Members</a></p><h1>${org.name}</h1>${alert(opts.notice ?? NOTICES[queryValue(req, 'notice')] ?? null)}
${owner ? rename : html`<p class="muted">Only the owner can rename or delete this organization.</p>`}${limits}${end}`,
    });
  }

  const rerender = (req: Request, res: Response, notice: Notice, status: number) =>
    settingsPage(req, res, { notice, status });

  router.get('/account/clients/:clientId/settings', session, (req, res) => settingsPage(req, res));

  router.post(
    '/account/clients/:clientId/settings/name',
    session,
    formAction(async (req, res) => {
      const found = await orgOfPage(deps, req, 'owner');
      if (!found) return notFoundPage(req, res);
      const parsed = parseForm(nameBody, req.body);
      if (!parsed.ok) return settingsPage(req, res, { status: 400, nameError: parsed.errors.name });
      await renameClient(deps.db, found.org.id, parsed.data.name, auditOriginOf(req));
      res.redirect(303, path(found.org.id, '/settings?notice=renamed'));
    }, rerender),
  );

  router.post(
    '/account/clients/:clientId/settings/limits',
    session,
    formAction(async (req, res) => {
      const found = await orgOfPage(deps, req, 'owner');
      if (!found) return notFoundPage(req, res);
      const parsed = parseForm(limitsForm, req.body);
      if (!parsed.ok) return settingsPage(req, res, { status: 400, limitErrors: parsed.errors });
      await setOrgLimits(deps.db, found.org.id, parsed.data, auditOriginOf(req));
      await deps.limits.modelRates.refresh();
      res.redirect(303, path(found.org.id, '/settings?notice=limits'));
    }, rerender),
  );

  router.get('/account/clients/:clientId/delete', session, async (req, res) => {
    const found = await orgOfPage(deps, req, 'owner');
    if (!found || found.org.isDefault) return notFoundPage(req, res);
    const { org } = found;
    const balance = await orgBalanceCredits(deps.db, org.id);
    confirmPage(req, res, {
      title: `Delete ${org.name}?`,
      what: html`<p>This cannot be undone. Every member loses access, and every API token and app connection of <strong>${org.name}</strong> stops working at once. Calls already running finish and are billed from your pool.</p>
<p>Its balance (${tokensAndMoney(balance)} now) goes back to your pool at once, unallocated; the part held by calls still running becomes free as each one settles. From the pool you can give it to another organization on a billing page.</p>`,
      form: postForm(
        req,
        res,
        path(org.id, '/delete'),
        html`<div class="actions"><button type="submit" class="danger">Delete ${org.name}</button></div>`,
      ),
      back: path(org.id, '/settings'),
    });
  });

  router.post(
    '/account/clients/:clientId/delete',
    session,
    formAction(async (req, res) => {
      const found = await orgOfPage(deps, req, 'owner');
      if (!found) return notFoundPage(req, res);
      await deleteClient(deps, principalOf(req).userId, found.org.id, auditOriginOf(req));
      res.redirect(303, '/account?notice=client_deleted');
    }, rerender),
  );

  router.get('/account/clients/:clientId/leave', session, async (req, res) => {
    const found = await orgOfPage(deps, req);
    if (!found || found.role === 'owner') return notFoundPage(req, res);
    const { org } = found;
    confirmPage(req, res, {
      title: `Leave ${org.name}?`,
      what: html`<p>You will no longer be a member of <strong>${org.name}</strong>. Your API tokens and app connections for it stop working at once. To come back, the owner has to add or invite you again.</p>`,
      form: postForm(
        req,
        res,
        path(org.id, '/leave'),
        html`<div class="actions"><button type="submit" class="danger">Leave ${org.name}</button></div>`,
      ),
      back: path(org.id, '/settings'),
    });
  });

  router.post(
    '/account/clients/:clientId/leave',
    session,
    formAction(async (req, res) => {
      const found = await orgOfPage(deps, req);
      if (!found) return notFoundPage(req, res);
      await leaveClient(deps, found.org, principalOf(req).userId, auditOriginOf(req));
      res.redirect(303, '/account?notice=left');
    }, rerender),
  );

  return router;
}
