import type { IncomingMessage } from 'node:http';
import express, { type Express } from 'express';
import type { Deps } from './deps.js';
import { createAuth, type Auth } from './auth/principal.js';
import { errorMiddleware, notFoundHandler } from './http/error-middleware.js';
import { databaseOutageAs503 } from './db/outage.js';
import { healthRoutes } from './http/health.js';
import { devRoutes } from './dev/routes.js';
import { accountRoutes } from './accounts/routes.js';
import { orgRoutes } from './orgs/routes.js';
import { limitRoutes } from './ratelimit/routes.js';
import { serviceAccountRoutes } from './service-accounts/routes.js';
import { tokenRoutes } from './tokens/routes.js';
import { deviceRoutes } from './device/routes.js';
import { billingRoutes } from './billing/routes.js';
import { eventRoutes } from './events/routes.js';
import { usageRoutes } from './usage/routes.js';
import { projectRoutes } from './projects/routes.js';
import { modelRoutes } from './models/routes.js';
import { modelRouteTable } from './models/entry.js';
import { tokenEntry } from '../oauth/token-entry.js';
import { readRow } from './http/read-row.js';
import { balanceReads } from './billing/balance-reads.js';
import { clientListRead } from './orgs/client-list.js';
import { verifyRead } from './tokens/verify-read.js';
import { portalRoutes } from './portal/routes.js';
import { oauthRoutes } from '../oauth/routes.js';
import { isMcpPath, mcpErrorHandler, mcpRoutes } from '../mcp/routes.js';
import { rejectNulCharacters } from './http/input-guard.js';
import { trustFunction } from './http/client-address.js';
import { jsonBody } from './http/json-body.js';
import { formBody } from './http/form-body.js';
import { frontSteps, type FastEntry } from './http/entry-steps.js';
import { pageErrorHandler, browserErrorPage } from './portal/page-errors.js';
import { openApiRoutes } from './openapi/routes.js';
import { metricsRoutes } from './metrics/routes.js';
import { auditRoutes } from './audit/routes.js';

// The HTTP face of every origin (CONTRACT §1: one process serves BASE_URL, V2_URL and LIGHT_URL; an
// origin changes issuers and links, not which routes exist).

/** Raw request bytes, kept for routes that verify a signature over them (Stripe webhooks). */
declare module 'express-serve-static-core' {
  interface Request {
    rawBody?: Buffer;
  }
}

/**
 * The routes with steps of their own, one row each: Express mounts every row ahead of its other layers
 * (buildApp), and the node-level listener serves the rows marked `aheadOfExpress` (src/server.ts;
 * decisions 0001, 0021 and 0091): the token request (form-encoded) and the chat call. The GET rows are the
 * reads every portal visit and CLI call make, which only the node-level listener serves (a plain GET);
 * their modules mount them on Express for every other request (src/http/read-row.ts; decision 0136).
 */
export function entryTable(deps: Deps, auth: Auth): FastEntry<IncomingMessage>[] {
  const reads = [verifyRead(deps, auth), ...balanceReads(deps, auth), clientListRead(deps, auth)];
  return [
    tokenEntry(deps),
    ...modelRouteTable(deps, auth),
    ...reads.map(readRow),
  ] as FastEntry<IncomingMessage>[];
}

/** `auth`: shared with the node-level entries (src/server.ts), so both group the same token reads. */
export function buildApp(deps: Deps, auth: Auth = createAuth(deps)): Express {
  const app = express();
  app.disable('x-powered-by');
  // req.ip, req.host and req.protocol believe exactly the proxies TRUST_PROXY names (src/http/client-address.ts).
  app.set('trust proxy', trustFunction(deps.config));
  app.set('query parser', 'simple');
  // The request log and dev mode's Host guard, as the entries ahead of Express run them (src/http/entry-steps.ts).
  for (const step of frontSteps(deps)) app.use(step as express.RequestHandler);

  // The route table's rows, ahead of every other layer so that they walk none of them; each runs its own
  // steps (a model route reads its body after its credential). A form-encoded token request and the chat
  // call without a query string never get here: the node-level entry serves them (src/server.ts).
  for (const entry of entryTable(deps, auth)) {
    if (entry.method === 'GET') continue;
    app.post(entry.path, ...(entry.steps as express.RequestHandler[]), (req, res) => entry.route(req, res));
  }
  // /mcp/platform next, for the same reason: it checks its credential and reads its own body itself
  // (mcp/routes.ts), and no layer below has a route on its paths.
  app.use(mcpRoutes(deps));

  // Body parsers (every JSON body nesting-limited: src/http/json-body.ts). MCP reads its own body (10 MB,
  // file writes) after its credential is checked (mcp/routes.ts), so it is skipped here.
  const json = jsonBody({
    limit: '1mb',
    verify: (req, _res, buf) => {
      (req as express.Request).rawBody = buf;
    },
  });
  app.use((req, res, next) => (isMcpPath(req.path) ? next() : json(req, res, next)));
  app.use(formBody());
  // The webhook's body is judged by its own route (signature over the raw bytes).
  app.use(rejectNulCharacters(['/v1/webhooks/stripe']));

  // The other model routes first: every router mounted before them is walked layer by layer on each call.
  // No router mounted after them has a route on their paths (/v1/models, /v1/agents, /v1/runs/ws), so the
  // order changes no answer.
  app.use(modelRoutes(deps, auth));
  app.use(healthRoutes(deps));
  app.use(openApiRoutes(deps));
  app.use(metricsRoutes(deps));
  app.use(devRoutes(deps));
  app.use(oauthRoutes(deps, auth));
  app.use(accountRoutes(deps, auth));
  app.use(orgRoutes(deps, auth));
  app.use(tokenRoutes(deps, auth));
  app.use(serviceAccountRoutes(deps, auth));
  app.use(limitRoutes(deps, auth));
  app.use(deviceRoutes(deps, auth));
  app.use(billingRoutes(deps, auth));
  app.use(eventRoutes(deps, auth));
  app.use(usageRoutes(deps, auth));
  app.use(auditRoutes(deps, auth));
  app.use(projectRoutes(deps, auth));
  app.use(portalRoutes(deps, auth));

  app.use(notFoundHandler);
  // A database outage is 503 with Retry-After on every surface, pages and models included.
  app.use(databaseOutageAs503(deps.db));
  // Errors raised before a surface's router ran (body parsers, the NUL guard, an undecodable path) in
  // that surface's shape: pages as HTML, MCP as JSON-RPC (CONTRACT §3).
  app.use(['/account', '/s'], pageErrorHandler(deps.log));
  // Everything else a browser navigates to (an unknown page, a bad dev checkout): HTML; API clients keep JSON.
  app.use(browserErrorPage(deps.log));
  app.use('/mcp/platform', mcpErrorHandler(deps));
  app.use(errorMiddleware(deps.log));
  return app;
}
