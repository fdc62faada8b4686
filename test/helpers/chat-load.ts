import { sql } from 'drizzle-orm';
import type { Dispatcher } from 'undici';
import { queryRows } from '../../src/db/client.js';
import { orgAccount } from '../../src/billing/ledger.js';
import type { TestServer } from './server.js';
import { eventually } from './eventually.js';

// Chat calls as a client makes them (fetch, real HTTP), classified by what the client got, and the
// ledger's view of the same org: what the fault suites compare (STYLE: the ledger proves it).

export interface CallResult {
  status: number;
  /** A whole answer: a JSON completion, or a stream that reached `data: [DONE]`. */
  answered: boolean;
  retryAfter: string | null;
  requestId: string | null;
  /** The error code of a refusal (OpenAI shape), or of an error event inside a stream. */
  code: string | null;
  ms: number;
}

export async function callChat(
  base: string,
  key: string,
  opts: { stream?: boolean; signal?: AbortSignal; content?: string; connection?: Dispatcher } = {},
): Promise<CallResult> {
  const started = Date.now();
  const result = (status: number, answered: boolean, headers: Headers | null, code: string | null) => ({
    status,
    answered,
    retryAfter: headers?.get('retry-after') ?? null,
    requestId: headers?.get('x-svc-request-id') ?? null,
    code,
    ms: Date.now() - started,
  });
  let res: Response;
  try {
    res = await fetch(`${base}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'any',
        messages: [{ role: 'user', content: opts.content ?? 'hi' }],
        ...(opts.stream ? { stream: true } : {}),
      }),
      signal: opts.signal ?? AbortSignal.timeout(30_000),
      // A caller's own connection (an undici Agent with one): fetch otherwise takes any of its pool's.
      // Node's fetch is undici too; only the type packages of the two differ.
      ...(opts.connection ? { dispatcher: opts.connection as unknown as RequestInit['dispatcher'] } : {}),
    });
  } catch {
    return result(0, false, null, 'network');
  }
  let text: string;
  try {
    text = await res.text();
  } catch {
    return result(res.status, false, res.headers, 'cut');
  }
  if (res.status !== 200) {
    let code: string | null = null;
    try {
      code = (JSON.parse(text) as { error?: { code?: string } }).error?.code ?? null;
    } catch {
      // not JSON
    }
    return result(res.status, false, res.headers, code);
  }
  if (!opts.stream) return result(200, text.includes('"choices"'), res.headers, null);
  const errorEvent = /"error":\{[^}]*"code":"([^"]+)"/.exec(text)?.[1] ?? null;
  return result(200, text.includes('data: [DONE]') && !errorEvent, res.headers, errorEvent);
}

/** Σ of the org's `usage` debits, the number of usage rows, and its holds still open. */
export async function orgLedger(server: TestServer, orgKey: string) {
  const [usage] = await queryRows<{ debited: unknown; rows: unknown }>(
    server.deps.db,
    sql`select coalesce(sum(amount), 0) as debited, count(*) as rows from billing_entries
        where type = 'usage' and from_account = ${orgAccount(orgKey)}`,
  );
  const [holds] = await queryRows<{ open: unknown }>(
    server.deps.db,
    sql`select count(*) as open from billing_holds where org_key = ${orgKey} and status = 'held'`,
  );
  const [leases] = await queryRows<{ live: unknown }>(
    server.deps.db,
    sql`select count(*) as live from concurrency_leases where org_id = ${orgKey} and expires_at > now()`,
  );
  return {
    debited: Number(usage!.debited),
    usageRows: Number(usage!.rows),
    openHolds: Number(holds!.open),
    liveLeases: Number(leases!.live),
  };
}

/** The id of the newest ledger entry: `billedCalls` after it sees only what came later. */
export async function lastEntryId(server: TestServer): Promise<number> {
  const [row] = await queryRows<{ id: unknown }>(
    server.deps.db,
    sql`select coalesce(max(id), 0) as id from billing_entries`,
  );
  return Number(row!.id);
}

/**
 * The org's `usage` debits after ledger entry `afterId`, by request id (read off each entry's key,
 * `usage:<request id>`, or `usage:<request id>:excess` for a charge beyond the hold: summed with it).
 */
export async function billedCalls(
  server: TestServer,
  orgKey: string,
  afterId: number,
): Promise<Map<string, number>> {
  const rows = await queryRows<{ key: string; amount: unknown }>(
    server.deps.db,
    sql`select key, amount from billing_entries
        where type = 'usage' and from_account = ${orgAccount(orgKey)} and id > ${afterId} order by id`,
  );
  const billed = new Map<string, number>();
  for (const { key, amount } of rows) {
    const id = key.split(':')[1]!;
    billed.set(id, (billed.get(id) ?? 0) + Number(amount));
  }
  return billed;
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** `eventually` (helpers/eventually.ts) that resolves with the milliseconds it took. */
export async function waitUntil(check: () => Promise<boolean> | boolean, timeoutMs: number): Promise<number> {
  const started = Date.now();
  await eventually(check, timeoutMs);
  return Date.now() - started;
}
