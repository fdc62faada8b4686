import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { client } from '../helpers/http.js';
import type { CreatedClient, OwnerBalance } from '../helpers/answers.js';
import { addMember, createUser } from '../helpers/fixtures.js';
import { issueTestGrants } from '../helpers/oauth.js';
import { verifyAccessToken } from '../../oauth/verify.js';

// The org routes with the hooks the other domains really register (src/deps.ts): deleting a client
// returns its allocation to the owner's pool (billing, CONTRACT §5, §8); removing a member revokes that
// member's OAuth grants for that client in the same transaction (CONTRACT §5, §7).

let server: TestServer;
let api: ReturnType<typeof client>;
beforeAll(async () => {
  server = await startTestServer();
  api = client(server.url);
});
afterAll(async () => {
  await server?.close();
});

describe('client deletion and billing', () => {
  it('returns the deleted client’s allocation to the owner’s pool', async () => {
    const owner = await createUser(server);
    const created = (await api.post<CreatedClient>('/v1/clients', { name: 'Temp' }, { token: owner.session }))
      .body.id;
    const key = created.slice('client_'.length);
    // The trial is allocated to the default client at once (CONTRACT §8): free some of it first.
    const dflt = (
      await api.get<OwnerBalance>('/v1/owner/balance', { token: owner.session })
    ).body.allocations.find((a) => a.is_default)!;
    expect(
      (
        await api.put(
          `/v1/owner/orgs/${owner.clientId}/allocation`,
          { target_credits: dflt.allocated_credits - 10_000 },
          { token: owner.session },
        )
      ).status,
    ).toBe(200);
    const before = (await api.get<OwnerBalance>('/v1/owner/balance', { token: owner.session })).body;
    const funded = await api.put<OwnerBalance>(
      `/v1/owner/orgs/${created}/allocation`,
      { target_credits: 10_000 },
      { token: owner.session },
    );
    expect(funded.status).toBe(200);
    expect(funded.body.unallocated_credits).toBe(before.unallocated_credits - 10_000);

    expect((await api.delete(`/v1/clients/${created}`, { token: owner.session })).status).toBe(200);
    const after = (await api.get<OwnerBalance>('/v1/owner/balance', { token: owner.session })).body;
    expect(after.unallocated_credits).toBe(before.unallocated_credits);
    expect(after.global_credits).toBe(before.global_credits);
    expect(after.allocations.map((a) => a.org_id)).not.toContain(created);
    expect(after.allocations.map((a) => a.org_id.replace(/^(client|org)_/, ''))).not.toContain(key);
  });
});

describe('member removal and OAuth grants', () => {
  it('revokes the removed member’s grants for that client at once; their grants elsewhere stay', async () => {
    const owner = await createUser(server);
    const user = await createUser(server);
    await addMember(server, owner.orgKey, user.userId);
    const here = await issueTestGrants(server, user, {
      orgKey: owner.orgKey,
      resources: ['model', 'platform'],
    });
    const own = await issueTestGrants(server, user, { orgKey: user.orgKey, resources: ['model'] });
    const check = (token: string, resource: 'model' | 'platform') =>
      verifyAccessToken(server.deps, token, { resource, origin: server.v2Url });
    await expect(check(here.model!, 'model')).resolves.toMatchObject({ orgKey: owner.orgKey });

    expect(
      (await api.delete(`/v1/clients/${owner.clientId}/members/${user.userId}`, { token: owner.session }))
        .body,
    ).toEqual({ removed: true });
    await expect(check(here.model!, 'model')).rejects.toMatchObject({ status: 401 });
    await expect(check(here.platform!, 'platform')).rejects.toMatchObject({ status: 401 });
    await expect(check(own.model!, 'model')).resolves.toMatchObject({ orgKey: user.orgKey });
  });
});
