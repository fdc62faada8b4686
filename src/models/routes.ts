import { Router, type Request, type Response } from 'express';
import type { Deps } from '../deps.js';
import type { Auth } from '../auth/principal.js';
import { AppError, invalidToken } from '../http/errors.js';
import { parse } from '../http/validate.js';
import { actorFromToken, actorOf, checkOrgQuery, isGrantShaped, ORG_HEADER } from './actor.js';
import { publicAgent } from './agents.js';
import { chatCompletion } from './chat.js';
import { admitChat } from './chat-admission.js';
import { requestOrigin } from '../http/origin.js';
import { chatRequest } from './schema.js';

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
      throw new AppError(404, 'model_not_found', `the model '${req.params.id}' does not exist`, { param: 'model' });
    }
    res.json(modelEntry(deps));
  });

  // S|B, or a model grant (CONTRACT §9): reading the catalog spends nothing, so cookies are fine here.
  router.get('/v1/agents', async (req, res) => {
    await agentsCaller(deps, auth, req);
    res.json({ data: deps.models.agents.list().map(publicAgent) });
  });

  router.post('/v1/chat/completions', async (req: Request, res: Response) => {
    // An svc_ token alone: its read and the call's hold in one statement (chat-admission.ts).
    const admitted = await admitChat(deps, auth, req);
    if (admitted) return chatCompletion(deps, admitted.actor, admitted.request, req, res, admitted.call);
    const actor = await actorOf(deps, auth, req, { spend: true });
    const request = parse(chatRequest, req.body);
    await chatCompletion(deps, actor, request, req, res);
  });

  return router;
}

const modelEntry = (deps: Deps) => ({ id: deps.models.modelId, object: 'model', created: CATALOG_CREATED, owned_by: 'svc' });

async function agentsCaller(deps: Deps, auth: Auth, req: Request) {
  const header = req.get('authorization');
  const bearer = header ? /^Bearer\s+(\S+)\s*$/i.exec(header)?.[1] : undefined;
  if (header && !bearer) throw invalidToken();
  // A model grant (ES256) is checked as one; a session JWT (HS256) or an svc_ token goes to the account auth.
  if (bearer && isGrantShaped(bearer)) {
    const actor = await actorFromToken(deps, auth, { token: bearer, origin: requestOrigin(req, deps.config), orgHeader: req.get(ORG_HEADER) ?? undefined });
    checkOrgQuery(req, actor);
    return;
  }
  // auth.require() throws (rejects) on failure and calls next() on success.
  const requireSession = auth.require() as (req: Request, res: Response, next: () => void) => Promise<void>;
  await requireSession(req, {} as Response, () => {});
  const principal = req.principal!;
  // An svc_ token of a removed member is refused here too (Authentication 5), and its org must match org_id.
  if (principal.kind === 'api_token') {
    if (!principal.role) throw new AppError(403, 'not_a_member', 'the user does not belong to this organization');
    checkOrgQuery(req, { userId: principal.userId, orgKey: principal.orgKey, role: principal.role, via: 'api_token' });
  }
}
