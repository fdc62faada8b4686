import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { queryRows } from '../../src/db/client.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { client } from '../helpers/http.js';
import { createUser, type TestUser } from '../helpers/fixtures.js';
import { assertAuthChecks } from '../helpers/auth-checks.js';
import { detailOf, readJson, rejectionOf } from '../helpers/json.js';
import { behindSvcsBack, chainEvents } from '../helpers/audit.js';
import { auditEventAnswer, auditListAnswer, auditVerifyAnswer } from '../../src/audit/schema.js';
import { hashOfEvent, GENESIS_HASH } from '../../src/audit/chain.js';
import canonicalize from 'canonicalize';
import { createHash } from 'node:crypto';
import type { CreatedClient, MintedToken } from '../helpers/answers.js';

// The audit log (CONTRACT §11): one event per change, in the change's own transaction, chained by
// SHA-256 over RFC 8785 JSON, refused update and delete by the database, read by the owner with
// cursor paging and filters; a person's own account log beside it.

let server: TestServer;
let api: ReturnType<typeof client>;
beforeAll(async () => {
  server = await startTestServer();
  api = client(server.url);
});
afterAll(async () => {
  await server?.close();
});

const UA = 'audit-test/1.0';

/** An owner with a fresh non-default client (its own chain) and a person to add to it. */
async function freshClient() {
  const owner = await createUser(server, { name: 'Olga' });
  const created = await api.post<CreatedClient>('/v1/clients', { name: 'Audited' }, { token: owner.session });
  return { owner, clientId: created.body.id, orgKey: created.body.id.slice('client_'.length) };
}

const list = async (clientId: string, as: TestUser | string, query: Record<string, string | number> = {}) => {
  const res = await api.get(`/v1/clients/${clientId}/audit-events`, {
    token: typeof as === 'string' ? as : as.session,
    query,
    headers: { 'user-agent': UA },
  });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return readJson(auditListAnswer, res.body);
};

const verify = async (clientId: string, as: TestUser) => {
  const res = await api.get(`/v1/clients/${clientId}/audit-events/verify`, { token: as.session });
  expect(res.status).toBe(200);
  return readJson(auditVerifyAnswer, res.body);
};

describe('auth checks', () => {
  it.each([
    { method: 'GET', path: '/v1/clients/client_abcdefgh/audit-events' },
    { method: 'GET', path: '/v1/clients/client_abcdefgh/audit-events/verify' },
    { method: 'GET', path: '/v1/clients/client_abcdefgh/audit-events.csv' },
    { method: 'GET', path: '/v1/clients/client_abcdefgh/audit-events.jsonl' },
  ] as const)('%o', async (route) => {
    await assertAuthChecks(server, route);
  });
  it.each([
    { method: 'GET', path: '/v1/account/audit-events' },
    { method: 'GET', path: '/v1/account/audit-events/verify' },
  ] as const)('%o takes a session only', async (route) => {
    await assertAuthChecks(server, route, { accepts: 'session' });
  });

  it('only the owner reads an organization log; a member, a viewer and an outsider get 403', async () => {
    const { owner, clientId } = await freshClient();
    for (const role of ['member', 'viewer'] as const) {
      const person = await createUser(server);
      await api.post(
        `/v1/clients/${clientId}/members`,
        { email: person.email, role },
        { token: owner.session },
      );
      const res = await api.get(`/v1/clients/${clientId}/audit-events`, { token: person.session });
      expect(res.status).toBe(403);
      expect(detailOf(res.body).code).toBe('NO_ACCESS');
    }
    const outsider = await createUser(server);
    const res = await api.get(`/v1/clients/${clientId}/audit-events/verify`, { token: outsider.session });
    expect(res.status).toBe(403);
  });
});

