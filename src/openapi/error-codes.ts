import { AppError, COMMON_ERRORS, type ErrorCatalogue } from '../http/errors.js';
import { renderError } from '../http/error-middleware.js';
import { OAUTH_ERRORS } from '../../oauth/errors.js';
import { PROJECT_ERRORS } from '../projects/errors.js';
import { ACCOUNT_ERRORS } from '../accounts/errors.js';
import { ORG_ERRORS } from '../orgs/errors.js';
import { DEVICE_ERRORS } from '../device/errors.js';
import { EVENT_ERRORS } from '../events/errors.js';
import { METRICS_ERRORS } from '../metrics/errors.js';
import { RATELIMIT_ERRORS } from '../ratelimit/errors.js';
import { MODEL_ERRORS } from '../models/errors.js';
import { MCP_ERRORS } from '../../mcp/errors.js';
import { BILLING_ERRORS } from '../billing/errors.js';
import { RUN_ERRORS } from '../runs/errors.js';

// The error codes the API document lists for each status of a route (docs/openapi.md): the common
// catalogue (src/http/errors.ts) and the catalogue of the route's domain, each code spelled as the route's
// surface renders it (src/http/error-middleware.ts renderError: an OAuth route says invalid_request for
// VALIDATION_ERROR, a model route lower-cases).

/** Every domain's catalogue, for the checks that keep them in one spelling (test/openapi/). */
export const ERROR_CATALOGUES: Readonly<Record<string, ErrorCatalogue>> = {
  common: COMMON_ERRORS,
  oauth: OAUTH_ERRORS,
  accounts: ACCOUNT_ERRORS,
  orgs: ORG_ERRORS,
  device: DEVICE_ERRORS,
  events: EVENT_ERRORS,
  metrics: METRICS_ERRORS,
  ratelimit: RATELIMIT_ERRORS,
  models: MODEL_ERRORS,
  projects: PROJECT_ERRORS,
  mcp: MCP_ERRORS,
  billing: BILLING_ERRORS,
  runs: RUN_ERRORS,
};

export interface ListedCode {
  code: string;
  message: string;
}

/** The wire code of an error on a surface, or null on a surface whose errors carry none (pages). */
function wireCode(code: string, status: number, surface: string): string | null {
  // MCP's answers start their message with the code as the catalogue spells it (mcp/routes.ts, CONTRACT §10).
  if (surface === 'jsonrpc') return code;
  if (surface !== 'detail' && surface !== 'openai' && surface !== 'oauth' && surface !== 'plain') return null;
  // error-catalogue: renders a catalogue's code to read its spelling on the surface; nothing is thrown.
  const body = renderError(new AppError(status, code, ''), surface === 'plain' ? 'detail' : surface) as {
    detail?: { code: string };
    error?: string | { code: string };
  };
  if (body.detail) return body.detail.code;
  return typeof body.error === 'string' ? body.error : (body.error?.code ?? null);
}

/** The codes a route of `surface` answers `status` with: its domain's first, then the common ones. */
export function codesOf(domain: ErrorCatalogue | undefined, surface: string, status: number): ListedCode[] {
  const out = new Map<string, string>();
  for (const catalogue of [domain ?? {}, COMMON_ERRORS] as ErrorCatalogue[]) {
    for (const [code, entry] of Object.entries(catalogue)) {
      if (entry.status !== status && entry.alsoStatus !== status) continue;
      const wire = wireCode(code, status, surface);
      if (wire && !out.has(wire)) out.set(wire, entry.message);
    }
  }
  return [...out].map(([code, message]) => ({ code, message }));
}

/**
 * The codes a run's `error` frame may carry (they are frames on an open socket, not HTTP answers): the
 * run catalogue's and billing's that end a run, lower-cased as src/runs/loop.ts errorFrame sends them.
 */
export function runFrameCodes(): string {
  const codes: ErrorCatalogue = {
    ...RUN_ERRORS,
    insufficient_credits: BILLING_ERRORS.insufficient_credits,
    MEMBER_BUDGET_EXHAUSTED: BILLING_ERRORS.MEMBER_BUDGET_EXHAUSTED,
    CLIENT_DELETED: BILLING_ERRORS.CLIENT_DELETED,
  };
  return Object.entries(codes)
    .map(([code, entry]) => `\`${code.toLowerCase()}\` (${entry.message})`)
    .join('; ');
}

/** Which domain's catalogue a route's path belongs to (none: the common codes alone). */
const DOMAIN_BY_PATH: [RegExp, ErrorCatalogue][] = [
  [/^\/oauth\//, OAUTH_ERRORS],
  [/^\/v1\/projects(\/|$)/, { ...PROJECT_ERRORS, USER_NOT_FOUND: ACCOUNT_ERRORS.USER_NOT_FOUND }],
  // The model routes: the model call's codes and the rate limits' (CONTRACT §9, §11).
  [/^\/v1\/(chat|responses|messages|models|agents|runs)(\/|$)/, { ...MODEL_ERRORS, ...RATELIMIT_ERRORS }],
  // The MCP face: its own codes, the projects' its tools answer with, and RFC 6750's invalid_token.
  [
    /^\/mcp\//,
    {
      ...MCP_ERRORS,
      ...PROJECT_ERRORS,
      invalid_token: OAUTH_ERRORS.invalid_token,
      USER_NOT_FOUND: ACCOUNT_ERRORS.USER_NOT_FOUND,
    },
  ],
];

export const domainErrorsOf = (path: string): ErrorCatalogue | undefined =>
  DOMAIN_BY_PATH.find(([re]) => re.test(path))?.[1];
