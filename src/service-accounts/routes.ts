import { Router, type Request } from 'express';
import type { Deps } from '../deps.js';
import { principalOf, type Auth } from '../auth/principal.js';
import { errorOf, COMMON_ERRORS } from '../http/errors.js';
import { parse } from '../http/validate.js';
import { auditOriginOf } from '../audit/context.js';
import { requireLiveCredential } from '../orgs/membership.js';
import { callerRole } from '../orgs/caller.js';
import { databaseOutageAs503 } from '../db/outage.js';
import { credentialOptionsOf, mintedTokenJson } from '../tokens/schema.js';
import {
  createServiceAccount,
  deleteServiceAccount,
  listServiceAccounts,
  mintServiceAccountToken,
} from './service.js';
import {
  createServiceAccountBody,
  DEFAULT_SERVICE_ACCOUNT_TOKEN_NAME,
  mintServiceAccountTokenBody,
  serviceAccountCredentialJson,
  serviceAccountIdParam,
  serviceAccountJson,
} from './schema.js';

// Service accounts (CONTRACT §11): owner only, with a session or the owner's `svc_` credential.

const PATH = '/v1/clients/:client_id/service-accounts';

function saIdOf(req: Request): string {
  const parsed = serviceAccountIdParam.safeParse(req.params.sa_id);
  if (!parsed.success) throw errorOf(COMMON_ERRORS, 'NOT_FOUND', 'no such service account');
  return parsed.data;
}

export function serviceAccountRoutes(deps: Deps, auth: Auth): Router {
  const router = Router();
  const signedIn = [auth.require(), requireLiveCredential];

  router.post(PATH, ...signedIn, async (req, res) => {
    const { org } = await callerRole(deps, req, 'owner');
    const body = parse(createServiceAccountBody, req.body ?? {});
    const sa = await createServiceAccount(deps.db, {
      orgKey: org.id,
      name: body.name,
      role: body.role,
      createdBy: principalOf(req).userId,
      origin: auditOriginOf(req),
    });
    res.json(serviceAccountJson(sa));
  });

  router.get(PATH, ...signedIn, async (req, res) => {
    const { org } = await callerRole(deps, req, 'owner');
    const rows = await listServiceAccounts(deps.db, org.id);
    res.json({
      data: rows.map(({ account, credential }) => ({
        ...serviceAccountJson(account),
        credential: credential && serviceAccountCredentialJson(credential),
      })),
    });
  });

  router.delete(`${PATH}/:sa_id`, ...signedIn, async (req, res) => {
    const { org } = await callerRole(deps, req, 'owner');
    await deleteServiceAccount(deps.db, org.id, saIdOf(req), auditOriginOf(req));
    res.json({ deleted: true });
  });

  router.post(`${PATH}/:sa_id/tokens`, ...signedIn, async (req, res) => {
    const { org } = await callerRole(deps, req, 'owner');
    const id = saIdOf(req);
    const body = parse(mintServiceAccountTokenBody, req.body ?? {});
    const { row, secret } = await mintServiceAccountToken(deps.db, deps.keys.hmac, {
      orgKey: org.id,
      id,
      tokenName: body.token_name ?? DEFAULT_SERVICE_ACCOUNT_TOKEN_NAME,
      ...credentialOptionsOf(body),
      origin: auditOriginOf(req),
    });
    res.set('Cache-Control', 'no-store');
    res.json(mintedTokenJson(row, secret));
  });

  router.use('/v1', databaseOutageAs503(deps.db));
  return router;
}
