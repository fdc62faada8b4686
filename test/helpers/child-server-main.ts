import { startTestServer } from './server.js';
import { createApiToken, createUser } from './fixtures.js';
import { setOrgBalance } from './billing.js';

// The server side of test/helpers/child-server.ts: a test server in a process of its own, with an owner,
// an `svc_` token and a balance, announced as one JSON line on stdout. A test whose hostile request would
// block an event loop must not block its own: this process may freeze, the test's timers still run.

const env = JSON.parse(process.env.SVC_CHILD_ENV ?? '{}') as Record<string, string>;
const databaseUrl = process.env.SVC_CHILD_DATABASE_URL || undefined;
const balance = Number(process.env.SVC_CHILD_BALANCE ?? '1000000');

const server = await startTestServer({ env, ...(databaseUrl ? { databaseUrl } : {}) });
const owner = await createUser(server);
const { secret } = await createApiToken(server, owner, owner.orgKey);
await setOrgBalance(server, owner.orgKey, balance);
process.stdout.write(
  `${JSON.stringify({
    url: server.url,
    v2Url: server.v2Url,
    lightUrl: server.lightUrl,
    port: server.port,
    key: secret,
    orgId: owner.orgId,
    userId: owner.userId,
    session: owner.session,
  })}\n`,
);
process.on('SIGTERM', () => {
  void server.close().then(() => process.exit(0));
});
