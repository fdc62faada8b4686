import { Router, type Request, type Response } from 'express';
import type { Deps } from '../deps.js';
import type { Auth } from '../auth/principal.js';
import { principalOf } from '../auth/principal.js';
import { clientIdOf } from '../ids.js';
import { AppError } from '../http/errors.js';
import { ACCOUNT_AUDIT_ACTIONS, ORG_AUDIT_ACTIONS } from '../audit/actions.js';
import { listAuditEvents, verifyAuditChain, type AuditFilter } from '../audit/service.js';
import { listMembers } from '../orgs/service.js';
import { listServiceAccounts } from '../service-accounts/service.js';
import { html, type SafeHtml } from '../page-kit/html.js';
import { requirePageSession } from '../auth/page-session.js';
import { alert, queryValue, show, type Notice } from './components.js';
import { notFoundPage, orgOfPage } from './org-page-kit.js';
import {
  auditLogBody,
  filterOfQuery,
  pageQuerySchema,
  type AuditLogView,
  type Choice,
  type PageQuery,
} from './audit-log-view.js';

// The audit log pages (CONTRACT §11; docs/audit.md): an organization's log for its owner
// (/account/clients/{id}/audit-log; anyone else gets the page an organization not theirs gets) and a
// person's own account log (/account/audit-log). Both filter by action, by who and by days, page along
// the API's cursor, export with the same filters, and check the chain on request (`?verify=1`).

const PAGE_SIZE = 20;
const orgQuery = pageQuerySchema(ORG_AUDIT_ACTIONS);
const accountQuery = pageQuerySchema(ACCOUNT_AUDIT_ACTIONS);

/** The page's query as parsed, with a message per field a person got wrong (shown beside the field). */
function readQuery(req: Request, schema: typeof orgQuery) {
  const input = Object.fromEntries(
    ['action', 'actor_id', 'since', 'until', 'starting_after'].flatMap((k) => {
      const v = queryValue(req, k, 200);
      return v ? [[k, v]] : [];
    }),
  );
  const parsed = schema.safeParse(input);
  if (parsed.success) return { query: parsed.data, errors: {} };
  const errors: AuditLogView['errors'] = {};
  for (const issue of parsed.error.issues) {
    const key = String(issue.path[0]) as keyof PageQuery;
    errors[key] ??= issue.message;
  }
  // What parsed is kept; a field in error is dropped from the filter (and shown with its message).
  const query: PageQuery = { action: '', actor_id: '', since: '', until: '' };
  for (const key of ['action', 'actor_id', 'since', 'until'] as const) {
    const one = schema.shape[key].safeParse(input[key]);
    if (one.success) query[key] = one.data;
  }
  return { query, errors };
}

interface Log {
  chain: string;
  title: string;
  heading: SafeHtml;
  intro: SafeHtml;
  base: string;
  api: string;
  actions: readonly string[];
  actors: Choice[];
  names: ReadonlyMap<string, string>;
  schema: typeof orgQuery;
}

/** Reads the page of `log` the request asks for and shows it (a mistake in the filters: 400, beside it). */
async function showLog(deps: Deps, req: Request, res: Response, log: Log): Promise<void> {
  const { query, errors } = readQuery(req, log.schema);
  let notice: Notice | null = null;
  let events: AuditLogView['events'] = [];
  let hasMore = false;
  const filter: AuditFilter = filterOfQuery(query);
  if (Object.keys(errors).length === 0) {
    try {
      const page = await listAuditEvents(deps.db, log.chain, filter, {
        limit: PAGE_SIZE,
        offset: 0,
        startingAfter: query.starting_after,
      });
      events = page.data;
      hasMore = page.has_more;
    } catch (err) {
      if (!(err instanceof AppError && err.status === 400)) throw err;
      errors.starting_after = 'No such event in this log.';
    }
  }
  if (errors.starting_after) notice = { kind: 'error', text: 'That page of the log does not exist.' };
  else if (Object.keys(errors).length > 0) notice = { kind: 'error', text: 'Check the filters below.' };
  else if (queryValue(req, 'verify') === '1') {
    const result = await verifyAuditChain(deps.db, log.chain);
    notice = result.valid
      ? { kind: 'ok', text: `The chain is intact: ${result.events} events, every hash checks.` }
      : {
          kind: 'error',
          text: `The chain was altered: the first event that does not check is ${result.first_invalid_id}.`,
        };
  }
  // Known people first, then the actor of the URL when it is no longer among them.
  const actors = [...log.actors];
  if (query.actor_id && !actors.some((a) => a.value === query.actor_id))
    actors.push({ value: query.actor_id, label: query.actor_id });
  const view: AuditLogView = {
    base: log.base,
    api: log.api,
    query,
    errors,
    actions: log.actions,
    actors,
    events,
    hasMore,
    names: log.names,
  };
  show(req, res, {
    title: log.title,
    status: Object.keys(errors).length > 0 ? 400 : 200,
    body: html`<h1>${log.heading}</h1>${alert(notice)}
<section class="card" aria-labelledby="h-events">${log.intro}${auditLogBody(view)}
<form method="get" action="${log.base}" class="actions"><input type="hidden" name="verify" value="1"><button type="submit" class="secondary">Check the chain</button></form></section>`,
  });
}

export function auditPageRoutes(deps: Deps, auth: Auth): Router {
  const router = Router();
  const session = requirePageSession(auth);

  router.get('/account/clients/:clientId/audit-log', session, async (req: Request, res: Response) => {
    const found = await orgOfPage(deps, req, 'owner');
    if (!found) return notFoundPage(req, res);
    const { org } = found;
    const [members, accounts] = await Promise.all([
      listMembers(deps.db, org.id),
      listServiceAccounts(deps.db, org.id),
    ]);
    const names = new Map(accounts.map((a) => [a.account.id, `${a.account.name} (service account)`]));
    const clientId = clientIdOf(org.id);
    await showLog(deps, req, res, {
      chain: org.id,
      title: `Audit log · ${org.name}`,
      heading: html`Audit log of ${org.name}`,
      intro: html`<p class="muted">Every change of who may do what or spend what in this organization, newest first. Each event is chained to the one before by its hash, so an edit shows.</p>`,
      base: `/account/clients/${clientId}/audit-log`,
      api: `/v1/clients/${clientId}/audit-events`,
      actions: ORG_AUDIT_ACTIONS,
      actors: [
        ...members.map((m) => ({ value: m.userId, label: m.email })),
        ...[...names].map(([value, label]) => ({ value, label })),
      ],
      names,
      schema: orgQuery,
    });
  });

  router.get('/account/audit-log', session, async (req: Request, res: Response) => {
    const p = principalOf(req);
    await showLog(deps, req, res, {
      chain: p.userId,
      title: 'Your account log',
      heading: html`Your account log`,
      intro: html`<p class="muted">Sign-ins, failed sign-ins, password and two-factor changes, sessions signed out, newest first.</p>`,
      base: '/account/audit-log',
      api: '/v1/account/audit-events',
      actions: ACCOUNT_AUDIT_ACTIONS,
      actors: [{ value: p.userId, label: `You (${p.email})` }],
      names: new Map(),
      schema: accountQuery,
    });
  });

  return router;
}
