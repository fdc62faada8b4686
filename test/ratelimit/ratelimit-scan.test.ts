import { afterAll, beforeAll, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { createApiToken, createUser } from '../helpers/fixtures.js';
import { client } from '../helpers/http.js';
import { queryRows } from '../../src/db/client.js';
import { limitedRowsQuery } from '../../src/ratelimit/model-limits.js';

// The scan every process runs every 5 s for the RPM and TPM limits (src/ratelimit/model-limits.ts) reads
// only the rows that have a limit: the partial indexes api_tokens_limited and orgs_limited
// (src/db/custom/rate-windows.sql) hold exactly those, so with 20,000 credentials and 2,000 organizations
// without a limit the plan reads through the indexes, never the tables whole, and touches a handful of
// pages. EXPLAIN (ANALYZE, BUFFERS) on the database the test runs on (PGlite, or PostgreSQL).

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(async () => {
  await server?.close();
});

interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Index Name'?: string;
  'Shared Hit Blocks'?: number;
  'Shared Read Blocks'?: number;
  Plans?: PlanNode[];
}
const nodes = (n: PlanNode): PlanNode[] => [n, ...(n.Plans ?? []).flatMap(nodes)];

it('reads only the rows with a limit, through the partial indexes', { timeout: 120_000 }, async () => {
  const owner = await createUser(server);
  const limited = await createApiToken(server, owner, owner.orgKey);
  const api = client(server.url);
  await api.put(`/v1/clients/${owner.clientId}/limits`, { rpm: 5, tpm: null }, { token: owner.session });
  await api.put(
    `/v1/clients/${owner.clientId}/tokens/${limited.id}/limits`,
    { rpm: null, tpm: 9_000 },
    { token: owner.session },
  );
  const db = server.deps.db;
  // Credentials and organizations without a limit: revoked ones of the owner, other organizations.
  await queryRows(
    db,
    sql`insert into api_tokens (user_id, org_id, token_name, token_hash, token_prefix, revoked_at)
        select ${owner.userId}, ${owner.orgKey}, 'old', 'h' || g, 'svc_x', now()
        from generate_series(1, 20000) g`,
  );
  await queryRows(
    db,
    sql`insert into orgs (id, name, owner_id) select 'scan' || g, 'other', ${owner.userId} from generate_series(1, 2000) g`,
  );
  await queryRows(db, sql`analyze api_tokens`);
  await queryRows(db, sql`analyze orgs`);

  const rows = await queryRows<{ kind: string; id: string }>(db, limitedRowsQuery());
  expect(rows.map((r) => `${r.kind}:${r.id}`).sort()).toEqual([`o:${owner.orgKey}`, `t:${limited.id}`]);

  const [explained] = await queryRows<{ 'QUERY PLAN': [{ Plan: PlanNode }] | string }>(
    db,
    sql`explain (analyze, buffers, format json) ${limitedRowsQuery()}`,
  );
  const raw = explained!['QUERY PLAN'];
  const plan = (typeof raw === 'string' ? (JSON.parse(raw) as [{ Plan: PlanNode }]) : raw)[0].Plan;
  const all = nodes(plan);
  const scanOf = (table: string) =>
    all.filter((n) => n['Relation Name'] === table || n['Index Name']?.startsWith(table));
  for (const [table, index] of [
    ['api_tokens', 'api_tokens_limited'],
    ['orgs', 'orgs_limited'],
  ] as const) {
    const scans = scanOf(table);
    expect(
      scans.some((n) => n['Node Type'] === 'Seq Scan'),
      `${table} read whole`,
    ).toBe(false);
    expect(
      scans.some((n) => n['Index Name'] === index),
      `${table} through ${index}`,
    ).toBe(true);
  }
  // A handful of pages, against hundreds for the tables whole.
  const pages = (plan['Shared Hit Blocks'] ?? 0) + (plan['Shared Read Blocks'] ?? 0);
  expect(pages).toBeLessThan(20);
});
