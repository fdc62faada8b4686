import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { startTestServer, type TestServer } from './helpers/server.js';
import { client } from './helpers/http.js';
import { createUser, type TestUser } from './helpers/fixtures.js';
import { sessionCookie } from './helpers/oauth.js';

// Server faults in the surface's own words (CONTRACT §3; interface document: Authentication 6). The
// database really fails under the running server (a table renamed away, as in
// test/orgs-membership-guard.test.ts); nothing of ours is mocked.

let server: TestServer;
let api: ReturnType<typeof client>;
let user: TestUser;
beforeAll(async () => {
  server = await startTestServer();
  api = client(server.url);
  user = await createUser(server);
});
afterAll(async () => {
  await server?.close();
});

/** Runs `body` while `table` cannot be read, then puts it back. */
async function withoutTable(table: string, body: () => Promise<void>) {
  await server.deps.db.execute(sql.raw(`alter table ${table} rename to ${table}_unavailable`));
  try {
    await body();
  } finally {
    await server.deps.db.execute(sql.raw(`alter table ${table}_unavailable rename to ${table}`));
  }
}

describe('device user-code lookup while the database cannot answer', () => {
  it('answers 503 fail-closed (API and page), counts no wrong code, and works again afterwards', async () => {
    const { user_code } = (await api.post('/v1/auth/device/code')).body;
    await withoutTable('device_codes', async () => {
      for (const path of ['/v1/auth/device/authorize', '/v1/auth/device/deny']) {
        const res = await api.post(path, { user_code }, { token: user.session });
        expect(res.status, path).toBe(503);
        expect(res.body.detail.code, path).toBe('DEVICE_CODES_UNAVAILABLE');
        expect(res.headers.get('retry-after'), path).toBe('5');
      }
      const page = await fetch(`${server.url}/account/device?user_code=${encodeURIComponent(user_code)}`, {
        headers: { cookie: sessionCookie(user.session) },
        redirect: 'manual',
      });
      expect(page.status).toBe(503);
      expect(page.headers.get('content-type')).toContain('text/html');
      expect(await page.text()).not.toContain('not valid or has expired');
    });
    const approved = await api.post('/v1/auth/device/authorize', { user_code }, { token: user.session });
    expect(approved.status).toBe(200);
    expect(approved.body).toMatchObject({ status: 'approved', client_id: user.orgId });
  });
});

describe('a database failure inside the OAuth token endpoint', () => {
  const exchange = (base: string) =>
    fetch(`${base}/oauth/token`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({
        grant_type: 'authorization_code',
        client_id: 'svc-cli',
        code: 'a'.repeat(43),
        redirect_uri: 'http://127.0.0.1:9/callback',
        code_verifier: 'v'.repeat(43),
      }).toString(),
    });

  /** RFC 6749 shape with the registered code; no internals (the request id only). */
  async function expectServerError(res: Response) {
    expect(res.status).toBe(500);
    const body = (await res.json()) as Record<string, unknown>;
    expect(Object.keys(body).sort()).toEqual(['error', 'error_description']);
    expect(body.error).toBe('server_error');
    expect(String(body.error_description)).toMatch(/^internal error \(request [\w-]+\)$/);
  }

  it('answers 500 {error: "server_error"} when a model query fails (table gone), then invalid_grant again', async () => {
    await withoutTable('oauth_codes', async () => {
      await expectServerError(await exchange(server.url));
    });
    const after = await exchange(server.url);
    expect(after.status).toBe(400);
    expect(((await after.json()) as { error: string }).error).toBe('invalid_grant');
  });

  it('answers 500 {error: "server_error"} when the pool has ended under the running server', async () => {
    const other = await startTestServer();
    try {
      await other.database.close();
      await expectServerError(await exchange(other.url));
    } finally {
      // close() cannot end the pool twice and stops before dropping the database: drop it here.
      await other.close().catch(async () => {
        if (!other.databaseUrl) return;
        const { default: pg } = await import('pg');
        const admin = new pg.Client({ connectionString: process.env.TEST_DATABASE_URL });
        await admin.connect();
        await admin.query(`drop database if exists "${new URL(other.databaseUrl).pathname.slice(1)}" with (force)`);
        await admin.end();
      });
    }
  });
});
