import { beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { and, eq, sql } from 'drizzle-orm';
import { type TestServer } from '../helpers/server.js';
import { modelSuite } from '../helpers/model-suite.js';
import { createApiToken, createUser, addMember, type TestUser } from '../helpers/fixtures.js';
import { issueTestGrants } from '../helpers/oauth.js';
import { type FakeUpstream } from '../helpers/fake-upstream.js';
import { apiTokens, memberships } from '../../src/db/schema.js';
import { orgBalanceCredits } from '../../src/billing/spend.js';
import { client } from '../helpers/http.js';
import { anyOf, at, openAiErrorOf, rejectionOf } from '../helpers/json.js';

// Who may use the model routes (interface document: Authentication 4–8; CONTRACT §7, §9) and the two
// catalogs, with the official openai SDK against a fake provider. A call debits prompt + 2 × completion
// tokens at these prices (see models-chat.test.ts).

let server: TestServer;
let fake: FakeUpstream;
let owner: TestUser;
let key: string;

/** GET /v1/agents (the response schema of src/openapi/models.ts). */
interface Agents {
  data: {
    name: string;
    description: string;
    tools: { name: string; description: string; parameters: unknown }[];
  }[];
}
type ApiError = InstanceType<typeof OpenAI.APIError>;

const sdk = (apiKey: string, base = server.url) =>
  new OpenAI({ apiKey, baseURL: `${base}/v1`, maxRetries: 0, timeout: 10_000 });
const balance = () => orgBalanceCredits(server.deps.db, owner.orgKey);

const suite = modelSuite();
beforeAll(() => void ({ server, fake, owner, key } = suite));

describe('who acts', () => {
  it('no credential, a session JWT, or a cookie: 401', async () => {
    const body = { model: 'x', messages: [{ role: 'user', content: 'hi' }] };
    expect((await client(server.url).post('/v1/chat/completions', body)).status).toBe(401);
    expect(
      (await client(server.url).post('/v1/chat/completions', body, { token: owner.session })).status,
    ).toBe(401);
    const res = await client(server.url).post('/v1/chat/completions', body, {
      cookie: `__Host-svc_session=${owner.session}`,
    });
    expect(res.status).toBe(401);
    expect(openAiErrorOf(res.body).type).toBe('authentication_error');
  });

  it('a revoked token: 401', async () => {
    const other = await createUser(server);
    const t = await createApiToken(server, other, other.orgKey);
    await server.deps.db.update(apiTokens).set({ revokedAt: new Date() }).where(eq(apiTokens.id, t.id));
    const err = await rejectionOf<ApiError>(
      sdk(t.secret).chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'hi' }] }),
    );
    expect(err.status).toBe(401);
  });

  it('a viewer: 403 viewer_cannot_spend; a removed member: 403 not_a_member; no debit', async () => {
    const viewer = await createUser(server);
    await addMember(server, owner.orgKey, viewer.userId, 'viewer');
    const vt = await createApiToken(server, viewer, owner.orgKey);
    const before = await balance();
    const e1 = await rejectionOf<ApiError>(
      sdk(vt.secret).chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'hi' }] }),
    );
    expect([e1.status, e1.code]).toEqual([403, 'viewer_cannot_spend']);
    // A viewer may still read the catalog.
    expect((await sdk(vt.secret).models.list()).data[0]!.id).toBe('svc-test-model');

    const member = await createUser(server);
    await addMember(server, owner.orgKey, member.userId, 'member');
    const mt = await createApiToken(server, member, owner.orgKey);
    await sdk(mt.secret).chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'hi' }] });
    await server.deps.db
      .delete(memberships)
      .where(and(eq(memberships.orgId, owner.orgKey), eq(memberships.userId, member.userId)));
    const e2 = await rejectionOf<ApiError>(
      sdk(mt.secret).chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'hi' }] }),
    );
    expect([e2.status, e2.code]).toEqual([403, 'not_a_member']);
    expect(before - (await balance())).toBe(20); // only the member's one call
  });

  it('org_id in the query must match the acting org (either spelling)', async () => {
    const other = await createUser(server);
    const ok = await sdk(key).chat.completions.create(
      { model: 'x', messages: [{ role: 'user', content: 'hi' }] },
      { query: { org_id: owner.clientId } },
    );
    expect(ok.choices[0]!.message.content).toBeTruthy();
    const err = await rejectionOf<ApiError>(
      sdk(key).chat.completions.create(
        { model: 'x', messages: [{ role: 'user', content: 'hi' }] },
        { query: { org_id: other.orgId } },
      ),
    );
    expect([err.status, err.code]).toEqual([403, 'org_mismatch']);
    const res = await client(server.url).get('/v1/models', { token: key, query: { org_id: other.clientId } });
    expect(res.status).toBe(403);
  });

  it('a model grant acts for its org, or the x-svc-organisation org; a platform grant is refused', async () => {
    const member = await createUser(server);
    await addMember(server, owner.orgKey, member.userId, 'member');
    const grants = await issueTestGrants(server, member, {
      orgKey: member.orgKey,
      resources: ['model', 'platform'],
      origin: server.v2Url,
    });
    const memberBefore = await orgBalanceCredits(server.deps.db, member.orgKey);
    const res = await sdk(grants.model!, server.v2Url).chat.completions.create({
      model: 'x',
      messages: [{ role: 'user', content: 'hi' }],
    });
    expect(res.model).toBe('svc-test-model');
    expect(memberBefore - (await orgBalanceCredits(server.deps.db, member.orgKey))).toBe(20);

    const ownerBefore = await balance();
    await new OpenAI({
      apiKey: grants.model!,
      baseURL: `${server.v2Url}/v1`,
      maxRetries: 0,
      defaultHeaders: { 'x-svc-organisation': owner.clientId },
    }).chat.completions.create({
      model: 'x',
      messages: [{ role: 'user', content: 'hi' }],
    });
    expect(ownerBefore - (await balance())).toBe(20);

    const stranger = await createUser(server);
    const e1 = await rejectionOf<ApiError>(
      new OpenAI({
        apiKey: grants.model!,
        baseURL: `${server.v2Url}/v1`,
        maxRetries: 0,
        defaultHeaders: { 'x-svc-organisation': stranger.orgId },
      }).chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'hi' }] }),
    );
    expect(e1.status).toBe(403);

    const e2 = await rejectionOf<ApiError>(
      sdk(grants.platform!, server.v2Url).chat.completions.create({
        model: 'x',
        messages: [{ role: 'user', content: 'hi' }],
      }),
    );
    expect(e2.status).toBe(401);
    // A grant issued for V2 is not valid on the account origin (audience is the origin's /v1).
    const e3 = await rejectionOf<ApiError>(
      sdk(grants.model!, server.url).chat.completions.create({
        model: 'x',
        messages: [{ role: 'user', content: 'hi' }],
      }),
    );
    expect(e3.status).toBe(401);
  });
});

