import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { createTestDatabase } from './server.js';

// A test server in a child process (test/helpers/child-server-main.ts). For hostile-input tests where
// the old code froze the server's event loop for minutes: in-process, that would freeze the test runner
// too, and the test could neither time out nor report. Also the "second process" with its own
// environment (TRUST_PROXY). The database (PostgreSQL mode) is created and dropped here, so a child
// that had to be killed leaves nothing behind.

export interface ChildServer {
  url: string;
  v2Url: string;
  lightUrl: string;
  port: number;
  /** The owner's `svc_` token (balance: `balance` option). */
  key: string;
  orgId: string;
  userId: string;
  /** The owner's session JWT. */
  session: string;
  /** Everything the child wrote to stderr so far (its log, when TEST_LOG_LEVEL is set). */
  stderr(): string;
  close(): Promise<void>;
}

const MAIN = fileURLToPath(new URL('./child-server-main.ts', import.meta.url));

export async function startChildServer(
  options: { env?: Record<string, string>; balance?: number } = {},
): Promise<ChildServer> {
  const database = await createTestDatabase({ migrated: true });
  const child = spawn(process.execPath, ['--import', 'tsx', MAIN], {
    env: {
      ...process.env,
      SVC_CHILD_ENV: JSON.stringify(options.env ?? {}),
      SVC_CHILD_DATABASE_URL: database.url ?? '',
      SVC_CHILD_BALANCE: String(options.balance ?? 1_000_000),
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let err = '';
  child.stderr.on('data', (c: Buffer) => (err += c.toString('utf8')));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const line = await new Promise<string>((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (c: Buffer) => {
      out += c.toString('utf8');
      const nl = out.indexOf('\n');
      if (nl >= 0) resolve(out.slice(0, nl));
    });
    child.once('exit', (code) =>
      reject(new Error(`child server exited (${code}) before it started:\n${err}`)),
    );
  });
  const info = JSON.parse(line) as Omit<ChildServer, 'close' | 'stderr'>;
  return {
    ...info,
    stderr: () => err,
    async close() {
      // A frozen process cannot run its shutdown: after a grace, it is killed.
      if (child.exitCode === null) child.kill('SIGTERM');
      const killer = setTimeout(() => child.kill('SIGKILL'), 3_000);
      await exited;
      clearTimeout(killer);
      await database.drop();
    },
  };
}
