import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { startTestServer, storageMode, type TestServer } from '../helpers/server.js';
import { createApiToken, createUser, type TestUser } from '../helpers/fixtures.js';
import { seedScale } from '../../bench/scale-seed.js';
import { openDatabase, type Database } from '../../src/db/client.js';
import { listTransactions } from '../../src/billing/payments.js';
import { listProjectsInOrg, orgProjectsPage } from '../../src/projects/queries.js';
import { usageCalls, usageSummary } from '../../src/usage/service.js';
import { listMembers } from '../../src/orgs/service.js';
import { listOwnTokens } from '../../src/tokens/service.js';
import { pruneClosedHolds } from '../../src/billing/hold-retention.js';
import { listAuditEvents } from '../../src/audit/service.js';

// Every list reads its page from an index in the list's order: on a seeded database shaped
// like the issue's (other clients' rows written after the measured client's), the plan of each list's
// real statement, captured by auto_explain as the service runs it, uses the named index, sorts nothing,
// and reads no more rows than the page needs (no other organization's rows filtered away). PostgreSQL
// only: PGlite has no auto_explain and one client's plans say nothing about a server's
// (test/foundation/list-cursors.test.ts runs every list on both).

const postgres = storageMode() === 'postgres';
const USERS = 4_000;

let server: TestServer;
let measured: TestUser;
let explained: Database;
const plans: { query: string; plan: PlanNode }[] = [];

interface PlanNode {
  'Node Type': string;
  'Parent Relationship'?: string;
  'Relation Name'?: string;
  'Index Name'?: string;
  'Actual Rows'?: number;
  'Actual Loops'?: number;
  'Rows Removed by Filter'?: number;
  Plans?: PlanNode[];
}

beforeAll(async () => {
  if (!postgres) return;
  server = await startTestServer();
  measured = await createUser(server);
  const seeder = new pg.Client({ connectionString: server.databaseUrl });
  await seeder.connect();
  try {
    await seedScale(seeder, {
      users: USERS,
      measured: { userId: measured.userId, orgKey: measured.orgKey },
      measuredProjects: 2_000,
    });
    // A large team: a thousand of the seeded users join the measured client, one a millisecond.
    await seeder.query(
      `insert into memberships (org_id, user_id, role, created_at)
       select $1, 'usr_s' || g, 'member', now() + g * interval '1 millisecond' from generate_series(1, 1000) g`,
      [measured.orgKey],
    );
    await seeder.query('analyze memberships');
  } finally {
    await seeder.end();
  }
  // A pool of its own whose sessions send every statement's plan back as a NOTICE (auto_explain).
  const url = new URL(server.databaseUrl!);
  url.searchParams.set(
    'options',
    '-c session_preload_libraries=auto_explain -c auto_explain.log_min_duration=0 ' +
      '-c auto_explain.log_level=notice -c auto_explain.log_format=json -c auto_explain.log_analyze=on',
  );
  explained = await openDatabase({ databaseUrl: url.toString(), poolSize: 1 });
  explained.pool!.on('connect', (client) =>
    client.on('notice', (n) => {
      const at = n.message?.indexOf('plan:') ?? -1;
      if (at < 0) return;
      const doc = JSON.parse(n.message!.slice(at + 5)) as { 'Query Text': string; Plan: PlanNode };
      plans.push({ query: doc['Query Text'], plan: doc.Plan });
    }),
  );
}, 600_000);
afterAll(async () => {
  await explained?.close();
  await server?.close();
});

function nodes(p: PlanNode): PlanNode[] {
  return [p, ...(p.Plans ?? []).flatMap(nodes)];
}

/** Runs `fn` and returns the plan of its statement that reads `table`. */
async function planOf(table: string, fn: () => Promise<unknown>): Promise<PlanNode> {
  plans.length = 0;
  await fn();
  const found = plans.filter((p) => nodes(p.plan).some((n) => n['Relation Name'] === table));
  expect(found.length, `a statement reading ${table}`).toBeGreaterThan(0);
  return found.at(-1)!.plan;
}

