import { Router, type Request } from 'express';
import { z } from 'zod';
import type { Deps } from '../deps.js';
import { principalOf, type Auth } from '../auth/principal.js';
import { COMMON_ERRORS, errorOf } from '../http/errors.js';
import { parse } from '../http/validate.js';
import { pageOf } from '../http/pagination.js';
import type { Actor } from './access.js';
import { createBody, forkBody, listQuery, projectIdIn, transferBody, updateBody } from './schema.js';
import {
  createProject,
  deleteProject,
  forkProject,
  getProject,
  listProjects,
  transferProject,
  updateProject,
} from './service.js';
import { sharePageRoutes } from './share-page.js';
import { databaseOutageAs503 } from '../db/outage.js';

// /v1/projects (interface document: Projects; CONTRACT §10), auth S|B. Errors render as
// {detail: {code, message}} through the shared middleware.

/**
 * The actor of a REST call. An `svc_` token acts only within its own organization, and the user must
 * still belong to it (interface document: Authentication 5 — 403 when they no longer do).
 */
export function actorOf(req: Request): Actor {
  const p = principalOf(req);
  if (p.kind === 'session') return { userId: p.userId };
  if (!p.role) throw errorOf(COMMON_ERRORS, 'NOT_A_MEMBER');
  return { userId: p.userId, boundOrgKey: p.orgKey };
}

export const idParams = z.object({ project_id: projectIdIn });

export function projectRoutes(deps: Deps, auth: Auth): Router {
  const router = Router();
  const { db } = deps;
  const authed = auth.require();

  router.get('/v1/projects', authed, async (req, res) => {
    // `org_id` is required; `client_id` is accepted as its other spelling (CONTRACT §2).
    const q = parse(listQuery, { ...req.query, org_id: req.query.org_id ?? req.query.client_id });
    res.json({
      data: await listProjects(deps.database, actorOf(req), { orgKey: q.org_id, ...pageOf(q) }),
    });
  });

  router.post('/v1/projects', authed, async (req, res) => {
    const b = parse(createBody, req.body ?? {});
    res.json(
      await createProject(db, actorOf(req), {
        orgKey: b.org_id,
        name: b.name,
        description: b.description,
        brief: b.brief,
      }),
    );
  });

  router.get('/v1/projects/:project_id', authed, async (req, res) => {
    const { project_id } = parse(idParams, req.params);
    res.json(await getProject(db, actorOf(req), project_id));
  });

  router.patch('/v1/projects/:project_id', authed, async (req, res) => {
    const { project_id } = parse(idParams, req.params);
    const b = parse(updateBody, req.body ?? {});
    res.json(await updateProject(db, actorOf(req), project_id, b));
  });

  router.delete('/v1/projects/:project_id', authed, async (req, res) => {
    const { project_id } = parse(idParams, req.params);
    res.json(await deleteProject(db, actorOf(req), project_id));
  });

  // "optional JSON {name, target_org_id}; omit body for same-client fork" (interface document).
  router.post('/v1/projects/:project_id/fork', authed, async (req, res) => {
    const { project_id } = parse(idParams, req.params);
    const b = parse(forkBody, req.body ?? {});
    res.json(
      await forkProject(db, actorOf(req), project_id, { name: b.name, targetOrgKey: b.target_org_id }),
    );
  });

  router.post('/v1/projects/:project_id/transfer', authed, async (req, res) => {
    const { project_id } = parse(idParams, req.params);
    const b = parse(transferBody, req.body ?? {});
    res.json(await transferProject(db, actorOf(req), project_id, b.target_org_id));
  });

  router.use(sharePageRoutes(deps));
  // A database outage is 503 DATABASE_UNAVAILABLE on these routes, never 500 (src/db/outage.ts).
  router.use('/v1', databaseOutageAs503(deps.db));
  return router;
}
