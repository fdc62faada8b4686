import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase } from '../../src/db/client.js';
import { serverSecrets } from '../../src/db/schema.js';
import { createTestDatabase } from '../helpers/server.js';
import { freePort } from '../helpers/child-svc.js';
import { nodeEntry } from '../helpers/entry.js';

// NODE_ENV=production refuses unsafe settings, naming each variable, and the banner tells the truth
// (CONTRACT §1); generated server keys are sealed under KEY_ENCRYPTION_KEY (item 17).
// Each case starts the real entry point (src/main.ts) as a child process with an environment of its
// own, on the test's storage mode: its own PostgreSQL database, or a PGlite data directory.

/** src/main.ts, compiled when the build is current (helpers/entry.ts). */
const MAIN = nodeEntry('src/main.ts');
const KEK = 'k'.repeat(16) + 'production-test-kek-0123456789';

let storage: { env: Record<string, string>; drop(): Promise<void>; databaseUrl?: string; dataDir?: string };
beforeAll(async () => {
  const database = await createTestDatabase();
  if (database.url)
    storage = { env: { DATABASE_URL: database.url }, drop: () => database.drop(), databaseUrl: database.url };
  else {
    const dataDir = await mkdtemp(join(tmpdir(), 'svc-prod-'));
    storage = {
      env: { DATA_DIR: dataDir },
      drop: () => rm(dataDir, { recursive: true, force: true }),
      dataDir,
    };
  }
});
afterAll(async () => {
  await storage?.drop();
});

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

const PRODUCTION = {
  NODE_ENV: 'production',
  SMTP_URL: 'smtp://127.0.0.1:2525',
  KEY_ENCRYPTION_KEY: KEK,
  BASE_URL: 'https://api.svc.test',
  V2_URL: 'https://v2.svc.test',
  LIGHT_URL: 'https://light.svc.test',
};

/**
 * Starts src/main.ts with exactly `env` (plus PATH, storage and a free port). When it starts, `whileUp`
 * runs against it and it is stopped with SIGTERM; a refusal ends the process on its own. A port taken
 * between asking for it and the child's listen (another file's connection) is asked for again.
 */
async function start(env: Record<string, string>, whileUp?: (url: string) => Promise<void>): Promise<Run> {
  for (let attempt = 1; ; attempt++) {
    const run = await startOnce(await freePort(), env, whileUp);
    if (!run.stderr.includes('EADDRINUSE') || attempt === 3) return run;
  }
}

function startOnce(
  port: number,
  env: Record<string, string>,
  whileUp?: (url: string) => Promise<void>,
): Promise<Run> {
  const child = spawn(process.execPath, MAIN, {
    env: { PATH: process.env.PATH ?? '', LOG_LEVEL: 'warn', PORT: String(port), ...storage.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  let checked: Promise<void> | undefined;
  child.stderr.on('data', (c: Buffer) => (stderr += c.toString('utf8')));
  child.stdout.on('data', (c: Buffer) => {
    stdout += c.toString('utf8');
    if (!checked && stdout.includes('svc is running')) {
      checked = (whileUp ?? (async () => {}))(`http://127.0.0.1:${port}`).finally(() =>
        child.kill('SIGTERM'),
      );
    }
  });
  return new Promise((resolve, reject) => {
    child.once('exit', (code) => {
      if (!checked) return resolve({ code, stdout, stderr });
      checked.then(() => resolve({ code, stdout, stderr }), reject);
    });
  });
}

// Each case compiles and starts the whole service in a child process: slow on a loaded machine.
const SLOW = { timeout: 240_000 };

describe('NODE_ENV=production refuses unsafe settings, naming the variable', SLOW, () => {
  it('no SMTP_URL and no KEY_ENCRYPTION_KEY', async () => {
    const run = await start({ NODE_ENV: 'production' });
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(/SMTP_URL: required in production/);
    expect(run.stderr).toMatch(/KEY_ENCRYPTION_KEY: required in production/);
    // The defaults (http://localhost:PORT) are loopback and allowed.
    expect(run.stderr).not.toMatch(/BASE_URL/);
    expect(run.stdout).not.toContain('svc is running');
  });

  it.each([
    ['DEV_MODE', { DEV_MODE: '1' }, /DEV_MODE: must be off in production/],
    ['an http:// origin', { V2_URL: 'http://v2.svc.test' }, /V2_URL: must be https:\/\/ in production/],
    [
      'a short KEY_ENCRYPTION_KEY',
      { KEY_ENCRYPTION_KEY: 'short' },
      /KEY_ENCRYPTION_KEY: must be at least 32/,
    ],
  ])('%s', async (_label, override, message) => {
    const run = await start({ ...PRODUCTION, ...override });
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(message);
    expect(run.stdout).not.toContain('svc is running');
  });
});

describe('a safe production start', SLOW, () => {
  it('starts, says so truthfully, serves no /dev/*, and seals the generated keys under the KEK', async () => {
    let devMail = 0;
    let health = 0;
    const run = await start(PRODUCTION, async (url) => {
      health = (await fetch(`${url}/healthz`)).status;
      devMail = (await fetch(`${url}/dev/mail?to=a@example.test`)).status;
    });
    expect(health).toBe(200);
    expect(devMail).toBe(404);
    expect(run.stdout).toContain('mode: production');
    expect(run.stdout).toContain('mail: SMTP');
    expect(run.stdout).toContain('server keys: sealed under KEY_ENCRYPTION_KEY');
    expect(run.stdout).toContain('dev mode: off');
    expect(run.stdout).not.toContain('/dev/mail');

    const database = await openDatabase({ databaseUrl: storage.databaseUrl, dataDir: storage.dataDir ?? '' });
    try {
      const rows = await database.db.select().from(serverSecrets);
      expect(rows.map((r) => r.name).sort()).toEqual(['secret_encryption', 'secret_hmac', 'session_hs256']);
      for (const row of rows) expect(row.value).toMatch(/^kek1:/);
    } finally {
      await database.close();
    }
  });

  it('refuses to start on those keys with another KEY_ENCRYPTION_KEY, or with none', async () => {
    const wrong = await start({ ...PRODUCTION, KEY_ENCRYPTION_KEY: `${KEK}-other` });
    expect(wrong.code).toBe(2);
    expect(wrong.stderr).toMatch(/does not open with this KEY_ENCRYPTION_KEY/);
    const none = await start({});
    expect(none.code).toBe(2);
    expect(none.stderr).toMatch(/sealed under a key-encryption key: set KEY_ENCRYPTION_KEY/);
  });

  it('in development the banner shows the dev outbox and that the keys are unsealed', async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'svc-dev-'));
    try {
      const run = await start({ DATA_DIR: dataDir, DATABASE_URL: '' });
      expect(run.stdout, `exit ${run.code}, stderr: ${run.stderr}`).toContain('mode: development');
      expect(run.stdout).toContain('/dev/mail?to=<email>');
      expect(run.stdout).toContain('server keys: stored unsealed in the database (set KEY_ENCRYPTION_KEY)');
    } finally {
      await rm(dataDir, { recursive: true, force: true });
    }
  });
});
