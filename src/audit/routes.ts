import { Router, type Request, type Response } from 'express';
import type { Deps } from '../deps.js';
import { principalOf, type Auth } from '../auth/principal.js';
import { parse } from '../http/validate.js';
import { pageOf } from '../http/pagination.js';
import { callerRole } from '../orgs/caller.js';
import { requireLiveCredential } from '../orgs/membership.js';
import { clientIdOf } from '../ids.js';
import { allAuditEvents, listAuditEvents, verifyAuditChain, type AuditFilter } from './service.js';
import { streamExport } from './export.js';
import { accountAuditQuery, accountExportQuery, orgAuditQuery, orgExportQuery } from './schema.js';

// The audit log's routes (CONTRACT §11): an organization's log (owner; session or the owner's svc_
// token) and a person's own account log (session only), each as pages, CSV, JSONL and a verification.

const filterOf = (q: {
  action?: string;
  actor_id?: string;
  since?: number;
  until?: number;
}): AuditFilter => ({
  action: q.action,
  actorId: q.actor_id,
  since: q.since,
  until: q.until,
});

export function auditRoutes(deps: Deps, auth: Auth): Router {
  const router = Router();
  const signedIn = [auth.require(), requireLiveCredential];
  const session = auth.require({ allow: ['session'] });

  const orgChain = async (req: Request) => (await callerRole(deps, req, 'owner')).org.id;

  router.get('/v1/clients/:client_id/audit-events', ...signedIn, async (req, res) => {
    const chain = await orgChain(req);
    const q = parse(orgAuditQuery, req.query);
    res.json(await listAuditEvents(deps.db, chain, filterOf(q), pageOf(q)));
  });

  router.get('/v1/clients/:client_id/audit-events/verify', ...signedIn, async (req, res) => {
    res.json(await verifyAuditChain(deps.db, await orgChain(req)));
  });

  for (const format of ['csv', 'jsonl'] as const)
    router.get(`/v1/clients/:client_id/audit-events.${format}`, ...signedIn, async (req, res) => {
      const chain = await orgChain(req);
      const filter = filterOf(parse(orgExportQuery, req.query));
      await streamExport(res, format, `audit-${clientIdOf(chain)}`, allAuditEvents(deps.db, chain, filter));
    });

  const ownChain = (req: Request) => principalOf(req).userId;

  router.get('/v1/account/audit-events', session, async (req, res) => {
    const q = parse(accountAuditQuery, req.query);
    res.json(await listAuditEvents(deps.db, ownChain(req), filterOf(q), pageOf(q)));
  });

  router.get('/v1/account/audit-events/verify', session, async (req, res) => {
    res.json(await verifyAuditChain(deps.db, ownChain(req)));
  });

  for (const format of ['csv', 'jsonl'] as const)
    router.get(`/v1/account/audit-events.${format}`, session, async (req: Request, res: Response) => {
      const filter = filterOf(parse(accountExportQuery, req.query));
      await streamExport(res, format, 'audit-account', allAuditEvents(deps.db, ownChain(req), filter));
    });

  return router;
}
