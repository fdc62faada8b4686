import { Router, type RequestHandler, type Response } from 'express';
import { z } from 'zod';
import type { Deps } from '../deps.js';
import { principalOf, type Auth } from '../auth/principal.js';
import { revokeSession, SESSION_COOKIE, SESSION_TTL_SECONDS, sessionCookieOptions } from '../auth/session.js';
import { parse } from '../http/validate.js';
import { errorOf, COMMON_ERRORS } from '../http/errors.js';
import { isSameOrigin } from '../http/origin.js';
import { completeTwoFactorLogin, loginWithPassword } from './login.js';
import { registerAndNotify, resendVerification, verifyEmail } from './email-verification.js';
import { confirmPasswordReset, requestPasswordReset, RESET_REQUESTED_MESSAGE } from './password-reset.js';
import { disableTwoFactor, enableTwoFactor, setupTwoFactor, twoFactorStatus } from './two-factor.js';
import { ownedClientView, userView } from './views.js';
import { passwordChangeConfirmation } from './credential-revocation.js';
import { deleteAccount } from './account-deletion.js';
import type { UserRow } from './service.js';
import { databaseOutageAs503 } from '../db/outage.js';
import { auditOriginOf } from '../audit/context.js';

// HTTP face of the account services (CONTRACT §4). Thin: parse, call the service, shape the answer.

/** Sign-in, registration, reset and 2FA routes carry the per-address limit (CONTRACT §1). */
export const PER_IP_PATHS = [
  '/v1/login',
  '/v1/logout',
  '/v1/register',
  '/v1/2fa',
  '/v1/password/reset',
  '/v1/email/verify',
  '/v1/account/delete',
];

// Bounded inputs: a megabyte password would make argon2 the attacker's tool.
const email = z.string().trim().max(254).pipe(z.email());
const password = z.string().min(1).max(1024);
const token = z.string().trim().min(1).max(512);
const code = z.string().trim().min(1).max(64);

export const registerBody = z.object({ email, name: z.string().trim().min(1).max(200), password });
export const loginBody = z.object({ email: z.string().trim().min(1).max(254), password });
export const twoFactorLoginBody = z.object({ challenge_token: token, code });
export const codeBody = z.object({ code });
export const tokenBody = z.object({ token });
export const resetRequestBody = z.object({ email });
export const resetConfirmBody = z.object({ token, password });
export const deleteAccountBody = z.object({ password, code: code.optional() });

/**
 * Routes that set the session cookie refuse a browser request from another site (login CSRF: a
 * foreign page must not sign the visitor into an account of its choosing). Clients that send neither
 * Origin nor Sec-Fetch-Site (curl, SDKs) are not browsers and pass.
 */
function sameSiteOnly(deps: Deps): RequestHandler {
  return (req, _res, next) => {
    const origin = req.get('origin');
    const site = req.get('sec-fetch-site');
    const crossSite = origin
      ? !isSameOrigin(req, deps.config, origin)
      : site !== undefined && site !== 'same-origin' && site !== 'none';
    if (crossSite) throw errorOf(COMMON_ERRORS, 'CSRF', 'cross-site request refused');
    next();
  };
}

function sessionResponse(res: Response, sessionToken: string, user: UserRow) {
  res.cookie(SESSION_COOKIE, sessionToken, sessionCookieOptions(SESSION_TTL_SECONDS));
  const message = user.emailVerifiedAt
    ? 'signed in'
    : 'signed in; verify your e-mail address to use the API (POST /v1/email/verify/resend sends a new link)';
  res.json({ user: userView(user), message, session_token: sessionToken });
}

