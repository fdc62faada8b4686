import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { existsSync } from 'node:fs';
import { createServer } from 'node:net';
import { loadConfig } from '../../src/config.js';
import { openDatabase } from '../../src/db/client.js';
import { runMigrations } from '../../src/db/migrate.js';
import { createDeps } from '../../src/create-deps.js';
import { createLogger } from '../../src/log.js';
import { startServer } from '../../src/server.js';
import { markEmailVerified, registerAccount } from '../../src/accounts/service.js';
import { issueSession } from '../../src/auth/session.js';
import { driveConsent } from '../../test/helpers/oauth.js';

// Runs the MCP conformance tool's authorization-server scenarios (@modelcontextprotocol/conformance
// 0.2.x, `authorization --url <issuer>`, on Node 22 from .ci/node22) against a server this script
// starts (the real app on a fresh embedded database). The tool prints an authorization URL for a person
// to open; here a signed-in "person" approves it on the consent page and follows the redirect to the
// tool's callback. Exit code: the tool's (non-zero when a scenario fails). Used by
// .ci/extra.d/oauth-conformance.sh.

const NODE22 = process.env.NODE22 ?? '.ci/node22/bin/node';
const TOOL =
  process.env.CONFORMANCE_BIN ??
  '.ci/node22/conformance/node_modules/@modelcontextprotocol/conformance/dist/index.js';

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

for (const [what, path] of [
  ['Node 22', NODE22],
  ['conformance tool', TOOL],
] as const) {
  if (!existsSync(path)) {
    console.error(`conformance: ${what} not found at ${path} (.ci/prepare and the .sh script install them)`);
    process.exit(2);
  }
}

const port = await freePort();
const issuer = `http://127.0.0.1:${port}`;
const config = loadConfig({
  PORT: String(port),
  BASE_URL: issuer,
  V2_URL: issuer,
  LIGHT_URL: issuer,
  DATA_DIR: 'memory://',
  LOG_LEVEL: 'silent',
});
const database = await openDatabase({ dataDir: 'memory://' });
await runMigrations(database);
const deps = await createDeps(config, database, createLogger(config.logLevel));
const running = await startServer(deps, ['127.0.0.1'], port);

const { user } = await registerAccount(
  deps.db,
  { email: 'conformance@example.test', name: 'Conformance', password: 'correct-Horse-9' },
  deps.hooks.accountCreated,
);
await markEmailVerified(deps.db, user.id);
const { token: session } = await issueSession(deps.db, deps.keys.session, user.id);

const callbackPort = await freePort();
const args = [
  TOOL,
  'authorization',
  '--url',
  issuer,
  '--client-id',
  'svc-cli',
  '--resource',
  `${issuer}/mcp/platform`,
  '--port',
  String(callbackPort),
];
console.log(`conformance: ${NODE22} ${args.join(' ')}`);
const child = spawn(NODE22, args, { stdio: ['ignore', 'pipe', 'inherit'] });
const consented: Promise<void>[] = [];

createInterface({ input: child.stdout }).on('line', (line) => {
  console.log(line);
  const url = line.trim();
  if (url.startsWith(`${issuer}/oauth/authorize?`)) {
    consented.push(
      (async () => {
        const result = await driveConsent(url, session);
        if (!result.location)
          throw new Error(
            `consent did not redirect (page status ${result.pageStatus}, post ${result.postStatus})`,
          );
        // The browser follows the redirect to the tool's loopback callback.
        await (await fetch(result.location)).text();
      })().catch((err: unknown) => console.error('conformance: consent failed:', err)),
    );
  }
});

const code = await new Promise<number>((resolve) => child.on('exit', (c) => resolve(c ?? 1)));
await Promise.all(consented);
await running.close();
await deps.close();
await database.close();
console.log(`conformance: tool exited with ${code}`);
process.exit(code);
