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