describe('mutations write one event each, with who, from where and what', () => {
  it('members, roles, rename, tokens, allocation, deletion', async () => {
    const { owner, clientId, orgKey } = await freshClient();
    const mia = await createUser(server, { name: 'Mia' });
    const as = { token: owner.session, headers: { 'user-agent': UA } };
    expect((await api.post(`/v1/clients/${clientId}/members`, { email: mia.email }, as)).status).toBe(200);
    // A refused change writes nothing: already a member.
    expect((await api.post(`/v1/clients/${clientId}/members`, { email: mia.email }, as)).status).toBe(409);
    expect(
      (await api.patch(`/v1/clients/${clientId}/members/${mia.userId}`, { role: 'viewer' }, as)).status,
    ).toBe(200);
    expect((await api.patch(`/v1/clients/${clientId}`, { name: 'Renamed' }, as)).status).toBe(200);
    const minted = await api.post<MintedToken>('/v1/tokens', { client_id: clientId, token_name: 'ci' }, as);
    expect(minted.status).toBe(200);
    const second = await api.post<MintedToken>('/v1/tokens', { client_id: clientId, token_name: 'ci2' }, as);
    expect((await api.put(`/v1/owner/orgs/${clientId}/allocation`, { target_credits: 0 }, as)).status).toBe(
      200,
    );
    expect((await api.post('/v1/tokens/revoke', { id: second.body.id }, as)).status).toBe(200);
    expect((await api.delete(`/v1/clients/${clientId}/members/${mia.userId}`, as)).status).toBe(200);

    const page = await list(clientId, owner, { limit: 100 });
    expect(page.data.map((e) => e.action)).toEqual([
      'member.removed',
      'token.revoked',
      'allocation.changed',
      'token.created',
      'token.revoked',
      'token.created',
      'client.renamed',
      'member.role_changed',
      'member.added',
    ]);
    for (const e of page.data) {
      expect(e.actor).toEqual({ type: 'user', id: owner.userId, email: owner.email });
      expect(e.ip).toBe('127.0.0.1');
      expect(e.user_agent).toBe(UA);
      // A session made these: its public handle, never its secret.
      expect(e.credential_id).toMatch(/^ses_/);
      expect(owner.session).not.toContain(e.credential_id);
    }
    const [removed, revoked, allocation, created2, replaced, created1, renamed, roleChanged, added] =
      page.data;
    expect(added!.target).toEqual({ type: 'user', id: mia.userId });
    expect(added!.details).toEqual({ role: 'member' });
    expect(roleChanged!.details).toEqual({ from: 'member', to: 'viewer' });
    expect(renamed!.target).toEqual({ type: 'client', id: clientId });
    expect(renamed!.details).toEqual({ from: 'Audited', to: 'Renamed' });
    expect(created1!.target).toEqual({ type: 'token', id: String(minted.body.id) });
    expect(created1!.details).toEqual({
      holder_id: owner.userId,
      token_name: 'ci',
      expires_at: null,
      scopes: ['model', 'account'],
    });
    expect(replaced!.target.id).toBe(String(minted.body.id));
    expect(replaced!.details).toEqual({ holder_id: owner.userId, reason: 'replaced' });
    expect(created2!.target.id).toBe(String(second.body.id));
    expect(allocation!.details).toEqual({ from_credits: 0, to_credits: 0 });
    expect(revoked!.details).toEqual({ holder_id: owner.userId, reason: 'revoked_by_holder' });
    expect(removed!.details).toEqual({ role: 'viewer' });

    // Deleting the client revokes its tokens (one event each) and records the deletion; the log stays.
    expect((await api.delete(`/v1/clients/${clientId}`, as)).status).toBe(200);
    const events = await chainEvents(server, orgKey);
    expect(events.slice(-1).map((e) => e.action)).toEqual(['client.deleted']);
    expect(events.at(-1)!.target).toEqual({ type: 'client', id: clientId });
  });

  it('an svc_ token as the actor: credential_id is its id', async () => {
    const { owner, clientId } = await freshClient();
    const minted = await api.post<MintedToken>(
      '/v1/tokens',
      { client_id: clientId },
      { token: owner.session },
    );
    const res = await api.patch(
      `/v1/clients/${clientId}`,
      { name: 'By token' },
      { token: minted.body.token },
    );
    expect(res.status).toBe(200);
    const [latest] = (await list(clientId, minted.body.token, { limit: 1 })).data;
    expect(latest!.action).toBe('client.renamed');
    expect(latest!.credential_id).toBe(String(minted.body.id));
    expect(latest!.actor).toEqual({ type: 'user', id: owner.userId, email: owner.email });
  });
});

