import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import { CLI_TEST_TIMEOUT_MS, type CliHome, cliHome, startCli } from '../helpers/cli.js';

// `svc login` polls the token endpoint at the device authorization's `interval` and, on `slow_down`, adds
// 5 s to it "for this and all subsequent requests" (RFC 8628 §3.5). svc's own token endpoint never says
// slow_down to a client that keeps the interval, so a fake authorization server on loopback (real HTTP, the
// CLI a real child process) answers: pending, slow_down, pending, then tokens. The gaps between the polls
// are measured where the requests arrive — the fake's clock — never by timing the CLI.

const INTERVAL_S = 1;
const STEP_S = 5; // RFC 8628 §3.5
/** libuv timers have millisecond granularity, so a wait of N ms may be observed as N − 1 ms. */
const TIMER_SLACK_MS = 25;

const answers = ['authorization_pending', 'slow_down', 'authorization_pending', 'tokens'] as const;
const polls: { at: number; grantType: string | null; deviceCode: string | null }[] = [];
let server: Server;
let origin: string;
let home: CliHome;

/** An unsigned JWT: the CLI only decodes its sub and org claims (it is the server's to verify). */
const b64 = (v: unknown) => Buffer.from(JSON.stringify(v)).toString('base64url');
const accessToken = (scope: string) =>
  `${b64({ alg: 'none' })}.${b64({ sub: 'user_slow', org: 'client_slow', scope })}.`;

function readBody(req: import('node:http').IncomingMessage): Promise<URLSearchParams> {
  return new Promise((resolve) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => resolve(new URLSearchParams(body)));
  });
}

beforeAll(async () => {
  home = await cliHome();
  server = createServer((req, res) => {
    const at = performance.now();
    const json = (status: number, value: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json', 'cache-control': 'no-store' });
      res.end(JSON.stringify(value));
    };
    void readBody(req).then((form) => {
      if (req.method === 'GET' && req.url === '/.well-known/oauth-authorization-server') {
        return json(200, {
          issuer: origin,
          token_endpoint: `${origin}/oauth/token`,
          device_authorization_endpoint: `${origin}/oauth/device_authorization`,
          grant_types_supported: ['urn:ietf:params:oauth:grant-type:device_code', 'refresh_token'],
        });
      }
      if (req.method === 'POST' && req.url === '/oauth/device_authorization') {
        return json(200, {
          device_code: 'dev-code-1',
          user_code: 'BCDF-GHJK',
          verification_uri: `${origin}/account/device`,
          expires_in: 600,
          interval: INTERVAL_S,
        });
      }
      if (req.method === 'POST' && req.url === '/oauth/token') {
        polls.push({ at, grantType: form.get('grant_type'), deviceCode: form.get('device_code') });
        const answer = answers[Math.min(polls.length, answers.length) - 1]!;
        if (answer !== 'tokens') return json(400, { error: answer });
        const grant = (scope: string) => ({
          scope,
          access_token: accessToken(scope),
          refresh_token: `rt-${scope}`,
          expires_in: 900,
        });
        return json(200, {
          ...grant('model'),
          token_type: 'Bearer',
          grants: [grant('model'), grant('platform')],
        });
      }
      json(404, { error: 'not_found' });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await new Promise((resolve) => server?.close(resolve));
  await home?.cleanup();
});

describe(
  'svc login: the device-grant poll honours interval and slow_down',
  { timeout: CLI_TEST_TIMEOUT_MS },
  () => {
    it('waits `interval` between polls, and 5 s more for every poll after a slow_down', async () => {
      const login = startCli(['login', '--url', origin], { env: home.env });
      expect(await login.exit).toBe(0);
      expect(login.stdout()).toContain(`Signed in to ${origin} as user_slow (client_slow)`);

      expect(polls).toHaveLength(4);
      for (const p of polls) {
        expect(p).toMatchObject({
          grantType: 'urn:ietf:params:oauth:grant-type:device_code',
          deviceCode: 'dev-code-1',
        });
      }
      const gapMs = (i: number) => polls[i]!.at - polls[i - 1]!.at;
      const slowed = (INTERVAL_S + STEP_S) * 1000 - TIMER_SLACK_MS;
      // After "pending": the interval the server gave.
      expect(gapMs(1)).toBeGreaterThanOrEqual(INTERVAL_S * 1000 - TIMER_SLACK_MS);
      // After "slow_down": interval + 5 s …
      expect(gapMs(2)).toBeGreaterThanOrEqual(slowed);
      // … and it stays increased for the polls that follow (§3.5 "all subsequent requests").
      expect(gapMs(3)).toBeGreaterThanOrEqual(slowed);

      const entry = (await home.credentials()).servers[origin];
      expect(entry!.grants!.model!.refresh_token).toBe('rt-model');
      expect(entry!.grants!.platform!.refresh_token).toBe('rt-platform');
    });
  },
);
