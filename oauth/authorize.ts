import { Router, type Request, type Response } from 'express';
import type { Deps } from '../src/deps.js';
import type { Auth } from '../src/auth/principal.js';
import { principalOf } from '../src/auth/principal.js';
import { requestOrigin } from '../src/http/origin.js';
import { liveMemberships, requireLiveMembership } from '../src/orgs/membership.js';
import { clientIdOf, parseOrgId } from '../src/ids.js';
import { COMMON_ERRORS, errorOf } from '../src/http/errors.js';
import { OAUTH_ERRORS } from './errors.js';
import {
  csrfField,
  html,
  renderPage,
  sendPage,
  verifyCsrfField,
  type SafeHtml,
} from '../src/page-kit/html.js';
import { requirePageSession } from '../src/auth/page-session.js';
import type { OAuthResource } from '../src/db/schema.js';
import { createCode } from './codes.js';
import {
  redirectWith,
  validateAuthorizationRequest,
  type AuthorizationRequest,
} from './authorize-request.js';
import { ACCOUNT_SCOPE, ACCOUNT_SCOPE_TEXT, resourceUrl } from './resources.js';
import { allOrganizationsField, allOrganizationsTicked } from '../src/page-kit/org-boundary.js';

// GET/POST /oauth/authorize: the consent page (CONTRACT §4, §7). GET validates the request and shows who
// asks (the client's name and where that name comes from), for what (the resources) and for which
// organization (the user's live memberships, default client first). POST carries the decision.
//
// Two different things are called client_id here. The OAuth client is the `client_id` QUERY parameter
// (the form posts back to the same URL, query included, and the request is validated again). The
// organization the user picks is the `client_id` FORM field, the name CONTRACT §4 gives every page's
// organization field (an org id in either spelling).

const RESOURCE_TEXT: Record<OAuthResource, { title: string; text: string }> = {
  model: {
    title: 'Model access',
    text: 'Call the model API (/v1/models, /v1/chat/completions), billed to the organization you choose.',
  },
  platform: {
    title: 'Platform tools',
    text: 'Use your projects, reports, files and shares through the platform tool endpoint (/mcp/platform).',
  },
};
/** The platform grant of a `platform:read` request (CONTRACT §10). */
const PLATFORM_READ_TEXT = {
  title: 'Platform tools, read only',
  text: 'Read your projects, reports, files and shares through the platform tool endpoint (/mcp/platform); it cannot change anything.',
};
const resourceText = (r: OAuthResource, scope: string) =>
  r === 'platform' && scope.split(' ').includes('platform:read') ? PLATFORM_READ_TEXT : RESOURCE_TEXT[r];

/**
 * The lines "It asks for" lists: each resource, except the model resource when the request asked only
 * for `account` on it (no model calls), and the `account` scope in CONTRACT §7's words when asked.
 */
function askedFor(origin: string, request: AuthorizationRequest): SafeHtml[] {
  const scope = request.scope.split(' ');
  const lines = request.resources
    .filter((r) => r !== 'model' || scope.includes('model'))
    .map(
      (r) =>
        html`<li><strong>${resourceText(r, request.scope).title}</strong> — ${resourceText(r, request.scope).text} <span class="muted">(${resourceUrl(origin, r)})</span></li>`,
    );
  if (scope.includes(ACCOUNT_SCOPE))
    lines.push(html`<li><strong>${ACCOUNT_SCOPE_TEXT.title}</strong> — ${ACCOUNT_SCOPE_TEXT.text}</li>`);
  return lines;
}

function provenance(request: AuthorizationRequest): SafeHtml {
  const c = request.client;
  if (c.source === 'builtin') return html`built into this service`;
  if (c.source === 'metadata') {
    return html`identified by its metadata document at <strong>${new URL(c.clientId).host}</strong>`;
  }
  return html`registered with this service by the application itself, so its name is not verified`;
}

/** CSP form-action must allow the redirect that follows the form post (CSP3: it applies to redirects). */
function formActionFor(redirectUri: string): string {
  const url = new URL(redirectUri);
  return url.protocol === 'http:' || url.protocol === 'https:' ? url.origin : url.protocol;
}

function errorPage(res: Response, status: number, message: string) {
  const body = html`<div class="card"><h1>This sign-in link cannot be used</h1><p>${message}</p><p>Go back to the application and start again.</p></div>`;
  sendPage(res, renderPage({ title: 'Authorization error', body, narrow: true }), status);
}

