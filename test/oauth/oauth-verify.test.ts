import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { and, eq, sql } from 'drizzle-orm';
import { SignJWT, decodeJwt, decodeProtectedHeader, generateKeyPair } from 'jose';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { addMember, createUser } from '../helpers/fixtures.js';
import { issueTestGrants } from '../helpers/oauth.js';
import { client } from '../helpers/http.js';
import { resolveActingOrg, resourceUrl, verifyAccessToken } from '../../oauth/verify.js';
import { memberships, oauthGrants } from '../../src/db/schema.js';
import { AppError } from '../../src/http/errors.js';
import { SYSTEM_ORIGIN } from '../../src/audit/context.js';
import { anyOf } from '../helpers/json.js';

/** A JWK Set (RFC 7517 §5): a private member such as `d` must never be published. */
type Jwks = { keys: ({ kid: string; d?: string } & Record<string, unknown>)[] };

// The verifier the MCP server and the model routes use (CONTRACT §7), and the keys behind it.

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(async () => {
  await server?.close();
});

async function rejection(p: Promise<unknown>): Promise<AppError> {
  try {
    await p;
  } catch (err) {
    expect(err).toBeInstanceOf(AppError);
    return err as AppError;
  }
  throw new Error('expected a rejection');
}

describe('access tokens (RFC 9068)', () => {
  it('issues an ES256 at+jwt with the contract claims and verifies it', async () => {
    const user = await createUser(server);
    const { platform, model } = await issueTestGrants(server, user, {
      orgKey: user.orgKey,
      resources: ['platform', 'model'],
    });
    const header = decodeProtectedHeader(platform!);
    expect(header).toMatchObject({ alg: 'ES256', typ: 'at+jwt', kid: anyOf(String) });
    const claims = decodeJwt(platform!);
    expect(claims).toMatchObject({
      iss: server.v2Url,
      sub: user.userId,
      aud: `${server.v2Url}/mcp/platform`,
      client_id: 'svc-cli',
      scope: 'platform',
      org: user.orgId,
      jti: anyOf(String),
    });
    expect(claims.exp! - claims.iat!).toBe(900);
    const ok = await verifyAccessToken(server.deps, platform!, {
      resource: 'platform',
      origin: server.v2Url,
    });
    expect(ok).toMatchObject({
      userId: user.userId,
      orgKey: user.orgKey,
      clientId: 'svc-cli',
      scope: 'platform',
      resource: 'platform',
    });
    expect(
      (await verifyAccessToken(server.deps, model!, { resource: 'model', origin: server.v2Url })).resource,
    ).toBe('model');
    expect(resourceUrl(server.lightUrl, 'model')).toBe(`${server.lightUrl}/v1`);
  });

  it('rejects audience confusion both ways with 401 invalid_token', async () => {
    const user = await createUser(server);
    const { platform, model } = await issueTestGrants(server, user, {
      orgKey: user.orgKey,
      resources: ['platform', 'model'],
    });
    const a = await rejection(
      verifyAccessToken(server.deps, platform!, { resource: 'model', origin: server.v2Url }),
    );
    expect([a.status, a.code]).toEqual([401, 'invalid_token']);
    expect(a.extra.headers?.['WWW-Authenticate']).toContain('resource_metadata="');
    const b = await rejection(
      verifyAccessToken(server.deps, model!, { resource: 'platform', origin: server.v2Url }),
    );
    expect(b.status).toBe(401);
  });

  it('rejects a token presented on another origin (issuer is byte-identical)', async () => {
    const user = await createUser(server);
    const { platform } = await issueTestGrants(server, user, {
      orgKey: user.orgKey,
      resources: ['platform'],
    });
    expect(
      (
        await rejection(
          verifyAccessToken(server.deps, platform!, { resource: 'platform', origin: server.lightUrl }),
        )
      ).status,
    ).toBe(401);
    expect(
      (
        await rejection(
          verifyAccessToken(server.deps, platform!, { resource: 'platform', origin: `${server.v2Url}/` }),
        )
      ).status,
    ).toBe(401);
  });

  it('rejects foreign signatures, other typ, expiry and garbage', async () => {
    const user = await createUser(server);
    const { platform } = await issueTestGrants(server, user, {
      orgKey: user.orgKey,
      resources: ['platform'],
    });
    const claims = decodeJwt(platform!);
    const kid = decodeProtectedHeader(platform!).kid!;
    const foreign = await generateKeyPair('ES256');
    const forged = await new SignJWT(claims)
      .setProtectedHeader({ alg: 'ES256', typ: 'at+jwt', kid })
      .sign(foreign.privateKey);
    expect(
      (
        await rejection(
          verifyAccessToken(server.deps, forged, { resource: 'platform', origin: server.v2Url }),
        )
      ).status,
    ).toBe(401);
    const current = await server.deps.signingKeys.current();
    const sign = (c: Record<string, unknown>, typ = 'at+jwt') =>
      new SignJWT(c).setProtectedHeader({ alg: 'ES256', typ, kid: current.kid }).sign(current.privateKey);
    expect(
      (
        await verifyAccessToken(server.deps, await sign(claims), {
          resource: 'platform',
          origin: server.v2Url,
        })
      ).userId,
    ).toBe(user.userId);
    expect(
      (
        await rejection(
          verifyAccessToken(server.deps, await sign(claims, 'JWT'), {
            resource: 'platform',
            origin: server.v2Url,
          }),
        )
      ).status,
    ).toBe(401);
    const expired = await sign({ ...claims, iat: claims.iat! - 2000, exp: claims.iat! - 1000 });
    expect(
      (
        await rejection(
          verifyAccessToken(server.deps, expired, { resource: 'platform', origin: server.v2Url }),
        )
      ).status,
    ).toBe(401);
    expect(
      (
        await rejection(
          verifyAccessToken(server.deps, 'not-a-jwt', { resource: 'platform', origin: server.v2Url }),
        )
      ).status,
    ).toBe(401);
  });

  it('checks grant revocation and live membership on every call (removal hook, no cache)', async () => {
    const owner = await createUser(server);
    const member = await createUser(server);
    await addMember(server, owner.orgKey, member.userId, 'member');
    const { platform, grantIds } = await issueTestGrants(server, member, {
      orgKey: owner.orgKey,
      resources: ['platform', 'model'],
    });
    const opts = { resource: 'platform' as const, origin: server.v2Url };
    expect((await verifyAccessToken(server.deps, platform!, opts)).orgKey).toBe(owner.orgKey);
    // Membership gone without the hook: the live membership check alone answers 403.
    await server.deps.db
      .delete(memberships)
      .where(and(eq(memberships.orgId, owner.orgKey), eq(memberships.userId, member.userId)));
    const e = await rejection(verifyAccessToken(server.deps, platform!, opts));
    expect([e.status, e.code]).toEqual([403, 'NOT_A_MEMBER']);
    // Back in, then removed the way ORGS removes (hooks inside the transaction): the grants are revoked.
    await addMember(server, owner.orgKey, member.userId, 'member');
    expect((await verifyAccessToken(server.deps, platform!, opts)).grantId).toBe(grantIds.platform);
    await server.deps.db.transaction(async (tx) => {
      await tx
        .delete(memberships)
        .where(and(eq(memberships.orgId, owner.orgKey), eq(memberships.userId, member.userId)));
      for (const hook of server.deps.hooks.memberRemoved)
        await hook(tx, { orgKey: owner.orgKey, userId: member.userId, origin: SYSTEM_ORIGIN });
    });
    await addMember(server, owner.orgKey, member.userId, 'member');
    const revoked = await rejection(verifyAccessToken(server.deps, platform!, opts));
    expect([revoked.status, revoked.code]).toEqual([401, 'invalid_token']);
    // The member's grants in their own org are untouched.
    const own = await issueTestGrants(server, member, { orgKey: member.orgKey, resources: ['platform'] });
    expect((await verifyAccessToken(server.deps, own.platform!, opts)).orgKey).toBe(member.orgKey);
  });
});

