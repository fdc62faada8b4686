import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { Redis } from 'ioredis';
import { startTestServer, storageMode, type TestServer } from '../helpers/server.js';
import { createApiToken, createUser, type TestUser } from '../helpers/fixtures.js';
import { setOrgBalance } from '../helpers/billing.js';
import { startFakeUpstream, type FakeUpstream } from '../helpers/fake-upstream.js';
import { freePort, startChildSvc, type ChildSvc } from '../helpers/child-svc.js';
import { callChat, orgLedger, waitUntil } from '../helpers/chat-load.js';
import { checkInvariants } from '../../src/billing/invariants.js';

// On the Redis lease store (REDIS_URL): two svc processes share a real redis-server
// and one PostgreSQL; one is killed (-9) while it holds every slot of an organization. Its Redis leases
// must come back within seconds of its death (its heartbeat key in Redis expires, and the survivor's next
// acquire drops its leases: src/models/slot/concurrency-redis.ts), not after the 30 s lease TTL as before.
//
// PostgreSQL only (two processes cannot share an embedded PGlite); skipped without redis-server.

const hasRedis = (() => {
  try {
    execFileSync('redis-server', ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
})();

describe.runIf(storageMode() === 'postgres' && hasRedis)(
  'a peer process dies holding Redis leases',
  { timeout: 90_000 },
  () => {
    let server: TestServer;
    let fake: FakeUpstream;
    let owner: TestUser;
    let key: string;
    let redisServer: ChildProcess;
    let redis: Redis;
    let doomed: ChildSvc;
    let survivor: ChildSvc;
    const CAP = 4;

    beforeAll(async () => {
      const port = await freePort();
      redisServer = spawn('redis-server', ['--port', String(port), '--save', '', '--appendonly', 'no'], {
        stdio: 'ignore',
      });
      const redisUrl = `redis://127.0.0.1:${port}`;
      redis = new Redis(redisUrl, { lazyConnect: true, maxRetriesPerRequest: 1 });
      redis.on('error', () => {});
      await waitUntil(async () => (await redis.ping().catch(() => null)) === 'PONG', 10_000);
      fake = await startFakeUpstream();
      server = await startTestServer({ env: fake.env() });
      owner = await createUser(server);
      key = (await createApiToken(server, owner, owner.orgKey)).secret;
      await setOrgBalance(server, owner.orgKey, 10_000_000);
      const env = fake.env({
        DATABASE_URL: server.databaseUrl!,
        REDIS_URL: redisUrl,
        ORG_MAX_CONCURRENCY: String(CAP),
      });
      [doomed, survivor] = await Promise.all([startChildSvc(env), startChildSvc(env)]);
    });
    afterAll(async () => {
      await doomed?.kill();
      await survivor?.kill();
      await server?.close();
      await fake?.close();
      redis?.disconnect();
      redisServer?.kill('SIGKILL');
    });

    const redisLeases = () => redis.zcard(`svc:concurrency:${owner.orgKey}`);

    it('kill -9 of a process holding every slot: the survivor has the whole cap back within seconds', async () => {
      const before = await orgLedger(server, owner.orgKey);
      fake.headersDelayMs = 60_000; // the doomed process's calls hang at the provider
      const hanging = Array.from({ length: CAP }, () => callChat(doomed.url, key));
      await waitUntil(async () => (await redisLeases()) === CAP, 10_000);
      await waitUntil(() => fake.inFlight >= CAP, 10_000);
      fake.headersDelayMs = 0;
      expect((await callChat(survivor.url, key)).code).toBe('concurrency_limit');

      await doomed.kill();
      const killedAt = Date.now();
      await Promise.all(hanging); // their connections died with the process
      let capacityBackMs = 0;
      await waitUntil(async () => {
        const calls = await Promise.all(Array.from({ length: CAP }, () => callChat(survivor.url, key)));
        capacityBackMs = Date.now() - killedAt;
        return calls.every((c) => c.status === 200);
      }, 20_000);
      console.log(`redis: full capacity back ${capacityBackMs} ms after kill -9 (lease TTL 30 s)`);
      // Well inside the 30 s lease TTL that was the only way back before.
      expect(capacityBackMs).toBeLessThan(15_000);
      await waitUntil(async () => (await redisLeases()) === 0, 5_000);
      // The dead process's heartbeat key is gone; the survivor's stays.
      await waitUntil(async () => (await redis.keys('svc:process:*')).length === 1, 10_000);

      await waitUntil(async () => (await orgLedger(server, owner.orgKey)).openHolds === 0, 10_000);
      const after = await orgLedger(server, owner.orgKey);
      const answered = after.usageRows - before.usageRows;
      expect(after.debited - before.debited).toBe(20 * answered);
      expect(await checkInvariants(server.deps.db)).toEqual([]);
      expect(survivor.alive()).toBe(true);
    });
  },
);
