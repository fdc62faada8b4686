import { Router } from 'express';
import type { Deps } from '../deps.js';
import { principalOf, type Auth } from '../auth/principal.js';
import { errorOf, COMMON_ERRORS } from '../http/errors.js';
import { parse } from '../http/validate.js';
import { auditOriginOf } from '../audit/context.js';
import { unix } from '../ids.js';
import { resolveMemberOrg } from '../orgs/membership.js';
import { listOwnTokens, mintApiToken, revokeOwnToken } from './service.js';
import { verifyRead } from './verify-read.js';
import { expressRead } from '../http/read-row.js';
import {
  credentialOptionsOf,
  DEFAULT_TOKEN_NAME,
  mintBody,
  mintedTokenJson,
  revokeBody,
  tokenListItem,
} from './schema.js';
import { pageOf, pageQuery } from '../http/pagination.js';
import { databaseOutageAs503 } from '../db/outage.js';

// API tokens (interface document: Tokens, API token; CONTRACT §6). Minting, listing and revoking need a
// session ("S only": a credential cannot mint credentials); /v1/auth/verify takes only a credential.

export function tokenRoutes(deps: Deps, auth: Auth): Router {
  const router = Router();
  const session = auth.require({ allow: ['session'] });

  router.post('/v1/tokens', session, async (req, res) => {
    const body = parse(mintBody, req.body ?? {});
    const { userId } = principalOf(req);
    // Any live role may hold a credential: a viewer's token reads, and spending refuses it (CONTRACT §7).
    const { orgKey } = await resolveMemberOrg(deps.db, userId, body.client_id);
    const { row, secret } = await mintApiToken(deps.db, deps.keys.hmac, {
      userId,
      orgKey,
      tokenName: body.token_name ?? DEFAULT_TOKEN_NAME,
      ...credentialOptionsOf(body),
      origin: auditOriginOf(req),
    });
    res.set('Cache-Control', 'no-store');
    res.json(mintedTokenJson(row, secret));
  });

  router.get('/v1/tokens', session, async (req, res) => {
    const page = pageOf(parse(pageQuery, req.query));
    const rows = await listOwnTokens(deps.db, principalOf(req).userId, page);
    res.json({ data: rows.map(tokenListItem) });
  });

  router.post('/v1/tokens/revoke', session, async (req, res) => {
    const { id } = parse(revokeBody, req.body ?? {});
    const row = await revokeOwnToken(deps.db, principalOf(req).userId, id, auditOriginOf(req));
    if (!row) throw errorOf(COMMON_ERRORS, 'NOT_FOUND', 'no such token');
    res.json({ id: row.id, revoked_at: unix(row.revokedAt) });
  });

  // Its own status, as the route table serves it too (src/tokens/verify-read.ts).
  const verify = verifyRead(deps, auth);
  router.get(verify.path, ...expressRead(verify));

  // A database outage is 503 DATABASE_UNAVAILABLE on these routes, never 500 (src/db/outage.ts).
  router.use('/v1', databaseOutageAs503(deps.db));
  return router;
}
