import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServer as createHttpServer, type Server } from 'node:http';
import { createServer as createTcpServer, connect, type Server as TcpServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import * as oauth from 'oauth4webapi';
import WebSocket from 'ws';
import { modelSuite } from '../helpers/model-suite.js';
import {
  browserLogin,
  CLI_TEST_TIMEOUT_MS,
  cliHome,
  type CliHome,
  runCli,
  startCli,
} from '../helpers/cli.js';
import { client } from '../helpers/http.js';
import { addMember, createApiToken, createUser } from '../helpers/fixtures.js';
import { setOrgBalance } from '../helpers/billing.js';
import { parseAs } from '../helpers/json.js';
import type { ServerFrame } from '../../src/runs/frames.js';

// Every error a person meets, met for real: what the person reads, the next step, and the exit code
// (docs/cli.md). svc runs with a concurrency cap of 1 so a run in flight makes the next call 429.

const suite = modelSuite({ ORG_MAX_CONCURRENCY: '1' });
let home: CliHome;
const closers: (() => void)[] = [];

beforeAll(async () => {
  home = await cliHome();
});
afterAll(async () => {
  for (const close of closers) close();
  await home?.cleanup();
});

/** A terminal signed in with an svc_ key for `url`. */
async function signedInWithKey(token: string, url = suite.server.url) {
  await home.writeCredentials({
    version: 1,
    servers: { [url]: { api_key: { token, org: suite.owner.orgId, email: suite.owner.email } } },
  });
}
const chat = (url = suite.server.url) => runCli(['chat', '--url', url, 'hello'], { env: home.env });
const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
/** The organization's name as GET /v1/clients gives it. */
async function orgName(clientId: string): Promise<string> {
  const list = await client(suite.server.url).get<{ data: { id: string; name: string }[] }>('/v1/clients', {
    token: suite.owner.session,
  });
  return list.body.data.find((c) => c.id === clientId)!.name;
}

async function listen(server: Server | TcpServer): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  closers.push(() => server.close());
  return (server.address() as AddressInfo).port;
}

