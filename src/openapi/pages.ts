import { route, type Method } from './describe.js';

// The server-rendered pages (CONTRACT §4 "Pages"; src/portal/). A GET renders a page; a POST is a form
// (urlencoded, with the CSRF field) that answers a page or a 303 redirect. Errors render as HTML pages.

export const page = (method: Method, path: string, summary: string, signedIn = false) =>
  route(method, path, {
    summary,
    surface: 'page',
    ...(signedIn ? { auth: ['session' as const] } : {}),
    response:
      method === 'get'
        ? 'html'
        : {
            '200': { description: 'The page again, with the outcome or the form’s errors' },
            '303': { description: 'Done: where to go next (Location)' },
          },
    errors: method === 'post' ? [403] : [],
  });

export const pageRoutes = [
  page('get', '/account/login', 'Sign-in page'),
  page('post', '/account/login', 'Sign in (form)'),
  page('post', '/account/login/2fa', 'Second sign-in step (form)'),
  page('post', '/account/logout', 'Sign out (form)', true),
  page('get', '/account/register', 'Registration page'),
  page('post', '/account/register', 'Register (form)'),
  page('get', '/account/verify', 'Verify an e-mail address (the link in the mail)'),
  page('get', '/account/reset', 'Password reset: ask for a link, or set a new password (with ?token=)'),
  page('post', '/account/reset', 'Ask for a reset link (form)'),
  page('post', '/account/reset/confirm', 'Set a new password (form)'),
  page('get', '/account/device', 'Approve a device (the code a terminal shows)', true),
  page('post', '/account/device', 'Approve or deny a device (form)', true),
  page('get', '/account', 'The dashboard: clients, balances, tokens', true),
  page('post', '/account/verify/resend', 'Send a new verification mail (form)', true),
  page('post', '/account/2fa/setup', 'Start two-factor enrolment (form)', true),
  page('post', '/account/2fa/enable', 'Confirm two-factor enrolment (form)', true),
  page('post', '/account/2fa/disable', 'Turn two-factor sign-in off (form)', true),
  page('post', '/account/clients', 'Create a client (form)', true),
  page('get', '/account/clients/:clientId', "A client's members", true),
  page('post', '/account/clients/:clientId/members', 'Add a member (form)', true),
  page('post', '/account/clients/:clientId/members/:userId/remove', 'Remove a member (form)', true),
  page(
    'post',
    '/account/clients/:clientId/settings/limits',
    "Set the organization's rate limits (form, owner)",
    true,
  ),
  page('get', '/', 'The first page: 303 to /account (which sends a signed-out visitor to sign in)'),
  page('get', '/account/switch', 'Switch to another organization (header form)', true),
  page('get', '/account/clients/:clientId/usage', "An organization's usage: chart, totals, call log", true),
  page('get', '/account/clients/:clientId/billing', "An organization's billing", true),
  page(
    'get',
    '/account/clients/:clientId/audit-log',
    "An organization's audit log (owner): filter by action, who and days; export; check the chain",
    true,
  ),
  page(
    'post',
    '/account/clients/:clientId/billing/topup',
    'Review a top-up: the tokens an amount buys (form)',
    true,
  ),
  page(
    'post',
    '/account/clients/:clientId/billing/topup/pay',
    "Pay a top-up at the processor's checkout (form)",
    true,
  ),
  page(
    'post',
    '/account/clients/:clientId/billing/subscribe',
    "Subscribe to Pro at the processor's checkout (form)",
    true,
  ),
  page(
    'post',
    '/account/clients/:clientId/billing/portal',
    "Open the processor's customer portal (form)",
    true,
  ),
  page('post', '/account/allocations', "Set every owned organization's allocation (form)", true),
  page(
    'post',
    '/account/clients/:clientId/billing/alert',
    'Set the low-balance alert threshold (form)',
    true,
  ),
  page(
    'post',
    '/account/clients/:clientId/billing/webhook-endpoints',
    'Add a webhook endpoint; 303 to the billing page, which shows its signing secret once (form)',
    true,
  ),
  page(
    'post',
    '/account/clients/:clientId/billing/auto-topup',
    'Turn auto top-up on or change it: trigger, amount, monthly cap (form)',
    true,
  ),
  page('post', '/account/clients/:clientId/billing/auto-topup/off', 'Turn auto top-up off (form)', true),
  page(
    'post',
    '/account/clients/:clientId/billing/budgets',
    "Set a member's or one of their tokens' budget per day, week or month (form)",
    true,
  ),
  page(
    'post',
    '/account/clients/:clientId/billing/budgets/remove',
    "Remove a member's or a token's budget (form)",
    true,
  ),
  page(
    'post',
    '/account/clients/:clientId/billing/webhook-endpoints/:endpointId/delete',
    'Remove a webhook endpoint (form)',
    true,
  ),
  page('get', '/account/settings', 'Account settings: name, password, sessions, connected apps', true),
  page('get', '/account/audit-log', "A person's own account log: sign-ins, password, 2FA, sessions", true),
  page('post', '/account/settings/name', 'Change the name (form)', true),
  page('post', '/account/settings/password', 'Change the password (form)', true),
  page('post', '/account/settings/sessions/revoke-others', 'Sign out every other session (form)', true),
  page('post', '/account/settings/sessions/:sessionId/revoke', 'Sign out one session (form)', true),
  page('post', '/account/settings/apps/:grantId/revoke', 'Disconnect an app (form)', true),
  page(
    'post',
    '/account/settings/delete',
    'Delete the account (form: password, and the 2FA code when on)',
    true,
  ),
  page('get', '/s/:token', 'A project shared by link (read-only page)'),
];