describe('the chain', () => {
  it('prev_hash links each event to the one before; hash is SHA-256 of the RFC 8785 JSON without hash', async () => {
    const { owner, clientId, orgKey } = await freshClient();
    for (const name of ['a', 'b', 'c'])
      await api.patch(`/v1/clients/${clientId}`, { name }, { token: owner.session });
    const events = (await list(clientId, owner)).data.reverse();
    expect(events).toHaveLength(3);
    let prev = GENESIS_HASH;
    for (const e of events) {
      expect(e.prev_hash).toBe(prev);
      const { hash, ...rest } = e;
      // Recomputed here with the library alone, not with svc's helper.
      expect(createHash('sha256').update(canonicalize(rest)!).digest('hex')).toBe(hash);
      expect(hashOfEvent(e)).toBe(hash);
      prev = hash;
    }
    expect(await verify(clientId, owner)).toEqual({ valid: true, events: 3, first_invalid_id: null });
    expect((await chainEvents(server, orgKey)).map((e) => e.id)).toEqual(events.map((e) => e.id));
  });

  it('the database refuses update, delete and truncate of an event', async () => {
    const { owner, clientId, orgKey } = await freshClient();
    await api.patch(`/v1/clients/${clientId}`, { name: 'x' }, { token: owner.session });
    const db = server.deps.db;
    for (const statement of [
      sql`update audit_events set action = 'client.deleted' where chain = ${orgKey}`,
      sql`delete from audit_events where chain = ${orgKey}`,
      sql`truncate audit_events`,
    ]) {
      const err = await rejectionOf<Error>(db.execute(statement));
      expect(String(err.message) + String((err as { cause?: unknown }).cause)).toMatch(/immutable/);
    }
    expect(await chainEvents(server, orgKey)).toHaveLength(1);
  });

  it('a row edited or removed behind svc’s back: verify names the first bad event', async () => {
    const { owner, clientId, orgKey } = await freshClient();
    for (const name of ['one', 'two', 'three', 'four'])
      await api.patch(`/v1/clients/${clientId}`, { name }, { token: owner.session });
    const events = await chainEvents(server, orgKey);
    await behindSvcsBack(
      server,
      sql`update audit_events set details = '{"from":"one","to":"evil"}'::jsonb where id = ${events[1]!.id}`,
    );
    expect(await verify(clientId, owner)).toEqual({
      valid: false,
      events: 4,
      first_invalid_id: events[1]!.id,
    });

    // Recomputing the edited row's own hash does not help: the next event's prev_hash gives it away.
    const edited = (await chainEvents(server, orgKey))[1]!;
    await behindSvcsBack(
      server,
      sql`update audit_events set hash = ${hashOfEvent(edited)} where id = ${edited.id}`,
    );
    expect(await verify(clientId, owner)).toEqual({
      valid: false,
      events: 4,
      first_invalid_id: events[2]!.id,
    });

    // A removed event: the one after it no longer links.
    const other = await freshClient();
    for (const name of ['p', 'q', 'r'])
      await api.patch(`/v1/clients/${other.clientId}`, { name }, { token: other.owner.session });
    const chain = await chainEvents(server, other.orgKey);
    await behindSvcsBack(server, sql`delete from audit_events where id = ${chain[0]!.id}`);
    expect(await verify(other.clientId, other.owner)).toEqual({
      valid: false,
      events: 2,
      first_invalid_id: chain[1]!.id,
    });
  });

  it('concurrent changes of one organization append one after the other: no fork, no gap', async () => {
    const { owner, clientId, orgKey } = await freshClient();
    const names = Array.from({ length: 12 }, (_, i) => `n${i}`);
    const results = await Promise.all(
      names.map((name) => api.patch(`/v1/clients/${clientId}`, { name }, { token: owner.session })),
    );
    expect(results.map((r) => r.status)).toEqual(names.map(() => 200));
    const events = await chainEvents(server, orgKey);
    expect(events).toHaveLength(12);
    expect(await verify(clientId, owner)).toEqual({ valid: true, events: 12, first_invalid_id: null });
  });

  it('the event is written in the change’s transaction: an event that cannot be written undoes the change', async () => {
    const { owner, clientId, orgKey } = await freshClient();
    const db = server.deps.db;
    // A check no event of this chain can pass, added for this test and dropped after it.
    await db.execute(
      sql.raw(
        `alter table audit_events add constraint audit_test_refuse check (chain <> '${orgKey}') not valid`,
      ),
    );
    try {
      const res = await api.patch(`/v1/clients/${clientId}`, { name: 'Not kept' }, { token: owner.session });
      expect(res.status).toBe(500);
    } finally {
      await db.execute(sql`alter table audit_events drop constraint audit_test_refuse`);
    }
    const [row] = await queryRows<{ name: string }>(db, sql`select name from orgs where id = ${orgKey}`);
    expect(row!.name).toBe('Audited');
    expect(await chainEvents(server, orgKey)).toHaveLength(0);
  });
});

