import { Router } from 'express';
import { z } from 'zod';
import type { Deps } from '../deps.js';
import type { Auth } from '../auth/principal.js';
import { principalOf } from '../auth/principal.js';
import { liveMemberships } from '../orgs/membership.js';
import { clientIdOf, parseOrgId } from '../ids.js';
import { createClient, listMembers } from './services.js';
import { html, requirePageSession, verifyCsrfField } from './html.js';
import { applyErrorHeaders, clientError, errorText, parseForm, show } from './components.js';
import { renderDashboard } from './dashboard.js';

// Organizations on the dashboard: create one (POST /v1/clients's service) and see the members of one you
// belong to (any live member may: interface document, Team membership). Another organization's page
// answers exactly like one that does not exist (STYLE: tenants).

const createBody = z.object({ name: z.string().trim().min(1, 'Enter a name.').max(200, 'At most 200 characters.') });

export function clientPageRoutes(deps: Deps, auth: Auth): Router {
  const router = Router();
  const session = requirePageSession(auth);

  router.post('/account/clients', session, async (req, res) => {
    try {
      verifyCsrfField(req);
      const parsed = parseForm(createBody, req.body);
      if (!parsed.ok) return renderDashboard(deps, req, res, { status: 400, clientError: parsed.errors.name! });
      await createClient(deps, { userId: principalOf(req).userId, name: parsed.data.name });
      res.redirect(303, '/account?notice=client_created');
    } catch (caught) {
      const err = clientError(caught);
      applyErrorHeaders(res, err);
      await renderDashboard(deps, req, res, { status: err.status, clientError: errorText(err) });
    }
  });

  router.get('/account/clients/:clientId', session, async (req, res) => {
    const userId = principalOf(req).userId;
    const orgKey = parseOrgId(String(req.params.clientId));
    const org = orgKey ? (await liveMemberships(deps.db, userId)).find((o) => o.orgKey === orgKey) : undefined;
    if (!org) {
      return show(req, res, {
        title: 'Not found',
        status: 404,
        narrow: true,
        body: html`<div class="card"><h1>Not found</h1><p>There is no such organization among yours.</p><p><a href="/account">Back to your account</a></p></div>`,
      });
    }
    const members = await listMembers(deps, org.orgKey);
    show(req, res, {
      title: org.name,
      body: html`<p><a href="/account">← Your account</a></p><h1>${org.name}</h1>
<section class="card" aria-labelledby="h-members"><h2 id="h-members">Members</h2>
<p class="muted">Id <code>${clientIdOf(org.orgKey)}</code> · your role: ${org.role}</p>
<table><thead><tr><th scope="col">Name</th><th scope="col">E-mail</th><th scope="col">Role</th></tr></thead>
<tbody>${members.map((m) => html`<tr><td>${m.name}</td><td>${m.email}</td><td>${m.role}</td></tr>`)}</tbody></table></section>`,
    });
  });

  return router;
}
