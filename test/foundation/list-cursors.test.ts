import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { sql } from 'drizzle-orm';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { client } from '../helpers/http.js';
import { detailError, readJson } from '../helpers/json.js';
import type { InvitationRow, Page } from '../helpers/answers.js';
import { projectOut } from '../../src/projects/schema.js';
import { addMember, createApiToken, createUser, type TestUser } from '../helpers/fixtures.js';

// Cursor paging on every list (CONTRACT §3): `starting_after` names the last item of the
// previous page; walking a list by cursor yields exactly the list (each item once, in order), the same as
// walking it by offset; `offset` still works and counts from the cursor; a cursor that is not an item of
// this very list (unknown, another organization's, malformed) is 400 VALIDATION_ERROR on starting_after.

let server: TestServer;
let owner: TestUser;
let other: TestUser;
let ownerKey: string;
beforeAll(async () => {
  // Priced so that every call writes a `usage` ledger row (1 cent a token, in and out).
  server = await startTestServer({ env: { MODEL_PRICE_INPUT: '1000000', MODEL_PRICE_OUTPUT: '1000000' } });
  owner = await createUser(server);
  other = await createUser(server);
  ownerKey = (await createApiToken(server, owner, owner.orgKey, 'first')).secret;
});
afterAll(async () => server?.close());

const api = () => client(server.url);
type Item = Record<string, unknown>;
type Lister = (query: string) => Promise<Item[]>;

/** A REST list as a function of its query string (`{data}` or a bare array). */
const rest =
  (path: string, token: () => string): Lister =>
  async (query) => {
    const res = await api().get<Item[] | Page<Item>>(`${path}${path.includes('?') ? '&' : '?'}${query}`, {
      token: token(),
    });
    expect(res.status, `${path}?${query}: ${JSON.stringify(res.body)}`).toBe(200);
    return Array.isArray(res.body) ? res.body : res.body.data;
  };

/** Every id, page by page of `size`, following starting_after from each page's last item. */
async function walkByCursor(list: Lister, size: number, idOf: (i: Item) => string): Promise<string[]> {
  const ids: string[] = [];
  let cursor: string | undefined;
  for (let guard = 0; guard < 100; guard++) {
    const page = await list(`limit=${size}${cursor ? `&starting_after=${encodeURIComponent(cursor)}` : ''}`);
    ids.push(...page.map(idOf));
    if (page.length < size) return ids;
    cursor = idOf(page.at(-1)!);
  }
  throw new Error('the cursor walk did not end');
}

async function walkByOffset(list: Lister, size: number, idOf: (i: Item) => string): Promise<string[]> {
  const ids: string[] = [];
  for (let offset = 0; ; offset += size) {
    const page = await list(`limit=${size}&offset=${offset}`);
    ids.push(...page.map(idOf));
    if (page.length < size) return ids;
  }
}

/** The shared checks for one list: cursor walk = offset walk = the whole list, offset after a cursor, 400s. */
async function checkList(list: Lister, idOf: (i: Item) => string) {
  const all = (await list('limit=100')).map(idOf);
  expect(all.length).toBeGreaterThanOrEqual(5);
  expect(new Set(all).size).toBe(all.length);
  expect(await walkByCursor(list, 2, idOf)).toEqual(all);
  expect(await walkByOffset(list, 2, idOf)).toEqual(all);
  // offset counts from the cursor; offset=0 beside a cursor changes nothing.
  const after = encodeURIComponent(all[1]!);
  expect((await list(`limit=2&starting_after=${after}&offset=1`)).map(idOf)).toEqual(all.slice(3, 5));
  expect((await list(`limit=2&starting_after=${after}&offset=0`)).map(idOf)).toEqual(all.slice(2, 4));
  // The cursor of the last item is the end of the list.
  expect(await list(`starting_after=${encodeURIComponent(all.at(-1)!)}`)).toEqual([]);
  return all;
}

