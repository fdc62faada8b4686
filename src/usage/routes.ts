import { Router, type Request, type Response } from 'express';
import { z } from 'zod';
import type { Deps } from '../deps.js';
import { assertCredentialReaches, principalOf, type Auth } from '../auth/principal.js';
import { noAccess } from '../http/errors.js';
import { pageFields, pageOf } from '../http/pagination.js';
import { parse } from '../http/validate.js';
import { clientIdOf, parseOrgId } from '../ids.js';
import { liveRole } from '../orgs/membership.js';
import type { Role } from '../db/schema.js';
import { toCsv, usdAtPar } from './csv.js';
import { USAGE_GROUPS, usageCalls, usageSummary, type UsagePeriod } from './service.js';

// The usage API (docs/usage.md): where an organization's tokens went.
//   GET /v1/clients/{client_id}/usage        totals per day | member | credential | model, and overall
//   GET /v1/clients/{client_id}/usage/calls  the call log, newest first, paged as every list (CONTRACT §3)
// Both take `from` and `to` (Unix seconds; [from, to); default: the last 30 days) and `format=csv`.
// Access (CONTRACT §5 roles): owners and members read everything; viewers read the totals by day and by
// model, not who spent or with which credential, and not the call log. A session or an svc_ bearer,
// as on the billing routes.

const DAY = 86_400;
/** A period is at most this long: one statement per request stays bounded. */
const MAX_PERIOD_SECONDS = 400 * DAY;
/** The call log as CSV: the newest calls of the period, at most this many in one file. */
const CSV_MAX_CALLS = 10_000;

const unixSeconds = z
  .string()
  .regex(/^\d{1,11}$/, 'must be Unix seconds (a decimal integer)')
  .transform(Number);

const periodFields = {
  from: unixSeconds.optional(),
  to: unixSeconds.optional(),
  format: z.enum(['json', 'csv']).default('json'),
};

function periodOf(orgKey: string, q: { from?: number; to?: number }): UsagePeriod {
  const to = q.to ?? Math.ceil(Date.now() / 1000);
  const from = q.from ?? to - 30 * DAY;
  return { orgKey, from, to };
}

const checkPeriod = (q: { from?: number; to?: number }, ctx: z.RefinementCtx) => {
  const { from, to } = periodOf('', q);
  if (from >= to) ctx.addIssue({ code: 'custom', path: ['from'], message: 'must be before to' });
  else if (to - from > MAX_PERIOD_SECONDS)
    ctx.addIssue({ code: 'custom', path: ['from'], message: 'the period may span at most 400 days' });
};

export const summaryQuery = z
  .object({ ...periodFields, group_by: z.enum(USAGE_GROUPS).default('day') })
  .superRefine(checkPeriod);
export const callsQuery = z.object({ ...periodFields, ...pageFields }).superRefine(checkPeriod);

/** Grouping that names people or credentials: not for viewers. */
const PERSONAL_GROUPS = new Set(['member', 'credential']);

function sendCsv(res: Response, name: string, csv: string) {
  res.setHeader('Content-Type', 'text/csv; charset=utf-8');
  res.setHeader('Content-Disposition', `attachment; filename="${name}"`);
  res.send(csv);
}

export function usageRoutes(deps: Deps, auth: Auth): Router {
  const router = Router();
  const { db } = deps;
  // Scope `account` grants read usage too, under the same role rules (CONTRACT §7).
  const reads = auth.require({ grantReads: true });

  /** The client in the path and the caller's live role there; 403 NO_ACCESS for anyone else. */
  async function readerOf(req: Request): Promise<{ orgKey: string; role: Role }> {
    const principal = principalOf(req);
    const orgKey = parseOrgId(String(req.params.client_id ?? ''));
    const role = orgKey ? await liveRole(db, principal.userId, orgKey) : null;
    if (!orgKey || !role) throw noAccess("no access to this client's usage");
    assertCredentialReaches(principal, orgKey);
    return { orgKey, role };
  }

  router.get('/v1/clients/:client_id/usage', reads, async (req, res) => {
    const { orgKey, role } = await readerOf(req);
    const q = parse(summaryQuery, req.query);
    if (role === 'viewer' && PERSONAL_GROUPS.has(q.group_by))
      throw noAccess('viewers read usage totals by day or model only');
    const period = periodOf(orgKey, q);
    const { data, totals } = await usageSummary(db, period, q.group_by);
    if (q.format === 'csv') {
      const header = [
        'key',
        'label',
        'calls',
        'prompt_tokens',
        'completion_tokens',
        'credits_debited',
        // The provider's price of the calls, not what was charged (that is credits_debited, debited_usd).
        'compute_cost_cents',
        // Appended last: the columns before them keep their places for existing readers.
        'cached_prompt_tokens',
        'debited_usd',
      ];
      const rows = data.map((r) => [
        r.key,
        r.label,
        r.calls,
        r.prompt_tokens,
        r.completion_tokens,
        r.credits_debited,
        r.cost_cents,
        r.cached_prompt_tokens,
        usdAtPar(r.credits_debited),
      ]);
      const t = totals;
      rows.push([
        'total',
        '',
        t.calls,
        t.prompt_tokens,
        t.completion_tokens,
        t.credits_debited,
        t.cost_cents,
        t.cached_prompt_tokens,
        usdAtPar(t.credits_debited),
      ]);
      return sendCsv(res, `usage-${clientIdOf(orgKey)}-${q.group_by}.csv`, toCsv(header, rows));
    }
    res.json({
      client_id: clientIdOf(orgKey),
      from: period.from,
      to: period.to,
      group_by: q.group_by,
      data,
      totals,
    });
  });

  router.get('/v1/clients/:client_id/usage/calls', reads, async (req, res) => {
    const { orgKey, role } = await readerOf(req);
    if (role === 'viewer') throw noAccess('viewers read usage totals, not the call log');
    const q = parse(callsQuery, req.query);
    const period = periodOf(orgKey, q);
    if (q.format === 'csv') {
      const calls = await usageCalls(db, period, { limit: CSV_MAX_CALLS + 1, offset: 0 });
      if (calls.length > CSV_MAX_CALLS) {
        calls.length = CSV_MAX_CALLS;
        res.setHeader('x-svc-truncated', 'true');
      }
      const header = [
        'id',
        'created_at',
        'user_id',
        'email',
        'credential',
        'credential_name',
        'source',
        'run_id',
        'model',
        'prompt_tokens',
        'completion_tokens',
        'compute_cost_cents',
        'credits_debited',
        'duration_ms',
        'outcome',
        'cached_prompt_tokens',
        'debited_usd',
      ];
      const rows = calls.map((c) => [
        c.id,
        new Date(c.created_at * 1000).toISOString(),
        c.user_id,
        c.email,
        c.credential.type === 'api_token'
          ? `token:${c.credential.token_id}`
          : `grant:${c.credential.grant_id}`,
        c.credential.type === 'api_token'
          ? c.credential.token_name
          : (c.credential.client_name ?? c.credential.client_id),
        c.source,
        c.run_id,
        c.model,
        c.prompt_tokens,
        c.completion_tokens,
        c.cost_cents,
        c.credits_debited,
        c.duration_ms,
        c.outcome,
        c.cached_prompt_tokens,
        usdAtPar(c.credits_debited),
      ]);
      return sendCsv(res, `usage-calls-${clientIdOf(orgKey)}.csv`, toCsv(header, rows));
    }
    res.json({
      client_id: clientIdOf(orgKey),
      from: period.from,
      to: period.to,
      data: await usageCalls(db, period, pageOf(q)),
    });
  });

  return router;
}
