import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { queryRows } from '../../src/db/client.js';
import { recordExpiredTokens } from '../../src/audit/token-expiry.js';
import { auditVerifyAnswer } from '../../src/audit/schema.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { client } from '../helpers/http.js';
import { createUser, type TestUser } from '../helpers/fixtures.js';
import { eventuallyValue } from '../helpers/eventually.js';
import { readJson } from '../helpers/json.js';
import { chainEvents, type AuditEvent } from '../helpers/audit.js';
import type { MintedToken } from '../helpers/answers.js';

// `token.expired` (CONTRACT §11; src/audit/token-expiry.ts): a credential whose expires_at passes while
// it is active gets exactly one event, written by the sweep every process runs (whether or not the
// credential is used again), by `system`; one revoked before its expiry gets none.

let server: TestServer;
let api: ReturnType<typeof client>;
beforeAll(async () => {
  server = await startTestServer();
  api = client(server.url);
});
afterAll(async () => {
  await server?.close();
});

const now = () => Math.floor(Date.now() / 1000);

async function mintExpiring(owner: TestUser, inSeconds: number): Promise<MintedToken> {
  const res = await api.post<MintedToken>(
    '/v1/tokens',
    { token_name: 'short-lived', expires_at: now() + inSeconds },
    { token: owner.session },
  );
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body;
}

const expiredEventsOf = async (owner: TestUser, tokenId: number): Promise<AuditEvent[]> =>
  (await chainEvents(server, owner.orgKey)).filter(
    (e) => e.action === 'token.expired' && e.target.id === String(tokenId),
  );

describe('token.expired', () => {
  it('a credential that expires unused gets one event from the sweep, by system, and the chain stays valid', async () => {
    const owner = await createUser(server);
    const minted = await mintExpiring(owner, 2);
    const events = await eventuallyValue(
      () => expiredEventsOf(owner, minted.id),
      (found) => found.length > 0,
      30_000,
      'the token.expired event',
      200,
    );
    expect(events).toHaveLength(1);
    expect(events[0]).toMatchObject({
      action: 'token.expired',
      actor: { type: 'system', id: null },
      credential_id: null,
      ip: null,
      user_agent: null,
      target: { type: 'token', id: String(minted.id) },
      details: { holder_id: owner.userId, expires_at: minted.expires_at },
    });
    expect(events[0]!.created_at).toBeGreaterThanOrEqual(minted.expires_at!);

    // More passes, several at once (as several processes run them), write no second event.
    await Promise.all([1, 2, 3].map(() => recordExpiredTokens(server.deps.db)));
    expect(await expiredEventsOf(owner, minted.id)).toHaveLength(1);

    // The expired credential is refused, and its use writes nothing more.
    const refused = await api.get('/v1/auth/verify', { token: minted.token });
    expect(refused.status).toBe(401);
    expect(await expiredEventsOf(owner, minted.id)).toHaveLength(1);

    const verify = await api.get(`/v1/clients/${owner.clientId}/audit-events/verify`, {
      token: owner.session,
    });
    expect(readJson(auditVerifyAnswer, verify.body)).toMatchObject({ valid: true, first_invalid_id: null });
    // The owner reads it through the API's action filter.
    const listed = await api.get<{ data: AuditEvent[] }>(`/v1/clients/${owner.clientId}/audit-events`, {
      token: owner.session,
      query: { action: 'token.expired' },
    });
    expect(listed.body.data.map((e) => e.target.id)).toEqual([String(minted.id)]);
  });

  it('concurrent passes over many expired credentials write exactly one event each', async () => {
    const owners = await Promise.all([1, 2, 3, 4].map(() => createUser(server)));
    const minted = await Promise.all(owners.map((o) => mintExpiring(o, 60)));
    // Their expiry moved into the past behind svc's back, before any sweep saw them.
    await server.deps.db.execute(
      sql`update api_tokens set expires_at = now() - interval '1 second'
          where id in (${sql.join(
            minted.map((m) => sql`${m.id}`),
            sql`, `,
          )})`,
    );
    await Promise.all([1, 2, 3, 4].map(() => recordExpiredTokens(server.deps.db, 2)));
    await recordExpiredTokens(server.deps.db);
    for (const [i, owner] of owners.entries())
      expect(await expiredEventsOf(owner, minted[i]!.id)).toHaveLength(1);
  });

  it('a credential revoked before its expiry gets no token.expired, and is not looked at again', async () => {
    const owner = await createUser(server);
    const minted = await mintExpiring(owner, 60);
    expect((await api.post('/v1/tokens/revoke', { id: minted.id }, { token: owner.session })).status).toBe(
      200,
    );
    await server.deps.db.execute(
      sql`update api_tokens set expires_at = revoked_at + interval '1 second' where id = ${minted.id}`,
    );
    await eventuallyValue(
      async () =>
        (
          await queryRows<{ seen: unknown }>(
            server.deps.db,
            sql`select expiry_seen_at as seen from api_tokens where id = ${minted.id}`,
          )
        )[0]?.seen ?? null,
      (seen) => seen !== null,
      30_000,
      'the sweep to see the expiry',
      200,
    );
    expect(await expiredEventsOf(owner, minted.id)).toEqual([]);
    const actions = (await chainEvents(server, owner.orgKey)).map((e) => e.action);
    expect(actions.filter((a) => a === 'token.revoked')).toHaveLength(1);
  });
});