describe('listing: newest first, cursor, filters', () => {
  it('limit, starting_after, has_more, action, actor_id, since, until', async () => {
    const { owner, clientId } = await freshClient();
    for (const name of ['a', 'b', 'c', 'd', 'e'])
      await api.patch(`/v1/clients/${clientId}`, { name }, { token: owner.session });
    const mia = await createUser(server);
    await api.post(`/v1/clients/${clientId}/members`, { email: mia.email }, { token: owner.session });
    const all = (await list(clientId, owner)).data;
    expect(all).toHaveLength(6);
    const first = await list(clientId, owner, { limit: 2 });
    expect(first.data.map((e) => e.id)).toEqual(all.slice(0, 2).map((e) => e.id));
    expect(first.has_more).toBe(true);
    const next = await list(clientId, owner, { limit: 10, starting_after: first.data[1]!.id });
    expect(next.data.map((e) => e.id)).toEqual(all.slice(2).map((e) => e.id));
    expect(next.has_more).toBe(false);
    expect((await list(clientId, owner, { action: 'member.added' })).data.map((e) => e.id)).toEqual([
      all[0]!.id,
    ]);
    expect((await list(clientId, owner, { actor_id: owner.userId })).data).toHaveLength(6);
    expect((await list(clientId, owner, { actor_id: mia.userId })).data).toHaveLength(0);
    const t = all[0]!.created_at;
    expect((await list(clientId, owner, { since: t + 1 })).data).toHaveLength(0);
    expect((await list(clientId, owner, { until: all.at(-1)!.created_at })).data).toHaveLength(0);
    expect((await list(clientId, owner, { since: all.at(-1)!.created_at, until: t + 1 })).data).toHaveLength(
      6,
    );

    const bad: Record<string, string | number>[] = [
      { action: 'nope' },
      { limit: 0 },
      { since: 'yesterday' },
      { starting_after: 'ae_unknown' },
    ];
    for (const query of bad) {
      const res = await api.get(`/v1/clients/${clientId}/audit-events`, { token: owner.session, query });
      expect(res.status, JSON.stringify(query)).toBe(400);
      expect(detailOf(res.body).code).toBe('VALIDATION_ERROR');
    }
    // Another organization's event id is no cursor here.
    const other = await freshClient();
    await api.patch(`/v1/clients/${other.clientId}`, { name: 'z' }, { token: other.owner.session });
    const foreign = (await list(other.clientId, other.owner)).data[0]!.id;
    const res = await api.get(`/v1/clients/${clientId}/audit-events`, {
      token: owner.session,
      query: { starting_after: foreign },
    });
    expect(res.status).toBe(400);
  });
});

describe('exports', () => {
  it('JSONL lines are the API items (each hash checks from the line alone); CSV has the contract columns', async () => {
    const { owner, clientId } = await freshClient();
    for (const name of ['=cmd', 'b, "quoted"'])
      await api.patch(`/v1/clients/${clientId}`, { name }, { token: owner.session });
    const items = (await list(clientId, owner)).data;
    const auth = { headers: { authorization: `Bearer ${owner.session}` } };
    const jsonl = await fetch(`${server.url}/v1/clients/${clientId}/audit-events.jsonl`, auth);
    expect(jsonl.status).toBe(200);
    expect(jsonl.headers.get('content-type')).toContain('application/x-ndjson');
    const lines = (await jsonl.text()).trim().split('\n');
    const parsed = lines.map((l) => readJson(auditEventAnswer, JSON.parse(l)));
    expect(parsed).toEqual(items);
    for (const e of parsed) expect(hashOfEvent(e)).toBe(e.hash);

    const csv = await fetch(
      `${server.url}/v1/clients/${clientId}/audit-events.csv?action=client.renamed`,
      auth,
    );
    expect(csv.status).toBe(200);
    expect(csv.headers.get('content-type')).toContain('text/csv');
    const [header, ...rows] = (await csv.text()).trim().split('\r\n');
    expect(header).toBe(
      'id,created_at,action,actor_type,actor_id,actor_email,credential_id,ip,user_agent,target_type,target_id,details,prev_hash,hash',
    );
    expect(rows).toHaveLength(2);
    const [latest] = items;
    expect(
      rows[0]!.startsWith(`${latest!.id},${latest!.created_at},client.renamed,user,${owner.userId},`),
    ).toBe(true);
    // details as JSON, quoted as RFC 4180 quotes a cell (doubled quotes).
    expect(rows[0]).toContain('""from"":""=cmd""');
    expect(rows[0]!.endsWith(`,${latest!.prev_hash},${latest!.hash}`)).toBe(true);
  });
});