describe('a token verified before (the verifier remembers verified signatures)', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('checks the origin and the resource again wherever a verified token is presented', async () => {
    const user = await createUser(server);
    const { platform } = await issueTestGrants(server, user, {
      orgKey: user.orgKey,
      resources: ['platform'],
    });
    const opts = { resource: 'platform' as const, origin: server.v2Url };
    expect((await verifyAccessToken(server.deps, platform!, opts)).userId).toBe(user.userId);
    expect((await verifyAccessToken(server.deps, platform!, opts)).userId).toBe(user.userId);
    for (const elsewhere of [
      { resource: 'model' as const, origin: server.v2Url },
      { resource: 'platform' as const, origin: server.lightUrl },
    ]) {
      const e = await rejection(verifyAccessToken(server.deps, platform!, elsewhere));
      expect([e.status, e.code]).toEqual([401, 'invalid_token']);
    }
  });

  it('refuses a verified token once it expires', async () => {
    const user = await createUser(server);
    const { platform } = await issueTestGrants(server, user, {
      orgKey: user.orgKey,
      resources: ['platform'],
    });
    const opts = { resource: 'platform' as const, origin: server.v2Url };
    expect((await verifyAccessToken(server.deps, platform!, opts)).userId).toBe(user.userId);
    const exp = decodeJwt(platform!).exp!;
    vi.useFakeTimers({ toFake: ['Date'] });
    vi.setSystemTime((exp - 1) * 1000);
    expect((await verifyAccessToken(server.deps, platform!, opts)).userId).toBe(user.userId);
    vi.setSystemTime(exp * 1000);
    const e = await rejection(verifyAccessToken(server.deps, platform!, opts));
    expect([e.status, e.code]).toEqual([401, 'invalid_token']);
  });
});

