import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { client } from '../helpers/http.js';
import { createApiToken, createUser, type TestUser } from '../helpers/fixtures.js';
import { createAuth } from '../../src/auth/principal.js';
import type { Request } from 'express';
import { detailError, openAiError, readJson } from '../helpers/json.js';

// `svc_` token lookups are group-committed (src/auth/principal.ts, src/db/batch.ts): the lookups that
// arrive while one is in flight share one statement. Under real concurrent HTTP, each caller must still
// get its own token's answer, a revocation must hold from the very next request (Authentication 5: no
// cache across batches), and a failed read must fail every caller of the batch closed (503, not 401).

let server: TestServer;
let api: ReturnType<typeof client>;
const holders: { user: TestUser; token: { id: number; secret: string } }[] = [];

beforeAll(async () => {
  server = await startTestServer();
  api = client(server.url);
  for (let i = 0; i < 6; i++) {
    const user = await createUser(server);
    holders.push({ user, token: await createApiToken(server, user, user.orgKey) });
  }
});
afterAll(async () => {
  await server?.close();
});

const verify = (secret: string) => api.get('/v1/auth/verify', { token: secret });
const revoke = (holder: (typeof holders)[number]) =>
  api.post('/v1/tokens/revoke', { id: holder.token.id }, { token: holder.user.session });

/** 8 concurrent calls per holder, interleaved, so one batch holds several tokens and repeats of each. */
const burst = () => Array.from({ length: 8 * holders.length }, (_, i) => holders[i % holders.length]!);

describe('batched svc_ token lookups', () => {
  it('answers each concurrent caller for its own token, and only the revoked token gets 401', async () => {
    const revoked = holders[2]!;
    expect((await revoke(revoked)).status).toBe(200);
    const callers = burst();
    const results = await Promise.all(callers.map((h) => verify(h.token.secret)));
    results.forEach((res, i) => {
      const h = callers[i]!;
      if (h === revoked) {
        expect(res.status, `caller ${i}`).toBe(401);
        expect(readJson(detailError, res.body).detail.code).toBe('INVALID_TOKEN');
      } else {
        expect(res.status, `caller ${i}`).toBe(200);
        expect(res.body).toMatchObject({
          valid: true,
          user_id: h.user.userId,
          token_id: h.token.id,
          client_id: h.user.orgId,
        });
      }
    });
    // The model surface, in its own shape.
    const models = await Promise.all(callers.map((h) => api.get('/v1/models', { token: h.token.secret })));
    expect(models.map((r) => r.status)).toEqual(callers.map((h) => (h === revoked ? 401 : 200)));
  });

  it('one statement serves many tokens at once (PGlite answers each HTTP lookup before the next arrives)', async () => {
    // Lookups started in one tick are queued behind the first: the second batch holds many hashes,
    // repeats included, whatever the engine. Every caller gets its own row.
    const auth = createAuth(server.deps);
    const bearer = (secret: string) =>
      ({ get: (name: string) => (name === 'authorization' ? `Bearer ${secret}` : undefined) }) as Request;
    const callers = burst().filter((h) => h !== holders[2]);
    const principals = await Promise.all(callers.map((h) => auth.resolve(bearer(h.token.secret))));
    principals.forEach((p, i) => {
      expect(p).toMatchObject({
        kind: 'api_token',
        userId: callers[i]!.user.userId,
        tokenId: callers[i]!.token.id,
      });
    });
    await expect(
      Promise.all([
        auth.resolve(bearer(holders[0]!.token.secret)),
        auth.resolve(bearer(holders[2]!.token.secret)),
      ]),
    ).rejects.toMatchObject({
      status: 401,
    });
  });

  it('a revocation holds from the next request, even with lookups in flight when it commits', async () => {
    const target = holders[4]!;
    const inFlight = burst().map((h) => verify(h.token.secret));
    expect((await revoke(target)).status).toBe(200);
    // Sent after the revocation answered: its lookup cannot share a batch that started before it.
    const [after, other] = await Promise.all([verify(target.token.secret), verify(holders[0]!.token.secret)]);
    expect(after.status).toBe(401);
    expect(other.status).toBe(200);
    await Promise.all(inFlight);
  });

  it('a lookup that fails gives every caller of the batch 503, never 401, and recovers', async () => {
    const live = holders.filter((_, i) => i !== 2 && i !== 4);
    await server.deps.db.execute(sql`alter table api_tokens rename to api_tokens_unavailable`);
    try {
      const callers = Array.from({ length: 24 }, (_, i) => live[i % live.length]!);
      const [accountSide, modelSide] = await Promise.all([
        Promise.all(callers.map((h) => verify(h.token.secret))),
        Promise.all(callers.map((h) => api.get('/v1/models', { token: h.token.secret }))),
      ]);
      for (const res of accountSide) {
        expect(res.status).toBe(503);
        expect(readJson(detailError, res.body).detail.code).toBe('MEMBERSHIP_UNAVAILABLE');
      }
      for (const res of modelSide) {
        expect(res.status).toBe(503);
        expect(readJson(openAiError, res.body).error.code).toBe('membership_unavailable');
      }
    } finally {
      await server.deps.db.execute(sql`alter table api_tokens_unavailable rename to api_tokens`);
    }
    const again = await Promise.all(live.map((h) => verify(h.token.secret)));
    expect(again.map((r) => r.status)).toEqual(live.map(() => 200));
  });
});