describe('catalogs', () => {
  it('GET /v1/models lists the forced model; needs a credential', async () => {
    const list = await sdk(key).models.list();
    expect(list.data).toEqual([
      { id: 'svc-test-model', object: 'model', created: anyOf(Number), owned_by: 'svc' },
    ]);
    expect((await client(server.url).get('/v1/models')).status).toBe(401);
    const res = await client(server.url).get('/v1/models', { token: owner.session });
    expect(res.status).toBe(401);
  });

  it('GET /v1/agents: the built-in default agent with its four terminal tools, for S, B and a model grant', async () => {
    const grants = await issueTestGrants(server, owner, {
      orgKey: owner.orgKey,
      resources: ['model'],
      origin: server.lightUrl,
    });
    for (const [base, token] of [
      [server.url, key],
      [server.url, owner.session],
      [server.lightUrl, grants.model!],
    ] as const) {
      const res = await client(base).get<Agents>('/v1/agents', { token });
      expect(res.status).toBe(200);
      const agent = res.body.data.find((a) => a.name === 'default');
      expect(agent?.tools.map((t) => t.name)).toEqual([
        'read_file',
        'write_file',
        'list_directory',
        'run_command',
      ]);
      expect(agent?.tools[0]?.parameters).toMatchObject({ type: 'object', required: ['path'] });
    }
    expect((await client(server.url).get('/v1/agents')).status).toBe(401);
    // A removed member's token cannot read it either.
    const gone = await createUser(server);
    await addMember(server, owner.orgKey, gone.userId, 'member');
    const gt = await createApiToken(server, gone, owner.orgKey);
    await server.deps.db
      .delete(memberships)
      .where(and(eq(memberships.orgId, owner.orgKey), eq(memberships.userId, gone.userId)));
    const res = await client(server.url).get('/v1/agents', { token: gt.secret });
    expect([res.status, openAiErrorOf(res.body).code]).toEqual([403, 'not_a_member']);
  });

  it('GET /v1/agents checks x-svc-organisation and org_id as GET /v1/models does, for every kind of caller', async () => {
    const stranger = await createUser(server);
    const get = (
      path: string,
      token: string,
      headers: Record<string, string> = {},
      query: Record<string, string> = {},
    ) => client(server.url).get(path, { token, headers, query });
    const answer = (r: { status: number; body: unknown }) => [r.status, at(r.body, 'error', 'code') ?? null];
    // An svc_ token is bound to its org: a header naming another is 403 on both catalogs alike.
    const foreign = { 'x-svc-organisation': stranger.clientId };
    expect(answer(await get('/v1/models', key, foreign))).toEqual([403, 'org_mismatch']);
    expect(answer(await get('/v1/agents', key, foreign))).toEqual([403, 'org_mismatch']);
    expect(answer(await get('/v1/agents', key, { 'x-svc-organisation': owner.orgId }))).toEqual([200, null]);
    // A session names no org of its own: one it names must be a live membership, in either place.
    expect(answer(await get('/v1/agents', owner.session, {}, { org_id: owner.clientId }))).toEqual([
      200,
      null,
    ]);
    expect(answer(await get('/v1/agents', owner.session, {}, { org_id: stranger.orgId }))).toEqual([
      403,
      'org_mismatch',
    ]);
    expect(answer(await get('/v1/agents', owner.session, { 'x-svc-organisation': owner.orgId }))).toEqual([
      200,
      null,
    ]);
    expect(answer(await get('/v1/agents', owner.session, foreign))).toEqual([403, 'not_a_member']);
    expect(
      answer(
        await get(
          '/v1/agents',
          owner.session,
          { 'x-svc-organisation': owner.orgId },
          { org_id: stranger.clientId },
        ),
      ),
    ).toEqual([403, 'org_mismatch']);
  });
});

describe('membership cannot be established', () => {
  it('fails closed with 503 membership_unavailable: nothing runs, nothing unbilled', async () => {
    const u = await createUser(server);
    const t = await createApiToken(server, u, u.orgKey);
    const seen = fake.requests.length;
    const before = await orgBalanceCredits(server.deps.db, u.orgKey);
    // The membership authority cannot answer (its table is unreadable for a moment).
    await server.deps.db.execute(sql`alter table memberships rename to memberships_away`);
    try {
      const err = await rejectionOf<ApiError>(
        sdk(t.secret).chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'hi' }] }),
      );
      expect([err.status, err.code]).toEqual([503, 'membership_unavailable']);
    } finally {
      await server.deps.db.execute(sql`alter table memberships_away rename to memberships`);
    }
    expect(fake.requests.length).toBe(seen);
    expect(await orgBalanceCredits(server.deps.db, u.orgKey)).toBe(before);
  });
});
