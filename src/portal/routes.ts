import { Router } from 'express';
import type { Deps } from '../deps.js';
import type { Auth } from '../auth/principal.js';
import { attachPageSession } from '../auth/page-session.js';
import { signInRoutes } from './sign-in.js';
import { accountPageRoutes } from './account-pages.js';
import { devicePageRoutes } from './device-page.js';
import { dashboardRoutes } from './dashboard.js';
import { twoFactorPageRoutes } from './two-factor-page.js';
import { clientPageRoutes } from './clients-page.js';
import { memberPageRoutes } from './member-pages.js';
import { invitationPageRoutes } from './invitation-pages.js';
import { orgSettingsPageRoutes } from './org-settings-page.js';
import { usagePageRoutes } from './usage-page.js';
import { billingPageRoutes } from './billing-page.js';
import { settingsPageRoutes } from './settings-page.js';
import { auditPageRoutes } from './audit-pages.js';
import { pageErrorHandler } from './page-errors.js';
import { show } from './components.js';
import { html } from '../page-kit/html.js';
import { requirePageSession } from '../auth/page-session.js';
import { loadNavOrgs, switchOrg } from './nav.js';

// The server-rendered pages people use (CONTRACT §4 "Pages"): sign-in with 2FA, registration, e-mail
// verification, password reset, device approval and the dashboard. The OAuth consent page lives in
// oauth/ and uses the same layout (./html.ts). Errors inside these routes render as HTML pages.

export function portalRoutes(deps: Deps, auth: Auth): Router {
  const router = Router();
  // The first page: the account page, which sends a signed-out visitor to sign in.
  router.get('/', (_req, res) => res.redirect(303, '/account'));
  router.use('/account', attachPageSession(auth), loadNavOrgs(deps));
  router.get('/account/switch', requirePageSession(auth), switchOrg);
  router.use(signInRoutes(deps, auth));
  router.use(accountPageRoutes(deps, auth));
  router.use(devicePageRoutes(deps, auth));
  router.use(dashboardRoutes(deps, auth));
  router.use(twoFactorPageRoutes(deps, auth));
  router.use(clientPageRoutes(deps, auth));
  router.use(memberPageRoutes(deps, auth));
  router.use(invitationPageRoutes(deps, auth));
  router.use(orgSettingsPageRoutes(deps, auth));
  router.use(usagePageRoutes(deps, auth));
  router.use(billingPageRoutes(deps, auth));
  router.use(settingsPageRoutes(deps, auth));
  router.use(auditPageRoutes(deps, auth));
  // An unknown page under /account is a page too: HTML 404, not the API's JSON.
  router.use('/account', (req, res) => {
    show(req, res, {
      title: 'Not found',
      status: 404,
      narrow: true,
      body: html`<div class="card"><h1>Not found</h1><p>There is no such page.</p><p><a href="/account">Back to your account</a></p></div>`,
    });
  });
  router.use(pageErrorHandler(deps.log));
  return router;
}
