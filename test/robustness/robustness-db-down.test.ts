import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'drizzle-orm';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { client, type CallResult } from '../helpers/http.js';
import type { DeviceCode, DevicePoll } from '../helpers/answers.js';
import { createUser, type TestUser } from '../helpers/fixtures.js';
import { sessionCookie } from '../helpers/oauth.js';
import { signatureFor, stripeEvent } from '../helpers/fake-stripe.js';
import { queryRows } from '../../src/db/client.js';
import { anyOf, detailOf, type JsonObject } from '../helpers/json.js';

// Server faults in the surface's own words (CONTRACT §3; interface document: Authentication 6). The
// database really fails under the running server (a table renamed away, as in
// test/orgs/orgs-membership-guard.test.ts); nothing of ours is mocked.

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
    const { user_code } = (await api.post<DeviceCode>('/v1/auth/device/code')).body;
    await withoutTable('device_codes', async () => {
      for (const path of ['/v1/auth/device/authorize', '/v1/auth/device/deny']) {
        const res = await api.post(path, { user_code }, { token: user.session });
        expect(res.status, path).toBe(503);
        expect(detailOf(res.body).code, path).toBe('DEVICE_CODES_UNAVAILABLE');
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

describe('device poll while the database cannot answer', () => {
  /** A code approved by `user`, ready to be handed out on the next poll. */
  async function approvedCode() {
    const { device_code, user_code } = (await api.post<DeviceCode>('/v1/auth/device/code')).body;
    expect((await api.post('/v1/auth/device/authorize', { user_code }, { token: user.session })).status).toBe(
      200,
    );
    return device_code;
  }
  const consumedCodes = async () =>
    (
      await queryRows<{ n: number }>(
        server.deps.db,
        sql`select count(*)::int as n from device_codes where consumed_at is not null and user_id = ${user.userId}`,
      )
    )[0]!.n;
  const expectDeviceCodesUnavailable = (res: CallResult) => {
    expect(res.status).toBe(503);
    expect(res.body).toEqual({ detail: { code: 'DEVICE_CODES_UNAVAILABLE', message: anyOf(String) } });
    expect(res.headers.get('retry-after')).toBe('5');
  };

  it('answers 503 DEVICE_CODES_UNAVAILABLE (poll and code), then hands the approval out once', async () => {
    const device_code = await approvedCode();
    await withoutTable('device_codes', async () => {
      expectDeviceCodesUnavailable(await api.post('/v1/auth/device/poll', { device_code }));
      expectDeviceCodesUnavailable(await api.post('/v1/auth/device/code'));
    });
    const first = await api.post('/v1/auth/device/poll', { device_code });
    expect(first.status).toBe(200);
    expect(first.body).toMatchObject({ status: 'complete', client_id: user.orgId, email: user.email });
    expect((await api.post('/v1/auth/device/poll', { device_code })).body).toEqual({
      status: 'expired_token',
    });
  });

  it('a credential that cannot be minted leaves the approval unconsumed (no half-done hand-out)', async () => {
    const device_code = await approvedCode();
    // The consuming UPDATE succeeds; the mint in the same transaction fails, so both roll back.
    await withoutTable('api_tokens', async () => {
      expectDeviceCodesUnavailable(await api.post('/v1/auth/device/poll', { device_code }));
    });
    const consumedBefore = await consumedCodes();
    const handed = await api.post<DevicePoll>('/v1/auth/device/poll', { device_code });
    expect(handed.body).toMatchObject({ status: 'complete' });
    const verify = await api.get('/v1/auth/verify', { token: handed.body.token! });
    expect(verify.status).toBe(200);
    expect(await consumedCodes()).toBe(consumedBefore + 1);
  });
});

describe('every /v1 route while the database is stopped under the running server', () => {
  const WEBHOOK_SECRET = 'whsec_db_down';
  let stopped: TestServer;
  let down: ReturnType<typeof client>;
  let pending: { device_code: string; user_code: string };
  let token: string;
  beforeAll(async () => {
    stopped = await startTestServer({ env: { STRIPE_WEBHOOK_SECRET: WEBHOOK_SECRET } });
    down = client(stopped.url);
    token = (await createUser(stopped)).session;
    pending = (await down.post<DeviceCode>('/v1/auth/device/code')).body;
    await stopped.database.close();
  });
  afterAll(async () => {
    // close() cannot end the pool twice and stops before dropping the database: drop it here.
    await stopped?.close().catch(async () => {
      if (!stopped.databaseUrl) return;
      const { default: pg } = await import('pg');
      const admin = new pg.Client({ connectionString: process.env.TEST_DATABASE_URL });
      await admin.connect();
      await admin.query(
        `drop database if exists "${new URL(stopped.databaseUrl).pathname.slice(1)}" with (force)`,
      );
      await admin.end();
    });
  });

  it('answers 503 with a retryable code in the /v1 shape, never 500, on the routes without a credential', async () => {
    const event = stripeEvent('checkout.session.completed', {
      id: 'cs_test_down',
      object: 'checkout.session',
      mode: 'payment',
    });
    const calls: [string, unknown, Record<string, string>?][] = [
      ['/v1/register', { email: 'down@example.test', name: 'Down', password: 'correct-Horse-9' }],
      ['/v1/login', { email: 'down@example.test', password: 'correct-Horse-9' }],
      ['/v1/2fa/login', { challenge_token: 'c'.repeat(43), code: '123456' }],
      ['/v1/password/reset/request', { email: 'down@example.test' }],
      ['/v1/password/reset/confirm', { token: 't'.repeat(43), password: 'correct-Horse-9' }],
      ['/v1/email/verify', { token: 't'.repeat(43) }],
      ['/v1/auth/device/code', {}],
      ['/v1/auth/device/poll', { device_code: pending.device_code }],
      ['/v1/webhooks/stripe', event, { 'stripe-signature': signatureFor(event, WEBHOOK_SECRET) }],
    ];
    for (const [path, body, headers] of calls) {
      const res = await down.post<JsonObject>(path, body, headers ? { headers } : {});
      expect(res.status, path).toBe(503);
      expect(Object.keys(res.body), path).toEqual(['detail']);
      expect(detailOf(res.body).code, path).toMatch(/^(DATABASE|DEVICE_CODES)_UNAVAILABLE$/);
      expect(res.headers.get('retry-after'), path).toBe('5');
    }
  });

  it('answers 503 on the routes with a credential too (the membership guard fails closed first)', async () => {
    for (const [method, path, body] of [
      ['POST', '/v1/auth/device/authorize', { user_code: pending.user_code }],
      ['GET', '/v1/tokens', undefined],
      ['POST', '/v1/clients', { name: 'x' }],
      ['GET', '/v1/owner/balance', undefined],
      ['GET', '/v1/projects', undefined],
    ] as const) {
      const res = method === 'GET' ? await down.get(path, { token }) : await down.post(path, body, { token });
      expect(res.status, path).toBe(503);
      expect(detailOf(res.body).code, path).toBe('MEMBERSHIP_UNAVAILABLE');
    }
  });
});

describe('a real fault while the database answers', () => {
  it('stays a 500 with the request id only (the outage rule does not hide faults)', async () => {
    await withoutTable('users', async () => {
      const res = await api.post('/v1/login', { email: user.email, password: user.password });
      expect(res.status).toBe(500);
      expect(detailOf(res.body).code).toBe('INTERNAL');
      expect(detailOf(res.body).message).toMatch(/^internal error \(request [\w-]+\)$/);
    });
    expect((await api.post('/v1/login', { email: user.email, password: user.password })).status).toBe(200);
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

  it('answers 503 {error: "temporarily_unavailable"} with Retry-After when the database is gone under the running server', async () => {
    const other = await startTestServer();
    try {
      await other.database.close();
      const res = await exchange(other.url);
      expect(res.status).toBe(503);
      expect(res.headers.get('retry-after')).toBe('5');
      expect((await res.json()) as Record<string, unknown>).toEqual({
        error: 'temporarily_unavailable',
        error_description: anyOf(String),
      });
    } finally {
      // close() cannot end the pool twice and stops before dropping the database: drop it here.
      await other.close().catch(async () => {
        if (!other.databaseUrl) return;
        const { default: pg } = await import('pg');
        const admin = new pg.Client({ connectionString: process.env.TEST_DATABASE_URL });
        await admin.connect();
        await admin.query(
          `drop database if exists "${new URL(other.databaseUrl).pathname.slice(1)}" with (force)`,
        );
        await admin.end();
      });
    }
  });
});