export function accountRoutes(deps: Deps, auth: Auth): Router {
  const router = Router();
  router.use(PER_IP_PATHS, deps.limits.perIp);

  // Sessions only on 2FA and logout: an API token is a machine credential and must not change how
  // its user signs in (decision written in docs/accounts.md).
  const session = auth.require({ allow: ['session'] });
  const sessionUnverified = auth.require({ allow: ['session'], allowUnverified: true });

  router.post('/v1/register', async (req, res) => {
    const input = parse(registerBody, req.body);
    const { user, org } = await registerAndNotify(deps, input);
    res.json({
      user: userView(user),
      client: ownedClientView(org),
      message: 'account created; open the link we sent to your e-mail address to verify it',
    });
  });

  router.post('/v1/email/verify', async (req, res) => {
    const input = parse(tokenBody, req.body);
    await verifyEmail(deps, input.token);
    res.json({ verified: true });
  });

  router.post('/v1/email/verify/resend', sessionUnverified, async (req, res) => {
    const { sent } = await resendVerification(deps, principalOf(req).userId);
    res.json({
      sent,
      message: sent ? 'verification e-mail sent' : 'this e-mail address is already verified',
    });
  });

  const sameSite = sameSiteOnly(deps);

  router.post('/v1/login', sameSite, async (req, res) => {
    const input = parse(loginBody, req.body);
    const result = await loginWithPassword(deps, { ...input, origin: auditOriginOf(req) });
    if (result.kind === 'challenge') {
      res.json({
        requires_2fa: true,
        challenge_token: result.challengeToken,
        email: result.email,
        message: 'enter the code from your authenticator app or a recovery code',
      });
      return;
    }
    sessionResponse(res, result.token, result.user);
  });

  router.post('/v1/2fa/login', sameSite, async (req, res) => {
    const input = parse(twoFactorLoginBody, req.body);
    const { token: sessionToken, user } = await completeTwoFactorLogin(deps, {
      challengeToken: input.challenge_token,
      code: input.code,
      origin: auditOriginOf(req),
    });
    sessionResponse(res, sessionToken, user);
  });

  router.post('/v1/logout', sessionUnverified, async (req, res) => {
    const principal = principalOf(req);
    if (principal.kind === 'session') await revokeSession(deps.db, principal.sessionId);
    const { maxAge: _maxAge, ...cookie } = sessionCookieOptions(0);
    res.clearCookie(SESSION_COOKIE, cookie);
    res.json({ message: 'signed out' });
  });

  router.get('/v1/2fa/status', sessionUnverified, async (req, res) => {
    res.json(await twoFactorStatus(deps, principalOf(req).userId));
  });

  router.post('/v1/2fa/setup', session, async (req, res) => {
    res.json(await setupTwoFactor(deps, principalOf(req).userId));
  });

  router.post('/v1/2fa/enable', session, async (req, res) => {
    const input = parse(codeBody, req.body);
    const { recoveryCodes } = await enableTwoFactor(
      deps,
      principalOf(req).userId,
      input.code,
      auditOriginOf(req),
    );
    res.json({ enabled: true, recovery_codes: recoveryCodes });
  });

  router.post('/v1/2fa/disable', session, async (req, res) => {
    const input = parse(codeBody, req.body);
    await disableTwoFactor(deps, principalOf(req).userId, input.code, auditOriginOf(req));
    res.json({ enabled: false });
  });

  router.post('/v1/password/reset/request', async (req, res) => {
    const input = parse(resetRequestBody, req.body);
    await requestPasswordReset(deps, input.email);
    res.json({ message: RESET_REQUESTED_MESSAGE });
  });

  router.post('/v1/password/reset/confirm', async (req, res) => {
    const input = parse(resetConfirmBody, req.body);
    const { revoked } = await confirmPasswordReset(deps, { ...input, origin: auditOriginOf(req) });
    res.json(passwordChangeConfirmation('reset', revoked));
  });

  // Deleting one's account (docs/accounts.md "Deleting an account"): a session only, as
  // for 2FA (a machine credential must not end its person), unverified accounts included (a person who
  // mistyped their e-mail can leave). The password, and the 2FA code when on, are asked again.
  router.post('/v1/account/delete', sessionUnverified, async (req, res) => {
    const input = parse(deleteAccountBody, req.body);
    const result = await deleteAccount(deps, {
      userId: principalOf(req).userId,
      ...input,
      origin: auditOriginOf(req),
    });
    const { maxAge: _maxAge, ...cookie } = sessionCookieOptions(0);
    res.clearCookie(SESSION_COOKIE, cookie);
    res.json({
      deleted: true,
      deleted_clients: result.deletedOrganizations,
      forfeited_credits: result.forfeitedCredits,
      revoked: {
        sessions: result.revoked.sessions,
        oauth_grants: result.revoked.oauthGrants,
        api_tokens: result.revoked.apiTokens,
      },
      message: 'account deleted; every session, app connection and API token was revoked',
    });
  });

  // A database outage is 503 DATABASE_UNAVAILABLE on these routes, never 500 (src/db/outage.ts).
  router.use('/v1', databaseOutageAs503(deps.db));
  return router;
}
