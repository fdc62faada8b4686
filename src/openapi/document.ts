import { createDocument, type ZodOpenApiPathsObject } from 'zod-openapi';
import { openApiPath, operationOf, securitySchemes, type DescribedRoute } from './describe.js';
import { accountRoutes } from './accounts.js';
import { billingRoutes } from './billing.js';
import { eventRoutes } from './events.js';
import { budgetRoutes } from './budgets.js';
import { serviceAccountRoutes } from './service-accounts.js';
import { limitRoutes } from './limits.js';
import { autoTopupRoutes } from './auto-topup.js';
import { modelRoutes } from './models.js';
import { oauthRoutes } from './oauth.js';
import { pageRoutes } from './pages.js';
import { peoplePageRoutes, peopleRoutes } from './people.js';
import { projectRoutes } from './projects.js';
import { serviceRoutes } from './service.js';
import { usageRoutes } from './usage.js';
import { auditRoutes } from './audit.js';
import { domainErrorsOf } from './error-codes.js';
import type { ErrorCatalogue } from '../http/errors.js';
import { ACCOUNT_ERRORS } from '../accounts/errors.js';
import { ORG_ERRORS } from '../orgs/errors.js';
import { EVENT_ERRORS } from '../events/errors.js';
import { BILLING_ERRORS } from '../billing/errors.js';

// The OpenAPI 3.1 document, generated from the zod schemas by zod-openapi (docs/openapi.md). Every
// surface's routes are listed in its own file; a new route is one `route(...)` call there.

export const describedRoutes: DescribedRoute[] = [
  ...serviceRoutes,
  ...accountRoutes,
  ...peopleRoutes,
  ...billingRoutes,
  ...eventRoutes,
  ...budgetRoutes,
  ...serviceAccountRoutes,
  ...limitRoutes,
  ...autoTopupRoutes,
  ...usageRoutes,
  ...auditRoutes,
  ...projectRoutes,
  ...modelRoutes,
  ...oauthRoutes,
  ...pageRoutes,
  ...peoplePageRoutes,
];

/**
 * The error catalogue whose codes a surface's routes list beside the common ones (decision record 0086),
 * where the path alone does not say (src/openapi/error-codes.ts DOMAIN_BY_PATH does for /oauth/* and
 * /v1/projects).
 */
const DOMAIN_OF_GROUP = new Map<DescribedRoute[], ErrorCatalogue>([
  [accountRoutes, ACCOUNT_ERRORS],
  [peopleRoutes, { ...ORG_ERRORS, USER_NOT_FOUND: ACCOUNT_ERRORS.USER_NOT_FOUND }],
  [eventRoutes, EVENT_ERRORS],
  [billingRoutes, BILLING_ERRORS],
  [budgetRoutes, BILLING_ERRORS],
  [autoTopupRoutes, BILLING_ERRORS],
]);
const domainOfRoute = new Map<DescribedRoute, ErrorCatalogue>(
  [...DOMAIN_OF_GROUP].flatMap(([group, catalogue]) => group.map((r) => [r, catalogue] as const)),
);

const cached = new Map<boolean, Record<string, unknown>>();

/** `/dev/*` answers 404 outside DEV_MODE (CONTRACT §1), so the production document leaves those routes out. */
const isDevRoute = (r: DescribedRoute): boolean => r.path === '/dev' || r.path.startsWith('/dev/');

/**
 * The document without servers (built once per mode: the schemas do not change while the process runs).
 * `devMode` false leaves out the `/dev/*` routes.
 */
export function openApiDocument(options: { devMode: boolean } = { devMode: true }): Record<string, unknown> {
  const hit = cached.get(options.devMode);
  if (hit) return hit;
  const paths: ZodOpenApiPathsObject = {};
  for (const r of describedRoutes) {
    if (!options.devMode && isDevRoute(r)) continue;
    const item = (paths[openApiPath(r.path)] ??= {});
    if (item[r.method]) throw new Error(`OpenAPI: ${r.method.toUpperCase()} ${r.path} is described twice`);
    item[r.method] = operationOf(r, domainOfRoute.get(r) ?? domainErrorsOf(r.path));
  }
  const document = createDocument({
    openapi: '3.1.0',
    info: {
      title: 'svc',
      version: '0.1.0',
      description:
        'Accounts, organizations (clients), API tokens, OAuth 2.1 authorization server, MCP server, ' +
        'billing in credits with an exact ledger, and an OpenAI-compatible model proxy. Errors take the ' +
        'shape of their surface: {detail} on /v1, OpenAI {error} on the model routes, RFC 6749 on /oauth/*, ' +
        'JSON-RPC on /mcp/platform, HTML on pages.',
    },
    components: { securitySchemes },
    paths,
  }) as unknown as Record<string, unknown>;
  cached.set(options.devMode, document);
  return document;
}

/** The document as served on one origin: that origin is its server (each origin is its own issuer). */
export function openApiDocumentFor(origin: string, options: { devMode: boolean }): Record<string, unknown> {
  return { ...openApiDocument(options), servers: [{ url: origin }] };
}
