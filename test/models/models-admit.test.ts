import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import { sql } from 'drizzle-orm';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { addMember, createApiToken, createUser } from '../helpers/fixtures.js';
import { orgAccountRow, setOrgBalance } from '../helpers/billing.js';
import { admitMany, type AdmitInput } from '../../src/models/admission/admit.js';
import { hmacSecret } from '../../src/crypto/hash.js';

// svc_admit_api_calls (src/db/custom/token-admission.sql): an `svc_` token's live read and its call's hold
// in one statement. Every kind of caller in ONE batch: only those who may spend hold anything, and each
// row says who the token acts for, so the route can answer as the account auth would. The HTTP answers
// of the same cases are in models-auth.test.ts (they take this path).

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(async () => {
  await server?.close();
});

const call = (secret: string, maxCredits = 100): AdmitInput => ({
  tokenHash: hmacSecret(server.deps.keys.hmac, secret),
  requestId: `req_${randomUUID()}`,
  minCredits: 10,
  maxCredits,
});

describe('token admission in one statement', () => {
  it('reads each token live and holds only for callers who may spend', async () => {
    const owner = await createUser(server);
    await setOrgBalance(server, owner.orgKey, 150);
    const ownerToken = (await createApiToken(server, owner, owner.orgKey)).secret;

    const viewer = await createUser(server);
    await addMember(server, owner.orgKey, viewer.userId, 'viewer');
    const viewerToken = (await createApiToken(server, viewer, owner.orgKey)).secret;

    const leaver = await createUser(server);
    await addMember(server, owner.orgKey, leaver.userId, 'member');
    const leaverToken = (await createApiToken(server, leaver, owner.orgKey)).secret;
    await server.deps.db.execute(
      sql`delete from memberships where user_id = ${leaver.userId} and org_id = ${owner.orgKey}`,
    );

    const unverified = await createUser(server, { verified: false });
    const unverifiedToken = (await createApiToken(server, unverified, unverified.orgKey)).secret;

    const revoked = await createUser(server);
    const revokedToken = (await createApiToken(server, revoked, revoked.orgKey)).secret;
    await server.deps.db.execute(
      sql`update api_tokens set revoked_at = now() where user_id = ${revoked.userId}`,
    );

    const gone = await createUser(server);
    const goneToken = (await createApiToken(server, gone, gone.orgKey)).secret;
    await server.deps.db.execute(sql`update orgs set deleted_at = now() where id = ${gone.orgKey}`);

    const results = await admitMany(server.deps.db, [
      call(ownerToken), // holds 100 of 150
      call(viewerToken),
      call(leaverToken),
      call(unverifiedToken),
      call(revokedToken),
      call(goneToken),
      call(`svc_${'x'.repeat(43)}`),
      call(ownerToken), // 50 left: holds 50 (min 10)
      call(ownerToken), // nothing left
    ]);
    expect(results.map((r) => r.outcome)).toEqual([
      'held',
      'refused',
      'refused',
      'refused',
      'no_token',
      'refused',
      'no_token',
      'held',
      'insufficient',
    ]);
    expect(results[0]).toMatchObject({
      userId: owner.userId,
      orgKey: owner.orgKey,
      role: 'owner',
      emailVerified: true,
      heldCredits: 100,
    });
    expect(results[7]!.heldCredits).toBe(50);
    expect(results[8]).toMatchObject({ userId: owner.userId, orgKey: owner.orgKey, heldCredits: 0 });
    expect(results[1]).toMatchObject({ role: 'viewer', userId: viewer.userId, heldCredits: 0 });
    expect(results[2]).toMatchObject({ role: null, userId: leaver.userId });
    expect(results[3]).toMatchObject({ emailVerified: false, role: 'owner' });
    expect(results[5]).toMatchObject({ orgDeleted: true });
    expect(await orgAccountRow(server, owner.orgKey)).toEqual({ balance: 150, held: 150 });
    expect((await orgAccountRow(server, unverified.orgKey)).held).toBe(0);
  });
});
