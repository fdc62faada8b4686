import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, storageMode, type TestServer } from '../helpers/server.js';
import { createApiToken, createUser, type TestUser } from '../helpers/fixtures.js';
import { setOrgBalance } from '../helpers/billing.js';
import { startFakeUpstream, type FakeUpstream } from '../helpers/fake-upstream.js';
import { startChildSvc } from '../helpers/child-svc.js';
import { callChat, orgLedger } from '../helpers/chat-load.js';
import { eventually } from '../helpers/eventually.js';

// SIGTERM lets a stream in flight finish within SHUTDOWN_GRACE_SECONDS (billed once,
// for what it delivered), takes no new request, and the process exits 0.
// PostgreSQL only: the svc child and this process share the database.

describe.runIf(storageMode() === 'postgres')('SIGTERM with a stream in flight', { timeout: 90_000 }, () => {
  let server: TestServer;
  let fake: FakeUpstream;
  let owner: TestUser;
  let key: string;
  beforeAll(async () => {
    fake = await startFakeUpstream();
    server = await startTestServer({ env: fake.env() });
    owner = await createUser(server);
    key = (await createApiToken(server, owner, owner.orgKey)).secret;
    await setOrgBalance(server, owner.orgKey, 1_000_000);
  });
  afterAll(async () => {
    await server?.close();
    await fake?.close();
  });

  it('the stream finishes whole and is billed once; new requests are refused; exit 0 after it', async () => {
    const svc = await startChildSvc(
      fake.env({ DATABASE_URL: server.databaseUrl!, SHUTDOWN_GRACE_SECONDS: '20' }),
    );
    const before = await orgLedger(server, owner.orgKey);
    fake.chunkDelayMs = 400; // 5 words: a 2 s stream
    const words = fake.contentChunksSent;
    const stream = callChat(svc.url, key, { stream: true });
    await eventually(() => fake.contentChunksSent > words, 10_000, 'the stream under way');
    const stopping = Date.now();
    svc.proc.kill('SIGTERM');
    // Draining: /readyz (like every request) is refused with 503, or the listener is already closed.
    await eventually(
      async () => {
        const ready = await fetch(`${svc.url}/readyz`).catch(() => null);
        return ready === null || ready.status === 503;
      },
      10_000,
      'the process draining',
    );
    const late = await callChat(svc.url, key);
    expect(late.status === 0 || late.status === 503).toBe(true); // refused or closed: never served
    const done = await stream;
    expect([done.status, done.answered]).toEqual([200, true]);
    expect(await svc.exited).toBe(0);
    const shutdownMs = Date.now() - stopping;
    console.log(`shutdown: exit ${shutdownMs} ms after SIGTERM with a 2 s stream in flight`);
    fake.reset();
    const after = await orgLedger(server, owner.orgKey);
    expect(after.debited - before.debited).toBe(20);
    expect(after.usageRows - before.usageRows).toBe(1);
  });
});
