import pg from 'pg';
import { protocol, type PGlite } from '@electric-sql/pglite';
import { cutConnection } from './cut.js';
import { traceStatements } from './statement-spans.js';
import { statementSettled, statementSpan } from '../telemetry/spans.js';

// A connection of its own for the hottest read: the `svc_` token's live row, read on every model call
// before its first byte (src/auth/principal.ts). Through the pool, a statement waits a tick for its
// connection (pg-pool hands clients out on the next tick), so it left only after the rest of the
// request's synchronous work (the body parser's set-up among it); on a connection of its own, already
// open and idle, the statement is written at once, and its round trip runs while the body is read.
// The statement's rows come back as arrays, with no ORM mapping between them and the caller.
//
// The lane runs each statement's generic plan, planned once per connection (plan_cache_mode): a prepared
// statement is otherwise re-planned on every run while PostgreSQL's estimate for the generic plan is the
// higher (`token_hash = any($1)`: the generic plan assumes ten hashes, the custom one knows there is
// one), and on an analyzed database of ten million ledger rows that planning cost ~9× the statement's execution
// (0.43 ms vs 0.05 ms; verify at 0.65× of an empty database's throughput). The lane's statements are
// key lookups whose generic plan is the same index walk (docs/scale.md "Verify").
//
// Its only caller group-commits (src/db/batch.ts: one statement in flight at a time), so one connection
// is enough. A connection that fails is dropped and the next read opens another; until then reads fail,
// and their callers fail closed (503). On the embedded PGlite, reads go to the engine itself, as named
// statements too (pgliteRows below).

export interface ReadLane {
  /** Runs one statement (prepared once per connection under `name`) and returns its rows as arrays. */
  rows(name: string, text: string, values: unknown[]): Promise<unknown[][]>;
  /**
   * The same for a read that is not group-committed (many in flight at once): on PostgreSQL through the
   * pool, prepared once per pooled connection; on PGlite the same engine statement as `rows`.
   */
  pooledRows(name: string, text: string, values: unknown[]): Promise<unknown[][]>;
  close(): Promise<void>;
}

/** On PostgreSQL, a connection of its own with the pool's settings; on PGlite, the engine itself. */
export function createReadLane(source: { pool: pg.Pool } | { pglite: PGlite }): ReadLane {
  if ('pglite' in source) {
    const rows = pgliteRows(source.pglite);
    return { rows, pooledRows: rows, async close() {} };
  }
  const options = source.pool.options;
  let client: pg.Client | null = null;
  let connecting: Promise<pg.Client> | null = null;
  let closed = false;

  function open(): Promise<pg.Client> {
    connecting ??= (async () => {
      const c = new pg.Client({ ...options, options: '-c plan_cache_mode=force_generic_plan' });
      traceStatements(c);
      const drop = () => {
        if (client === c) client = null;
        c.end().catch(() => {});
      };
      c.on('error', drop);
      c.on('end', drop);
      try {
        await c.connect();
      } catch (err) {
        c.removeAllListeners();
        throw err;
      } finally {
        connecting = null;
      }
      if (closed) {
        await c.end().catch(() => {});
        throw new Error('the read lane is closed');
      }
      client = c;
      return c;
    })();
    return connecting;
  }

  const run = async (c: pg.Client, name: string, text: string, values: unknown[]) => {
    try {
      return (await c.query<unknown[]>({ name, text, values, rowMode: 'array' })).rows;
    } catch (err) {
      // An answer that never came (the driver's query timeout) leaves the connection waiting for it: every
      // later read would queue behind. Only an error PostgreSQL itself sent leaves the connection usable.
      if (!(err instanceof pg.DatabaseError)) {
        if (client === c) client = null;
        cutConnection(c);
      }
      throw err;
    }
  };

  const pool = source.pool;
  return {
    async pooledRows(name, text, values) {
      return (await pool.query<unknown[]>({ name, text, values, rowMode: 'array' })).rows;
    },
    rows(name, text, values) {
      if (closed) return Promise.reject(new Error('the read lane is closed'));
      // Open and idle: the statement is written now, in the caller's own turn of the event loop.
      if (client) return run(client, name, text, values);
      return open().then((c) => run(c, name, text, values));
    },
    async close() {
      closed = true;
      const c = client;
      client = null;
      await c?.end().catch(() => {});
    },
  };
}

/**
 * Named statements on the embedded engine. PGlite's `query` parses, describes and plans its statement on
 * every call, six trips into the engine; here a statement is parsed and described once per engine and
 * each read is one trip (Bind, Execute, Sync). PGlite runs in this process, so that work was this
 * process's CPU: 1,180 → 213 µs for the grant read (bench/README.md, mcp). Each read waits for the
 * engine's transaction and query locks, as `query` does, so it never runs inside another caller's
 * transaction. Values are serialized and rows parsed with the engine's own type handlers.
 */
function pgliteRows(engine: PGlite): ReadLane['rows'] {
  const { serialize } = protocol;
  const described = new Map<string, { params: number[]; fields: number[] }>();
  const run = (...messages: Uint8Array[]) => {
    const message = new Uint8Array(messages.reduce((n, m) => n + m.length, 0));
    messages.reduce((at, m) => (message.set(m, at), at + m.length), 0);
    return engine.execProtocol(message, { syncToFs: false });
  };
  const read: ReadLane['rows'] = (name, text, values) =>
    engine._runExclusiveTransaction(() =>
      engine._runExclusiveQuery(async () => {
        let statement = described.get(name);
        if (!statement) {
          const { messages } = await run(
            serialize.parse({ name, text }),
            serialize.describe({ type: 'S', name }),
            serialize.sync(),
          );
          statement = { params: [], fields: [] };
          for (const m of messages) {
            if (m instanceof protocol.messages.ParameterDescriptionMessage) statement.params = m.dataTypeIDs;
            if (m instanceof protocol.messages.RowDescriptionMessage)
              statement.fields = m.fields.map((f) => f.dataTypeID);
          }
          described.set(name, statement);
        }
        const { params, fields } = statement;
        const { messages } = await run(
          serialize.bind({
            statement: name,
            values: values.map((v, i) => {
              if (v === null || v === undefined) return null;
              const serializer = engine.serializers[params[i]!];
              if (serializer) return serializer(v);
              return typeof v === 'string' ? v : JSON.stringify(v);
            }),
          }),
          serialize.execute({}),
          serialize.sync(),
        );
        const rows: unknown[][] = [];
        for (const m of messages) {
          if (!(m instanceof protocol.messages.DataRowMessage)) continue;
          rows.push(
            m.fields.map((value: string | null, i): unknown => {
              const parser = engine.parsers[fields[i]!];
              if (value === null || !parser) return value;
              const parsed: unknown = parser(value, fields[i]);
              return parsed;
            }),
          );
        }
        return rows;
      }),
    );
  // Each read a span when traced, as the PostgreSQL lane's are (CONTRACT §1: database statements).
  return (name, text, values) => {
    const done = statementSpan(text);
    return done ? statementSettled(done, read(name, text, values)) : read(name, text, values);
  };
}