describe('concurrent verifications (one batched read of grant and membership)', () => {
  it('answers each caller for its own grant: a revoked grant 401, a removed member 403, the rest pass', async () => {
    const opts = { resource: 'model' as const, origin: server.v2Url };
    const owner = await createUser(server);
    const people = await Promise.all([1, 2, 3, 4].map(() => createUser(server)));
    for (const p of people) await addMember(server, owner.orgKey, p.userId, 'member');
    const grants = await Promise.all(
      people.map((p) => issueTestGrants(server, p, { orgKey: owner.orgKey, resources: ['model'] })),
    );
    const [, revokedHolder, removedHolder] = people;
    await server.deps.db
      .update(oauthGrants)
      .set({ revokedAt: new Date() })
      .where(eq(oauthGrants.id, grants[1]!.grantIds.model!));
    await server.deps.db
      .delete(memberships)
      .where(and(eq(memberships.orgId, owner.orgKey), eq(memberships.userId, removedHolder!.userId)));
    // A busy database (a transaction held open: PGlite runs one at a time) lets the verifications
    // queue, so one statement answers many of them (repeats included), on either engine. The 300 ms is
    // not a wait for something to happen: it is how long the database stays busy. Every assertion below
    // holds for any grouping of the calls, so a loaded machine that groups them differently cannot make
    // it pass or fail.
    const busy = server.deps.db.transaction(async (tx) => {
      await tx.execute(sql`select 1`);
      await new Promise((r) => setTimeout(r, 300));
    });
    const order = [0, 1, 2, 3, 0, 3, 1, 2, 0, 3];
    const results = await Promise.allSettled(
      order.map((k) => verifyAccessToken(server.deps, grants[k]!.model!, opts)),
    );
    await busy;
    results.forEach((r, i) => {
      const who = people[order[i]!]!;
      if (who === revokedHolder)
        expect(
          r.status === 'rejected' && [(r.reason as AppError).status, (r.reason as AppError).code],
          `call ${i}`,
        ).toEqual([401, 'invalid_token']);
      else if (who === removedHolder)
        expect(
          r.status === 'rejected' && [(r.reason as AppError).status, (r.reason as AppError).code],
          `call ${i}`,
        ).toEqual([403, 'NOT_A_MEMBER']);
      else
        expect(r.status === 'fulfilled' && r.value, `call ${i}`).toMatchObject({
          userId: who.userId,
          orgKey: owner.orgKey,
          role: 'member',
        });
    });
    // The model route, concurrently over HTTP: the acting role comes from the same read.
    const api = client(server.v2Url);
    const statuses = await Promise.all(
      order.map((k) => api.get('/v1/models', { token: grants[k]!.model! }).then((r) => r.status)),
    );
    expect(statuses).toEqual(order.map((k) => (k === 1 ? 401 : k === 2 ? 403 : 200)));
  });

  it('a read that fails gives every caller of the batch 503 (fail closed), then recovers', async () => {
    const opts = { resource: 'model' as const, origin: server.v2Url };
    const users = await Promise.all([1, 2, 3].map(() => createUser(server)));
    const tokens = await Promise.all(
      users.map(
        async (u) => (await issueTestGrants(server, u, { orgKey: u.orgKey, resources: ['model'] })).model!,
      ),
    );
    await server.deps.db.execute(sql`alter table oauth_grants rename to oauth_grants_unavailable`);
    try {
      const results = await Promise.allSettled(
        [...tokens, ...tokens].map((t) => verifyAccessToken(server.deps, t, opts)),
      );
      for (const r of results)
        expect(
          r.status === 'rejected' && [(r.reason as AppError).status, (r.reason as AppError).code],
        ).toEqual([503, 'MEMBERSHIP_UNAVAILABLE']);
    } finally {
      await server.deps.db.execute(sql`alter table oauth_grants_unavailable rename to oauth_grants`);
    }
    const again = await Promise.all(tokens.map((t) => verifyAccessToken(server.deps, t, opts)));
    expect(again.map((a) => a.role)).toEqual(['owner', 'owner', 'owner']);
  });
});