export function authorizeRoutes(deps: Deps, auth: Auth): Router {
  const router = Router();
  const session = requirePageSession(auth);

  /**
   * Validates; answers the error itself (page or redirect) and returns null, or returns the request.
   * Before the person is signed in, an error of a client that registered itself (DCR, metadata
   * document) is shown on the error page, never redirected: anyone can register a redirect URI, so a
   * redirect there before authentication would make this origin an open redirector (RFC 9700 §4.11.2;
   * CONTRACT §7). The built-in svc-cli, whose redirect URIs are ours (loopback), is redirected.
   */
  async function validated(
    req: Request,
    res: Response,
    redirectStatus: 302 | 303,
    signedIn: boolean,
  ): Promise<AuthorizationRequest | null> {
    const origin = requestOrigin(req, deps.config);
    const result = await validateAuthorizationRequest(deps, origin, req.query);
    if (result.kind === 'page') {
      errorPage(res, result.status, result.message);
      return null;
    }
    if (result.kind === 'redirect') {
      if (!signedIn && result.client.source !== 'builtin')
        errorPage(res, 400, `The application's request is not valid: ${result.description}.`);
      else res.redirect(redirectStatus, result.location);
      return null;
    }
    return result.request;
  }

  // The request is checked before the sign-in redirect, so a broken request fails at once.
  router.get(
    '/oauth/authorize',
    async (req, res, next) => {
      const visitor = await auth.resolve(req).catch(() => null);
      const request = await validated(req, res, 302, visitor?.kind === 'session');
      if (!request) return;
      res.locals.authorizationRequest = request;
      next();
    },
    session,
  );

  router.get('/oauth/authorize', async (req, res) => {
    const request = res.locals.authorizationRequest as AuthorizationRequest;
    const principal = principalOf(req);
    const origin = requestOrigin(req, deps.config);
    const orgs = await liveMemberships(deps.db, principal.userId);
    const name = request.client.clientName || request.client.clientId;
    const action = `/oauth/authorize${req.originalUrl.slice(req.originalUrl.indexOf('?'))}`;
    // The card layout of the portal's other narrow pages (sign-in, device approval).
    const body = html`<div class="card"><h1>Allow ${name} to use your account?</h1>
<p class="muted">${name} is ${provenance(request)}. After you decide, you will be sent to <strong>${formActionFor(request.redirectUri)}</strong>.</p>
<form method="post" action="${action}" class="stack">
${csrfField(req, res)}
<h2>It asks for</h2>
<ul>
${askedFor(origin, request)}
</ul>
<div class="field">
<label for="f-client_id">Organization to act for</label>
<select id="f-client_id" name="client_id">
${orgs.map((o, i) => html`<option value="${clientIdOf(o.orgKey)}"${i === 0 ? html` selected` : ''}>${o.name} (${o.role})</option>`)}
</select>
</div>
${request.client.source === 'builtin' ? html`<p class="hint">The svc command-line tool acts in every organization you belong to.</p>` : allOrganizationsField()}
<div class="actions">
<button type="submit" name="decision" value="approve">Allow</button>
<button type="submit" name="decision" value="deny" class="secondary">Deny</button>
</div>
</form></div>`;
    sendPage(res, renderPage({ title: `Allow ${name}?`, body, user: principal, narrow: true }), 200, {
      formAction: [formActionFor(request.redirectUri)],
    });
  });

  router.post('/oauth/authorize', session, async (req, res) => {
    verifyCsrfField(req);
    const request = await validated(req, res, 303, true);
    if (!request) return;
    const principal = principalOf(req);
    const origin = requestOrigin(req, deps.config);
    const form = (req.body ?? {}) as Record<string, unknown>;
    if (form.decision === 'deny') {
      res.redirect(
        303,
        redirectWith(
          request.redirectUri,
          { error: 'access_denied', error_description: 'the user denied the request', state: request.state },
          origin,
        ),
      );
      return;
    }
    if (form.decision !== 'approve')
      throw errorOf(OAUTH_ERRORS, 'invalid_request', 'decision must be approve or deny');
    let orgKey: string | null;
    if (typeof form.client_id === 'string' && form.client_id !== '') {
      orgKey = parseOrgId(form.client_id);
      if (!orgKey)
        throw errorOf(
          OAUTH_ERRORS,
          'invalid_request',
          'client_id (the organization) is not an organization id',
        );
    } else {
      orgKey = (await liveMemberships(deps.db, principal.userId))[0]?.orgKey ?? null;
      if (!orgKey) throw errorOf(COMMON_ERRORS, 'NOT_A_MEMBER', 'you do not belong to any organization');
    }
    await requireLiveMembership(deps.db, principal.userId, orgKey);
    const code = await createCode(deps.db, deps.keys.hmac, {
      clientId: request.client.clientId,
      userId: principal.userId,
      orgKey,
      redirectUri: request.redirectUri,
      codeChallenge: request.codeChallenge,
      resources: request.resources,
      scope: request.scope,
      issuer: origin,
      // The organization boundary (CONTRACT §7): svc-cli spans every membership anyway (grants.ts).
      allOrgs: allOrganizationsTicked(form),
    });
    res.redirect(303, redirectWith(request.redirectUri, { code, state: request.state }, origin));
  });

  return router;
}