describe('errors a person understands, with the next step', { timeout: CLI_TEST_TIMEOUT_MS }, () => {
  it('402 insufficient_credits: what is left, what the call needed, that organization’s billing page; chat and run exit 4', async () => {
    await signedInWithKey(suite.key);
    await setOrgBalance(suite.server, suite.owner.orgKey, 0);
    const name = await orgName(suite.owner.clientId);
    const res = await chat();
    expect(res.code).toBe(4);
    expect(res.stderr).toMatch(
      new RegExp(
        `^Error: ${escape(name)} has 0 tokens left; this call needed at least \\d[\\d,]* tokens?\\.$`,
        'm',
      ),
    );
    expect(res.stderr).toContain(
      `Top up on ${suite.server.url}/account/clients/${suite.owner.clientId}/billing`,
    );
    const run = await runCli(['run', '--url', suite.server.url, '--yes', 'anything'], { env: home.env });
    expect(run.code).toBe(4);
    expect(run.stderr).toContain(`${name} has 0 tokens left; this call needed at least`);
  });

  it('402 member_budget_exhausted: the budget, its period and reset, never "top up"; chat and run exit 4', async () => {
    const member = await createUser(suite.server);
    await addMember(suite.server, suite.owner.orgKey, member.userId, 'member');
    const key = (await createApiToken(suite.server, member, suite.owner.orgKey)).secret;
    const api = client(suite.server.url);
    const set = await api.put(
      `/v1/clients/${suite.owner.clientId}/members/${member.userId}/budget`,
      { period: 'day', budget_credits: 500 },
      { token: suite.owner.session },
    );
    expect(set.status).toBe(200);
    // The member spends until the budget refuses (20 tokens a call; the hold asks for more than that).
    let refused = 0;
    for (let i = 0; i < 40 && refused === 0; i++) {
      const r = await api.post(
        '/v1/chat/completions',
        { model: 'default', messages: [{ role: 'user', content: 'hi' }] },
        { token: key },
      );
      if (r.status === 402) refused = r.status;
      else expect(r.status).toBe(200);
    }
    expect(refused).toBe(402);
    await signedInWithKey(key);
    const name = await orgName(suite.owner.clientId);
    const said = `Your daily budget of 500 tokens in ${name} is used (resets 00:00 UTC); ask the owner.`;
    const res = await chat();
    expect(res.code).toBe(4);
    expect(res.stderr).toContain(`Error: ${said}`);
    expect(res.stderr).not.toMatch(/top up/i);
    const run = await runCli(['run', '--url', suite.server.url, '--yes', 'anything'], { env: home.env });
    expect(run.code).toBe(4);
    expect(run.stderr).toContain(`Error: ${said}`);
  });

  it('403 viewer_cannot_spend: says why and what to do, exit 4', async () => {
    const viewer = await createUser(suite.server);
    await addMember(suite.server, suite.owner.orgKey, viewer.userId, 'viewer');
    await signedInWithKey((await createApiToken(suite.server, viewer, suite.owner.orgKey)).secret);
    const res = await chat();
    expect(res.code).toBe(4);
    expect(res.stderr).toContain('You are a viewer in this organization');
    expect(res.stderr).toContain('svc orgs use ORG');
  });

  it('429 concurrency_limit: waits Retry-After and retries a bounded number of times', async () => {
    await signedInWithKey(suite.key);
    // A run in flight holds the organization's only slot while it waits for its tool result.
    suite.fake.reply = (body) =>
      body.tools && !body.messages.some((m: { role: string }) => m.role === 'tool')
        ? { toolCalls: [{ name: 'list_directory', arguments: '{"path":"."}' }] }
        : { content: 'Hello from the fake upstream' };
    const ws = new WebSocket(`${suite.server.url.replace('http', 'ws')}/v1/runs/ws`);
    const toolCall = new Promise<{ tool_call_id: string }>((resolve) =>
      ws.on('message', (d) => {
        const f = parseAs<ServerFrame>((d as Buffer).toString());
        if (f.type === 'tool_call') resolve(f);
      }),
    );
    const completed = new Promise<void>((resolve) =>
      ws.on(
        'message',
        (d) => parseAs<ServerFrame>((d as Buffer).toString()).type === 'run_completed' && resolve(),
      ),
    );
    await new Promise((r) => ws.on('open', r));
    ws.send(JSON.stringify({ type: 'auth', token: suite.key }));
    ws.send(
      JSON.stringify({ type: 'start', agent: 'default', messages: [{ role: 'user', content: 'list' }] }),
    );
    const call = await toolCall;

    const busy = await chat();
    expect(busy.code).toBe(5);
    expect(busy.stderr.match(/retrying in 1 s/g)).toHaveLength(3);
    expect(busy.stderr).toContain('still busy after waiting');
    const busyRun = await runCli(['run', '--url', suite.server.url, '--yes', 'list'], { env: home.env });
    expect(busyRun.code).toBe(5);
    expect(busyRun.stderr.match(/retrying in 1 s/g)).toHaveLength(3);

    // Freed while the CLI waits (it has said it is retrying): a retry gets through.
    const waiting = startCli(['chat', '--url', suite.server.url, 'hello'], { env: home.env });
    await waiting.waitFor(/retrying in 1 s \(1\/3\)/);
    ws.send(
      JSON.stringify({ type: 'tool_result', tool_call_id: call.tool_call_id, status: 'ok', result: 'x' }),
    );
    await completed;
    ws.close();
    expect(await waiting.exit, waiting.stderr()).toBe(0);
    expect(waiting.stdout()).toBe('Hello from the fake upstream\n');
  });

  it('a reader that closes its end of the pipe (svc run --help | head -1): exit 0, no stack trace', async () => {
    const cli = startCli(['run', '--help']);
    cli.child.stdout?.destroy(); // the reader is gone before the first line is written
    expect(await cli.exit).toBe(0);
    expect(cli.stderr()).toBe('');
  });

  it('503: says the server is unavailable and when to retry, exit 5', async () => {
    // A server in maintenance behind its load balancer: every answer is 503 with Retry-After.
    const down = createHttpServer((_req, res) =>
      res
        .writeHead(503, { 'retry-after': '7', 'content-type': 'application/json' })
        .end('{"detail":{"code":"UNAVAILABLE","message":"down"}}'),
    );
    const url = `http://127.0.0.1:${await listen(down)}`;
    await signedInWithKey(suite.key, url);
    const res = await chat(url);
    expect(res.code).toBe(5);
    expect(res.stderr).toContain(`The server at ${url} is temporarily unavailable.`);
    expect(res.stderr).toContain('Try again in 7 s');
  });

  it('an unreachable server: says so and how to check, exit 5', async () => {
    const closed = createTcpServer();
    const port = await listen(closed);
    closed.close();
    const url = `http://127.0.0.1:${port}`;
    await signedInWithKey(suite.key, url);
    for (const args of [['chat', 'hi'], ['login']]) {
      const res = await runCli([...args, '--url', url], { env: home.env });
      expect(res.code).toBe(5);
      expect(res.stderr).toContain(`Cannot reach the server at ${url}.`);
      expect(res.stderr).toContain('npm start');
    }
  });

  it('an issuer that does not match the address: refuses to sign in, exit 6', async () => {
    // A TCP proxy on another port: svc answers with its configured issuer, not the proxy's address.
    const proxy = createTcpServer((socket) => {
      const upstream = connect(suite.server.port, '127.0.0.1');
      socket.pipe(upstream).pipe(socket);
      socket.on('error', () => upstream.destroy());
      upstream.on('error', () => socket.destroy());
    });
    const url = `http://127.0.0.1:${await listen(proxy)}`;
    const res = await runCli(['login', '--url', url], { env: home.env });
    expect(res.code).toBe(6);
    expect(res.stderr).toContain('says it is a different issuer');
    expect(res.stderr).not.toContain('enter the code');
  });

  it('invalid_grant on refresh: "sign in again", once and clearly, exit 3', async () => {
    await setOrgBalance(suite.server, suite.owner.orgKey, 1_000);
    const url = suite.server.v2Url;
    await home.writeCredentials({ version: 1, servers: {} });
    await browserLogin(url, home.env, suite.owner);
    const stored = await home.credentials();
    const grant = stored.servers[url]!.grants!.model!;
    // The grant is revoked elsewhere (another device's logout, an admin), then the access token expires.
    const insecure = { [oauth.allowInsecureRequests]: true };
    const as = await oauth.processDiscoveryResponse(
      new URL(url),
      await oauth.discoveryRequest(new URL(url), { algorithm: 'oauth2', ...insecure }),
    );
    await oauth.processRevocationResponse(
      await oauth.revocationRequest(
        as,
        { client_id: 'svc-cli' },
        oauth.None(),
        grant.refresh_token,
        insecure,
      ),
    );
    stored.servers[url]!.grants!.model!.expires_at = 0;
    await home.writeCredentials(stored);
    const res = await chat(url);
    expect(res.code).toBe(3);
    expect(res.stderr.match(/has ended/g)).toHaveLength(1);
    expect(res.stderr).toContain(`svc login --url ${url}`);
  });
});
