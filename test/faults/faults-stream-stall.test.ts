import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect, type Socket } from 'node:net';
import { sql } from 'drizzle-orm';
import { queryRows } from '../../src/db/client.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { createApiToken, createUser, type TestUser } from '../helpers/fixtures.js';
import { setOrgBalance } from '../helpers/billing.js';
import { startFakeUpstream, type FakeUpstream } from '../helpers/fake-upstream.js';
import { callChat, orgLedger, waitUntil } from '../helpers/chat-load.js';
import { checkInvariants } from '../../src/billing/invariants.js';

// Nobody holds an org's slot and hold by going silent. A client that stops reading a
// stream is cut after STREAM_STALL_TIMEOUT_MS and billed for what svc relayed; a provider that stops
// mid-stream is given up after MODEL_UPSTREAM_BODY_IDLE_TIMEOUT_MS and the client billed for what it got;
// a provider that sends no headers is given up after MODEL_UPSTREAM_HEADERS_TIMEOUT_MS, nothing debited.
// Each with the bound set to 1 s here (the reader's 3 s), and the slot and hold back afterwards
// (docs/operations.md).

let fake: FakeUpstream;
let server: TestServer;
let owner: TestUser;
let key: string;
const BOUND_MS = 1_000;
// The reader's bound is longer: svc's writes wait for a 'drain' from its own event loop, which a loaded
// test machine can hold for over a second before any chunk left svc's write buffer: the reader would be
// cut with nothing received.
const STALL_BOUND_MS = 3_000;

beforeAll(async () => {
  fake = await startFakeUpstream();
  server = await startTestServer({
    env: fake.env({
      ORG_MAX_CONCURRENCY: '1',
      STREAM_STALL_TIMEOUT_MS: String(STALL_BOUND_MS),
      MODEL_UPSTREAM_BODY_IDLE_TIMEOUT_MS: String(BOUND_MS),
      MODEL_UPSTREAM_HEADERS_TIMEOUT_MS: String(BOUND_MS),
    }),
  });
  owner = await createUser(server);
  key = (await createApiToken(server, owner, owner.orgKey)).secret;
  await setOrgBalance(server, owner.orgKey, 10_000_000);
});

afterAll(async () => {
  await server?.close();
  await fake?.close();
});

interface UsageRow {
  prompt_tokens: number;
  completion_tokens: number;
  credits_debited: unknown;
  outcome: string;
}

async function usageOf(requestId: string): Promise<UsageRow | undefined> {
  const [row] = await queryRows<UsageRow>(
    server.deps.db,
    sql`select prompt_tokens, completion_tokens, credits_debited, outcome from usage_records
        where request_id = ${requestId}`,
  );
  return row;
}

async function ledgerDebit(requestId: string): Promise<number> {
  const [row] = await queryRows<{ amount: unknown }>(
    server.deps.db,
    sql`select coalesce(sum(amount), 0) as amount from billing_entries
        where type = 'usage' and description like ${`%[${requestId}]%`}`,
  );
  return Number(row!.amount);
}

/** The org's whole cap is free again and no hold of it is open: the stuck call gave everything back. */
async function capAndHoldsBack() {
  await waitUntil(async () => {
    const l = await orgLedger(server, owner.orgKey);
    return l.liveLeases === 0 && l.openHolds === 0;
  }, 10_000);
  expect((await callChat(server.url, key)).status).toBe(200);
}

/** The body of a raw HTTP/1.1 response in chunked transfer coding, up to where it was cut. */
function dechunk(raw: Buffer): string {
  let at = raw.indexOf('\r\n\r\n') + 4;
  const parts: Buffer[] = [];
  while (at < raw.length) {
    const eol = raw.indexOf('\r\n', at);
    if (eol < 0) break;
    const size = parseInt(raw.subarray(at, eol).toString('latin1'), 16);
    if (!(size > 0)) break;
    parts.push(raw.subarray(eol + 2, Math.min(raw.length, eol + 2 + size)));
    at = eol + 2 + size + 2;
  }
  return Buffer.concat(parts).toString('utf8');
}

/** Content chunks of an SSE body, and whether it had an error event. */
function parseStream(text: string) {
  let contents = 0;
  let error: string | null = null;
  for (const line of text.split('\n')) {
    if (!line.startsWith('data: {') || !line.endsWith('}')) continue; // the last may be cut mid-way
    const event = JSON.parse(line.slice(6)) as {
      choices?: { delta?: { content?: string } }[];
      error?: { code?: string };
    };
    if (event.error) error = event.error.code ?? 'error';
    if (event.choices?.[0]?.delta?.content) contents++;
  }
  return { contents, error };
}

