import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { existsSync, mkdtempSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'drizzle-orm';
import { startTestServer, storageMode, type TestServer } from '../helpers/server.js';
import { createApiToken, createUser, type TestUser } from '../helpers/fixtures.js';
import { setOrgBalance } from '../helpers/billing.js';
import { startFakeUpstream, type FakeUpstream } from '../helpers/fake-upstream.js';
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js';
import { startChildSvc } from '../helpers/child-svc.js';
import { waitUntil } from '../helpers/chat-load.js';
import { queryRows } from '../../src/db/client.js';
import { checkInvariants } from '../../src/billing/invariants.js';

// A settle deferred by a database cut still charges the usage beyond its hold (CONTRACT §9
// "Excess beyond a hold", on the deferred settle's path). svc runs as its own process behind a TCP proxy to
// PostgreSQL; the provider reports a prompt far beyond the call's hold; the database path is cut while the
// provider works, so the call's settle is kept and retried (and, in the second test, spooled at shutdown
// and replayed by the next start). Before: the kept settle debited the hold only, the excess was lost.
// The ledger decides: Σ debits == the real cost, one `usage` row and one excess row, no hold left.
//
// PostgreSQL only: the fault is a network path to a database server, which the embedded PGlite has not.

// The fake's reply: 5 words; its prompt reported at 5,000 tokens. TEST_PRICES: cost = prompt + 2 × output.
const COST = 5_000 + 2 * 5;

describe.runIf(storageMode() === 'postgres')(
  'a deferred settle charges the excess beyond its hold',
  { timeout: 90_000 },
  () => {
    let server: TestServer;
    let fake: FakeUpstream;
    let proxy: TcpProxy;

    beforeAll(async () => {
      fake = await startFakeUpstream();
      server = await startTestServer({ env: fake.env() });
      proxy = await startTcpProxy({ host: '127.0.0.1', port: Number(new URL(server.databaseUrl!).port) });
    });
    afterAll(async () => {
      await proxy?.close();
      await server?.close();
      await fake?.close();
    });

    async function freshOwner(): Promise<{ owner: TestUser; key: string }> {
      const owner = await createUser(server);
      const key = (await createApiToken(server, owner, owner.orgKey)).secret;
      await setOrgBalance(server, owner.orgKey, 20_000);
      return { owner, key };
    }

    /** Every usage row of the org (hold and excess alike, whichever account paid), its open holds, its debt. */
    async function ledger(owner: TestUser) {
      const rows = await queryRows<{ key: string; amount: unknown }>(
        server.deps.db,
        sql`select key, amount from billing_entries where org_key = ${owner.orgKey} and type = 'usage'`,
      );
      const [holds] = await queryRows<{ n: unknown }>(
        server.deps.db,
        sql`select count(*)::int as n from billing_holds where org_key = ${owner.orgKey} and status = 'held'
              and user_id is not null`,
      );
      return {
        debited: rows.reduce((s, r) => s + Number(r.amount), 0),
        keys: rows.map((r) => r.key).sort(),
        openHolds: Number(holds!.n),
      };
    }

    const env = (extra: Record<string, string> = {}) =>
      fake.env({
        DATABASE_URL: proxy.urlFor(server.databaseUrl!),
        DATABASE_QUERY_TIMEOUT_MS: '1500',
        PROCESS_DEAD_AFTER_MS: '30000',
        ...extra,
      });

    /** One JSON call whose provider answers after 1.5 s with a prompt beyond its hold; the path is cut meanwhile. */
    async function callAcrossACut(url: string, key: string) {
      fake.headersDelayMs = 1_500;
      fake.reply = () => ({ content: 'one two three four five', promptTokens: 5_000 });
      const call = fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        // max_tokens 10: the hold is about 2 + 2 × 10 tokens, far below the 5,010 the provider will report.
        body: JSON.stringify({ model: 'any', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] }),
        signal: AbortSignal.timeout(30_000),
      }).then(async (res) => ({
        status: res.status,
        answered: (await res.text()).includes('"choices"'),
        requestId: res.headers.get('x-svc-request-id'),
      }));
      await waitUntil(() => fake.inFlight > 0, 10_000); // held and at the provider
      proxy.cut();
      const result = await call;
      fake.reset();
      return result;
    }

    it('a settle kept and retried after a database cut charges the excess once', async () => {
      const { owner, key } = await freshOwner();
      const svc = await startChildSvc(env());
      let requestId: string | null | undefined;
      try {
        const result = await callAcrossACut(svc.url, key);
        requestId = result.requestId;
        expect([result.status, result.answered]).toEqual([200, true]);
        expect((await ledger(owner)).debited).toBe(0); // nothing could be written yet
        // The settle tried while the database is cut, failed and kept for a retry; then the path is back.
        await waitUntil(() => svc.output().includes('settle not written; kept and retried'), 20_000);
        proxy.heal();
        await waitUntil(async () => (await ledger(owner)).debited === COST, 20_000);
      } finally {
        proxy.heal();
        svc.proc.kill('SIGTERM');
        await svc.exited;
      }
      // The process has ended: no late retry can come after this, and none came before (nothing more charged).
      expect(await ledger(owner)).toEqual({
        debited: COST,
        keys: [`usage:${requestId}`, `usage:${requestId}:excess`],
        openHolds: 0,
      });
      expect(await checkInvariants(server.deps.db)).toEqual([]);
    });

    it('a settle spooled at shutdown and replayed by the next start charges the excess once', async () => {
      const { owner, key } = await freshOwner();
      const dir = mkdtempSync(join(tmpdir(), 'svc-spool-excess-'));
      const spoolEnv = env({ SETTLE_SPOOL_FILE: join(dir, 'settle-spool.jsonl') });
      const first = await startChildSvc(spoolEnv);
      const result = await callAcrossACut(first.url, key);
      expect([result.status, result.answered]).toEqual([200, true]);
      first.proc.kill('SIGTERM');
      expect(await first.exited).toBe(0);
      expect(readdirSync(dir).length).toBe(1); // the spool
      expect((await ledger(owner)).debited).toBe(0);

      proxy.heal();
      const second = await startChildSvc(spoolEnv);
      try {
        await waitUntil(async () => (await ledger(owner)).debited === COST, 20_000);
        await waitUntil(() => readdirSync(dir).length === 0, 10_000); // replayed, then removed
      } finally {
        second.proc.kill('SIGTERM');
        await second.exited;
      }
      // The process has ended: no late replay can come after this, and none came before.
      expect(await ledger(owner)).toEqual({
        debited: COST,
        keys: [`usage:${result.requestId}`, `usage:${result.requestId}:excess`],
        openHolds: 0,
      });
      expect(existsSync(join(dir, 'settle-spool.jsonl'))).toBe(false);
      expect(await checkInvariants(server.deps.db)).toEqual([]);
    });
  },
);