async function expectBadCursor(path: string, token: string, cursors: string[]) {
  for (const cursor of cursors) {
    const sep = path.includes('?') ? '&' : '?';
    const res = await api().get(`${path}${sep}starting_after=${encodeURIComponent(cursor)}`, { token });
    expect(res.status, `${path} starting_after=${cursor}`).toBe(400);
    const { detail } = readJson(detailError, res.body);
    expect(detail.code).toBe('VALIDATION_ERROR');
    expect(detail.errors![0]!.path).toBe('starting_after');
  }
}

async function chat(token: string) {
  const sdk = new OpenAI({ apiKey: token, baseURL: `${server.url}/v1`, maxRetries: 0, timeout: 20_000 });
  await sdk.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'hello there' }] });
}

describe('starting_after on every list (CONTRACT §3)', () => {
  it('transactions and the usage call log: newest first, by cursor as by offset', async () => {
    for (let i = 0; i < 5; i++) await chat(ownerKey);
    const otherKey = (await createApiToken(server, other, other.orgKey)).secret;
    await chat(otherKey);

    const txPath = (u: TestUser) => `/v1/clients/${u.clientId}/credits/transactions`;
    const tx = await checkList(
      rest(txPath(owner), () => owner.session),
      (t) => String(t.id),
    );
    expect(tx.map(Number)).toEqual([...tx.map(Number)].sort((a, b) => b - a));
    const otherTx = (await rest(txPath(other), () => other.session)('')).map((t) => String(t.id));
    await expectBadCursor(txPath(owner), owner.session, [otherTx[0]!, '999999999', 'abc', '1.5']);

    const callsPath = (u: TestUser) => `/v1/clients/${u.clientId}/usage/calls`;
    await checkList(
      rest(callsPath(owner), () => owner.session),
      (c) => String(c.id),
    );
    const otherCall = (await rest(callsPath(other), () => other.session)(''))[0]!.id as string;
    await expectBadCursor(callsPath(owner), owner.session, [otherCall, 'req_nope']);
  });

  it('projects: newest first, by cursor as by offset', async () => {
    const created: string[] = [];
    for (let i = 0; i < 6; i++) {
      const res = await api().post(
        '/v1/projects',
        { org_id: owner.clientId, name: `p${i}` },
        { token: owner.session },
      );
      expect(res.status).toBe(200);
      created.push(readJson(projectOut, res.body).id);
    }
    const list = rest(`/v1/projects?org_id=${owner.clientId}`, () => owner.session);
    const all = await checkList(list, (p) => String(p.id));
    expect(all).toEqual([...created].reverse());
    const foreign = await api().post(
      '/v1/projects',
      { org_id: other.clientId, name: 'x' },
      { token: other.session },
    );
    await expectBadCursor(`/v1/projects?org_id=${owner.clientId}`, owner.session, [
      readJson(projectOut, foreign.body).id,
      'prj_nope',
    ]);
  });

  it('members (oldest first), clients (default first) and tokens (active first, newest first)', async () => {
    const team = await createUser(server);
    for (let i = 0; i < 5; i++) await addMember(server, team.orgKey, (await createUser(server)).userId);
    await checkList(
      rest(`/v1/clients/${team.clientId}/members`, () => team.session),
      (m) => String(m.user_id),
    );
    await expectBadCursor(`/v1/clients/${team.clientId}/members`, team.session, [other.userId, 'usr_nope']);

    // A person in many clients: their own default first, then the ones they joined.
    const joiner = await createUser(server);
    for (let i = 0; i < 5; i++) {
      const res = await api().post('/v1/clients', { name: `c${i}` }, { token: joiner.session });
      expect(res.status).toBe(200);
    }
    const clients = await checkList(
      rest('/v1/clients', () => joiner.session),
      (c) => String(c.id),
    );
    expect(clients[0]).toBe(joiner.clientId);
    await expectBadCursor('/v1/clients', joiner.session, [other.clientId, 'client_nope']);

    // Tokens: one live per (org, user); revoked ones follow the active ones.
    const orgs = clients.map((c) => c.replace('client_', ''));
    for (const orgKey of orgs) await createApiToken(server, joiner, orgKey);
    await createApiToken(server, joiner, orgs[0]!, 'replaces the first');
    await createApiToken(server, joiner, orgs[1]!, 'replaces the second');
    const tokens = await checkList(
      rest('/v1/tokens', () => joiner.session),
      (t) => String(t.id),
    );
    const rows = await rest('/v1/tokens', () => joiner.session)('limit=100');
    const firstRevoked = rows.findIndex((t) => t.revoked_at !== null);
    expect(firstRevoked).toBe(orgs.length);
    expect(rows.slice(firstRevoked).every((t) => t.revoked_at !== null)).toBe(true);
    expect(tokens.length).toBe(orgs.length + 2);
    const othersToken = (await rest('/v1/tokens', () => other.session)(''))[0]!.id;
    await expectBadCursor('/v1/tokens', joiner.session, [String(othersToken), 'x']);
  });

  it('invoices: newest first, id breaking ties', async () => {
    // Invoices are the processor's records (webhooks write them); seeded here as rows with equal times.
    for (let i = 0; i < 6; i++) {
      await server.deps.db.execute(
        sql`insert into billing_invoices (id, org_key, customer_id, amount_due_cents, amount_paid_cents, status, currency, created_at_unix)
            values (${`in_t${i}`}, ${owner.orgKey}, 'cus_t', 100, 100, 'paid', 'usd', ${1_700_000_000 + Math.floor(i / 2)})`,
      );
    }
    const all = await checkList(
      rest(`/v1/clients/${owner.clientId}/invoices`, () => owner.session),
      (i) => String(i.id),
    );
    expect(all).toEqual(['in_t5', 'in_t4', 'in_t3', 'in_t2', 'in_t1', 'in_t0']);
    await expectBadCursor(`/v1/clients/${owner.clientId}/invoices`, owner.session, ['in_nope']);
  });

  it('invitations: newest first, id breaking ties, by cursor as by offset', async () => {
    const invite = async (u: TestUser, email: string) => {
      const res = await api().post<InvitationRow>(
        `/v1/clients/${u.clientId}/invitations`,
        { email, role: 'member' },
        { token: u.session },
      );
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      return res.body.id;
    };
    const created: string[] = [];
    for (let i = 0; i < 6; i++) created.push(await invite(owner, `invitee${i}@example.com`));
    // Two pairs with the same time: the id decides within each.
    await server.deps.db.execute(
      sql`update org_invitations set created_at = (select created_at from org_invitations where id = ${created[1]!})
          where id = ${created[2]!}`,
    );
    await server.deps.db.execute(
      sql`update org_invitations set created_at = (select created_at from org_invitations where id = ${created[4]!})
          where id = ${created[5]!}`,
    );
    const path = `/v1/clients/${owner.clientId}/invitations`;
    const all = await checkList(
      rest(path, () => owner.session),
      (i) => String(i.id),
    );
    const byTime = (a: string, b: string) => (a < b ? 1 : -1);
    expect(all).toEqual([
      ...[created[4]!, created[5]!].sort(byTime),
      created[3],
      ...[created[1]!, created[2]!].sort(byTime),
      created[0],
    ]);
    const foreign = await invite(other, 'someone@example.com');
    await expectBadCursor(path, owner.session, [foreign, 'inv_nope']);
  });

  it('a malformed or overlong cursor is 400, never a 500', async () => {
    await expectBadCursor(`/v1/clients/${owner.clientId}/credits/transactions`, owner.session, [
      '-1',
      '1e3',
      '0x10',
      ' 5',
    ]);
    const res = await api().get(`/v1/tokens?starting_after=${'x'.repeat(201)}`, { token: owner.session });
    expect(res.status).toBe(400);
    expect(readJson(detailError, res.body).detail.errors![0]!.path).toBe('starting_after');
  });
});