describe('a party that goes silent holds nothing for long', { timeout: 120_000 }, () => {
  it('a client that stops reading a stream: cut after the bound, billed for what svc relayed, slot and hold back', async () => {
    const WORDS = 60_000; // about 9 MB of events: more than the socket buffers between svc and the client
    fake.reply = () => ({ content: ' w'.repeat(WORDS) });
    const before = await orgLedger(server, owner.orgKey);
    const { port } = new URL(server.url);
    const body = JSON.stringify({
      model: 'x',
      stream: true,
      max_tokens: WORDS,
      messages: [{ role: 'user', content: 'say w many times' }],
    });
    // A real client that reads the first bytes and then nothing (paused: the kernel's buffers fill up).
    const socket: Socket = connect(Number(port), '127.0.0.1');
    const received: Buffer[] = [];
    const firstBytes = new Promise<void>((resolve) => {
      socket.once('data', (d: Buffer) => {
        received.push(d);
        socket.pause();
        resolve();
      });
    });
    socket.write(
      `POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${key}\r\n` +
        `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    );
    await firstBytes;
    const requestId = /x-svc-request-id: (\S+)/i.exec(Buffer.concat(received).toString('latin1'))![1]!;
    const pausedAt = Date.now();

    // svc gives up on the silent reader: the call is settled as one the client left, its slot freed.
    await waitUntil(async () => (await usageOf(requestId)) !== undefined, 30_000);
    const cutAfterMs = Date.now() - pausedAt;
    await waitUntil(async () => (await orgLedger(server, owner.orgKey)).liveLeases === 0, 10_000);

    // Now the client reads whatever reached it before the cut.
    const ended = new Promise<void>((resolve) => socket.once('close', () => resolve()));
    socket.on('data', (d: Buffer) => received.push(d));
    socket.on('error', () => {});
    socket.resume();
    await ended;
    const got = parseStream(dechunk(Buffer.concat(received))).contents;

    const usage = (await usageOf(requestId))!;
    expect(usage.outcome).toBe('aborted');
    // Billed for the chunks svc handed to the connection: every one the client got, plus at most what
    // was still in svc's own write buffer (16 KB: about 100 events) when it cut, and never the whole reply.
    expect(usage.completion_tokens).toBeGreaterThanOrEqual(got);
    expect(usage.completion_tokens - got).toBeLessThanOrEqual(120);
    expect(usage.completion_tokens).toBeLessThan(WORDS);
    expect(got).toBeGreaterThan(0);
    // Exact money: the ledger's debit is the price of that usage (TEST_PRICES: prompt + 2 × completion).
    const debit = usage.prompt_tokens + 2 * usage.completion_tokens;
    expect(Number(usage.credits_debited)).toBe(debit);
    expect(await ledgerDebit(requestId)).toBe(debit);
    expect((await orgLedger(server, owner.orgKey)).debited - before.debited).toBe(debit);
    console.log(
      `stalled reader: cut ${cutAfterMs} ms after it stopped reading (bound ${STALL_BOUND_MS} ms); ` +
        `${got} chunks received, ${usage.completion_tokens} billed`,
    );
    fake.reset();
    await capAndHoldsBack();
  });

  it('a provider that stops mid-stream: given up after the body bound, the client billed for what it got', async () => {
    fake.reply = () => ({ content: ' one two three four five six seven eight' });
    fake.stallAfterChunks = 3;
    const before = await orgLedger(server, owner.orgKey);
    const started = Date.now();
    const res = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'x', stream: true, messages: [{ role: 'user', content: 'count' }] }),
    });
    const requestId = res.headers.get('x-svc-request-id')!;
    const { contents, error } = parseStream(await res.text());
    const tookMs = Date.now() - started;
    expect(contents).toBe(3);
    expect(error).toBe('upstream_timeout');
    const usage = await usageOf(requestId);
    expect(usage?.outcome).toBe('aborted');
    expect(usage?.completion_tokens).toBe(3);
    const debit = usage!.prompt_tokens + 2 * 3;
    expect(await ledgerDebit(requestId)).toBe(debit);
    expect((await orgLedger(server, owner.orgKey)).debited - before.debited).toBe(debit);
    console.log(`stalled provider: stream ended ${tookMs} ms after the call (bound ${BOUND_MS} ms)`);
    fake.reset();
    await capAndHoldsBack();
  });

  it('a provider that sends no headers: 504 upstream_timeout after the headers bound, nothing debited', async () => {
    fake.headersDelayMs = 30_000;
    const before = await orgLedger(server, owner.orgKey);
    for (const stream of [false, true]) {
      const r = await callChat(server.url, key, { stream });
      expect(`${r.status}:${r.code}`).toBe('504:upstream_timeout');
      expect(r.ms).toBeLessThan(25_000); // far below the provider's 30 s silence: the bound cut it
    }
    expect((await orgLedger(server, owner.orgKey)).debited).toBe(before.debited);
    fake.reset();
    await capAndHoldsBack();
    expect(await checkInvariants(server.deps.db)).toEqual([]);
  });
});