describe('acting organization (x-svc-organisation)', () => {
  it('defaults to the grant org, switches to a live membership, refuses others with 403', async () => {
    const owner = await createUser(server);
    const viewer = await createUser(server);
    await addMember(server, owner.orgKey, viewer.userId, 'viewer');
    const access = { userId: viewer.userId, orgKey: viewer.orgKey };
    expect(await resolveActingOrg(server.deps, access, undefined)).toEqual({
      orgKey: viewer.orgKey,
      role: 'owner',
    });
    expect(await resolveActingOrg(server.deps, access, owner.clientId)).toEqual({
      orgKey: owner.orgKey,
      role: 'viewer',
    });
    expect(await resolveActingOrg(server.deps, access, owner.orgId)).toEqual({
      orgKey: owner.orgKey,
      role: 'viewer',
    });
    const stranger = await createUser(server);
    expect((await rejection(resolveActingOrg(server.deps, access, stranger.orgId))).status).toBe(403);
    expect((await rejection(resolveActingOrg(server.deps, access, 'not-an-org'))).status).toBe(403);
  });
});

describe('signing keys', () => {
  it('publishes the JWKS on every origin and keeps the previous key through a rotation', async () => {
    const user = await createUser(server);
    const before = await issueTestGrants(server, user, { orgKey: user.orgKey, resources: ['platform'] });
    const jwks = await client(server.lightUrl).get<Jwks>('/.well-known/jwks.json');
    expect(jwks.status).toBe(200);
    const oldKid = decodeProtectedHeader(before.platform!).kid;
    expect(jwks.body.keys.map((k) => k.kid)).toContain(oldKid);
    expect(jwks.body.keys[0]).toMatchObject({ kty: 'EC', crv: 'P-256', alg: 'ES256', use: 'sig' });
    expect(jwks.body.keys[0]!.d).toBeUndefined();
    const newKid = await server.deps.signingKeys.rotate();
    const after = await issueTestGrants(server, user, { orgKey: user.orgKey, resources: ['platform'] });
    expect(decodeProtectedHeader(after.platform!).kid).toBe(newKid);
    const listed = (await client(server.v2Url).get<Jwks>('/.well-known/jwks.json')).body.keys.map(
      (k) => k.kid,
    );
    expect(listed).toEqual([newKid, oldKid]);
    // Both verify; after a second rotation the oldest is retired and its tokens stop verifying.
    const opts = { resource: 'platform' as const, origin: server.v2Url };
    expect((await verifyAccessToken(server.deps, before.platform!, opts)).userId).toBe(user.userId);
    await server.deps.signingKeys.rotate();
    expect((await rejection(verifyAccessToken(server.deps, before.platform!, opts))).status).toBe(401);
    expect((await verifyAccessToken(server.deps, after.platform!, opts)).userId).toBe(user.userId);
  });
});
