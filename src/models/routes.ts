import { Router, type Request, type Response } from 'express';
import type { Deps } from '../deps.js';
import type { Auth } from '../auth/principal.js';
import { invalidToken, errorOf } from '../http/errors.js';
import { MODEL_ERRORS } from './errors.js';
import { bearerOf } from '../http/bearer.js';
import { actorOf, checkOrgQuery, isGrantShaped, ORG_HEADER } from './admission/actor.js';
import { resolveActingOrg } from '../../oauth/verify.js';
import { parseOrgId } from '../ids.js';
import { liveRole } from '../orgs/membership.js';
import { publicAgent } from './front-ends/agents.js';
import { RUNS_PATH } from '../http/paths.js';
import { deleteStoredResponse, getStoredResponse, RESPONSES_PATH } from './front-ends/responses/route.js';

// The model routes (interface document: Model and run endpoints; CONTRACT §9). Errors render in the
// OpenAI shape (src/http/error-middleware.ts); auth is a `svc_` token or a model grant, never a cookie.

/** Fixed creation time of the catalog entry (the catalog is fixed: the one forced model). */
const CATALOG_CREATED = 1_767_225_600; // 2026-01-01T00:00:00Z

export function modelRoutes(deps: Deps, auth: Auth): Router {
  const router = Router();

  router.get('/v1/models', async (req, res) => {
    await actorOf(deps, auth, req, { spend: false });
    res.json({ object: 'list', data: [modelEntry(deps)] });
  });

  router.get('/v1/models/:id', async (req, res) => {
    await actorOf(deps, auth, req, { spend: false });
    if (req.params.id !== deps.models.modelId) {
      throw errorOf(MODEL_ERRORS, 'MODEL_NOT_FOUND', `the model '${req.params.id}' does not exist`, {
        param: 'model',
      });
    }
    res.json(modelEntry(deps));
  });

  // Stored responses (POST /v1/responses is mounted ahead, with the chat call's steps: src/app.ts).
  router.get(`${RESPONSES_PATH}/:id`, getStoredResponse(deps, auth));
  router.delete(`${RESPONSES_PATH}/:id`, deleteStoredResponse(deps, auth));

  // S|B, or a model grant (CONTRACT §9): reading the catalog spends nothing, so cookies are fine here.
  router.get('/v1/agents', async (req, res) => {
    await agentsCaller(deps, auth, req);
    res.json({ data: deps.models.agents.list().map(publicAgent) });
  });

  // The run socket is reached by a WebSocket upgrade (src/runs/socket.ts); a plain request is told so
  // (RFC 9110 §15.5.22: 426 names the protocol to switch to in Upgrade).
  router.get(RUNS_PATH, () => {
    throw errorOf(
      MODEL_ERRORS,
      'UPGRADE_REQUIRED',
      `${RUNS_PATH} speaks WebSocket: connect with Upgrade: websocket`,
      {
        headers: { Upgrade: 'websocket', Connection: 'Upgrade' },
      },
    );
  });

  return router;
}

const modelEntry = (deps: Deps) => ({
  id: deps.models.modelId,
  object: 'model',
  created: CATALOG_CREATED,
  owned_by: 'svc',
});

async function agentsCaller(deps: Deps, auth: Auth, req: Request) {
  const header = req.get('authorization');
  const bearer = bearerOf(header);
  if (header && !bearer) throw invalidToken();
  // An svc_ token or a model grant (ES256) acts exactly as on /v1/models: a removed member is refused
  // (Authentication 5), x-svc-organisation must name an org it may act for (CONTRACT §7) and org_id must
  // match the acting org (§9). A session JWT (HS256) or a cookie goes to the account auth.
  if (bearer && (bearer.startsWith('svc_') || isGrantShaped(bearer))) {
    await actorOf(deps, auth, req, { spend: false });
    return;
  }
  // auth.require() throws (rejects) on failure and calls next() on success.
  const requireSession = auth.require() as (req: Request, res: Response, next: () => void) => Promise<void>;
  await requireSession(req, {} as Response, () => {});
  await checkSessionOrgs(deps, req, req.principal!.userId);
}

/**
 * A session belongs to no one organization, so an org it names (x-svc-organisation, org_id) must be one
 * of the user's live memberships, and org_id must be the org the header names when both are sent — the
 * same answers a model grant gets for the same names (CONTRACT §7, §9).
 */
async function checkSessionOrgs(deps: Deps, req: Request, userId: string) {
  const named = req.get(ORG_HEADER);
  if (named?.trim()) {
    const acting = await resolveActingOrg(deps, { userId, orgKey: '' }, named);
    checkOrgQuery(req, acting);
    return;
  }
  const raw = req.query.org_id;
  if (raw === undefined) return;
  const orgKey = typeof raw === 'string' ? parseOrgId(raw) : null;
  if (!orgKey || !(await liveRole(deps.db, userId, orgKey))) {
    throw errorOf(MODEL_ERRORS, 'ORG_MISMATCH', 'org_id does not name an organization you belong to', {
      param: 'org_id',
    });
  }
}