/** The page came from `index` in order: no sort, no sequential scan, no rows read beyond the page. */
function expectIndexPage(plan: PlanNode, table: string, index: string, mostRows: number) {
  const all = nodes(plan);
  const text = JSON.stringify(plan, null, 1);
  expect(
    all.filter((n) => /Sort/.test(n['Node Type'])),
    text,
  ).toEqual([]);
  expect(
    all.filter((n) => n['Node Type'] === 'Seq Scan'),
    text,
  ).toEqual([]);
  // The page's scan (not the one-row lookup of the cursor's own key, an InitPlan).
  const scan = all.find((n) => n['Relation Name'] === table && n['Parent Relationship'] !== 'InitPlan')!;
  expect(['Index Scan', 'Index Only Scan', 'Index Scan Backward'], text).toContain(scan['Node Type']);
  expect(scan['Index Name'], text).toBe(index);
  expect(scan['Rows Removed by Filter'] ?? 0, text).toBe(0);
  expect((scan['Actual Rows'] ?? 0) * (scan['Actual Loops'] ?? 1), text).toBeLessThanOrEqual(mostRows);
}

describe.skipIf(!postgres)('every list reads its page from an index in its order', () => {
  it('transactions: first page, a cursor deep in the list, an offset', async () => {
    const db = explained.db;
    const first = await planOf('billing_entries', () => listTransactions(db, measured.orgKey, 20, 0));
    expectIndexPage(first, 'billing_entries', 'billing_entries_org_shown_idx', 21);
    const deep = (await listTransactions(db, measured.orgKey, 100, 5_000)).at(-1)!.id;
    const cursor = await planOf('billing_entries', () =>
      listTransactions(db, measured.orgKey, 20, 0, String(deep)),
    );
    expectIndexPage(cursor, 'billing_entries', 'billing_entries_org_shown_idx', 21);
    const offset = await planOf('billing_entries', () => listTransactions(db, measured.orgKey, 20, 2_000));
    expectIndexPage(offset, 'billing_entries', 'billing_entries_org_shown_idx', 2_021);
  });

  it('projects: first page, a cursor deep in the list, an offset', async () => {
    const db = explained.db;
    const first = await planOf('projects', () =>
      listProjectsInOrg(db, measured.orgKey, { limit: 20, offset: 0 }),
    );
    expectIndexPage(first, 'projects', 'projects_org_idx', 21);
    const [deep] = await listProjectsInOrg(db, measured.orgKey, { limit: 1, offset: 1_000 });
    const cursor = await planOf('projects', () =>
      listProjectsInOrg(db, measured.orgKey, { limit: 20, offset: 0, startingAfter: deep!.id }),
    );
    expectIndexPage(cursor, 'projects', 'projects_org_idx', 21);
    const offset = await planOf('projects', () =>
      listProjectsInOrg(db, measured.orgKey, { limit: 20, offset: 100 }),
    );
    expectIndexPage(offset, 'projects', 'projects_org_idx', 121);
    // The common case's prepared statement (orgProjectsPage), past PostgreSQL's five custom plans.
    for (let i = 0; i < 6; i++)
      await orgProjectsPage(explained.readLane, measured.orgKey, { limit: 20, offset: 0 });
    const prepared = await planOf('projects', () =>
      orgProjectsPage(explained.readLane, measured.orgKey, { limit: 20, offset: 100 }),
    );
    expectIndexPage(prepared, 'projects', 'projects_org_idx', 121);
  });

  it('the usage call log: first page and a cursor deep in the list', async () => {
    const db = explained.db;
    const now = Math.ceil(Date.now() / 1000);
    const period = { orgKey: measured.orgKey, from: now - 30 * 86_400, to: now + 1 };
    const first = await planOf('usage_records', () => usageCalls(db, period, { limit: 20, offset: 0 }));
    expectIndexPage(first, 'usage_records', 'usage_records_org_id_idx', 21);
    const [deep] = await usageCalls(db, period, { limit: 1, offset: 5_000 });
    const cursor = await planOf('usage_records', () =>
      usageCalls(db, period, { limit: 20, offset: 0, startingAfter: deep!.id }),
    );
    expectIndexPage(cursor, 'usage_records', 'usage_records_org_id_idx', 21);
  });

  it('the audit log: first page, a cursor deep in the chain, an action filter after it', async () => {
    // The measured client's chain of 2 × USERS seeded events among 10 of each other client's
    // (bench/scale-seed.ts), read along (chain, seq) and (chain, action, seq).
    const db = explained.db;
    const page = { limit: 20, offset: 0 };
    const first = await planOf('audit_events', () => listAuditEvents(db, measured.orgKey, {}, page));
    expectIndexPage(first, 'audit_events', 'audit_events_chain_seq_idx', 21);
    const [deep] = (await listAuditEvents(db, measured.orgKey, {}, { limit: 1, offset: 5_000 })).data;
    const cursor = await planOf('audit_events', () =>
      listAuditEvents(db, measured.orgKey, {}, { ...page, startingAfter: deep!.id }),
    );
    expectIndexPage(cursor, 'audit_events', 'audit_events_chain_seq_idx', 21);
    const filtered = await planOf('audit_events', () =>
      listAuditEvents(db, measured.orgKey, { action: 'limits.set' }, { ...page, startingAfter: deep!.id }),
    );
    expectIndexPage(filtered, 'audit_events', 'audit_events_chain_action_idx', 21);
  });

  it('members and tokens', async () => {
    const db = explained.db;
    const members = await planOf('memberships', () =>
      listMembers(db, measured.orgKey, { limit: 10, offset: 0 }),
    );
    expectIndexPage(members, 'memberships', 'memberships_org_time_idx', 11);
    const [deep] = await listMembers(db, measured.orgKey, { limit: 1, offset: 300 });
    const after = await planOf('memberships', () =>
      listMembers(db, measured.orgKey, { limit: 10, offset: 0, startingAfter: deep!.userId }),
    );
    expectIndexPage(after, 'memberships', 'memberships_org_time_idx', 11);
    const tokens = await planOf('api_tokens', () => listOwnTokens(db, 'usr_s17', { limit: 20, offset: 0 }));
    expectIndexPage(tokens, 'api_tokens', 'api_tokens_user_idx', 21);
  });

  it('usage totals of 30 days read the rollup by its key and at most an edge of the records', async () => {
    const db = explained.db;
    const now = Math.ceil(Date.now() / 1000);
    const period = { orgKey: measured.orgKey, from: now - 30 * 86_400, to: now };
    const all = await usageSummary(db, period, 'day');
    expect(all.totals.calls).toBeGreaterThanOrEqual(2 * USERS);
    for (const groupBy of ['day', 'member', 'credential', 'model'] as const) {
      const plan = await planOf('usage_rollup', () => usageSummary(db, period, groupBy));
      const text = JSON.stringify(plan, null, 1);
      const scans = nodes(plan).filter((n) => n['Relation Name']);
      expect(
        scans.filter((n) => n['Node Type'] === 'Seq Scan'),
        text,
      ).toEqual([]);
      const rollup = scans.find((n) => n['Relation Name'] === 'usage_rollup')!;
      expect(rollup['Index Name'], text).toBe('usage_rollup_pkey');
      // The seeded calls lie ~10 days back: about 35 an hour, so an edge (at most half an hour) reads few.
      const raw = scans.filter((n) => n['Relation Name'] === 'usage_records');
      for (const r of raw) {
        expect(r['Index Name'], text).toBe('usage_records_org_time_idx');
        expect((r['Actual Rows'] ?? 0) * (r['Actual Loops'] ?? 1), text).toBeLessThanOrEqual(200);
      }
    }
  });

  it('retention finds closed holds past the retention through billing_holds_closed_idx, not a scan of every hold', async () => {
    // Each reconcile run's retention read all 8M settled holds to find none old enough.
    const plan = await planOf('billing_holds', () => pruneClosedHolds(explained.db));
    const text = JSON.stringify(plan, null, 1);
    const scans = nodes(plan).filter((n) => n['Relation Name'] === 'billing_holds');
    expect(
      scans.filter((n) => n['Node Type'] === 'Seq Scan'),
      text,
    ).toEqual([]);
    expect(
      scans.map((n) => n['Index Name']),
      text,
    ).toContain('billing_holds_closed_idx');
  });

  it('verify: the read lane plans its statement once (a generic plan), not at every request', async () => {
    // Re-planned at every run (PostgreSQL kept custom plans: its generic estimate
    // assumes ten hashes), the planning cost ~9× the statement on an analyzed database of this shape.
    const { secret } = await createApiToken(server, measured, measured.orgKey, 'lane');
    for (let i = 0; i < 12; i++) {
      const res = await fetch(`${server.url}/v1/auth/verify`, {
        headers: { authorization: `Bearer ${secret}` },
      });
      expect(res.status).toBe(200);
      await res.arrayBuffer();
    }
    const [row] = await server.database.readLane.rows(
      'test_lane_plans',
      `select generic_plans, custom_plans from pg_prepared_statements where name = 'auth_api_tokens'`,
      [],
    );
    const [generic, custom] = (row ?? []).map(Number);
    expect({ generic, custom }).toEqual({ generic: 12, custom: 0 });
  });
});
