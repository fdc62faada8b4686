import { PGlite } from '@electric-sql/pglite';
import { drizzle } from 'drizzle-orm/pglite';
import type { Database } from '../../src/db/client.js';
import { createReadLane } from '../../src/db/lane.js';
import * as schema from '../../src/db/schema.js';

// PGlite test databases, kept by the test process and reused (docs/decisions/0141): a closed test server
// gives its engine back, emptied to the migrated state, and the next test server takes it instead of
// loading the run's migrated data directory into a new engine (about 1.1 CPU-seconds each; emptying one
// costs a few hundredths). Test files share no rows through it: emptying deletes every row, puts the
// migrations' own rows back, sets every sequence to where the migrated copy had it, and discards all the
// session holds (prepared statements, advisory locks, settings, LISTENs). An engine a test closed on
// purpose (a database gone) is not reused.

/** Engines emptied and waiting in this process; more than this many are closed instead. */
const KEEP_IDLE = 2;
const idle: PGlite[] = [];

/** The statements that bring an engine back to the migrated copy, made once from a fresh copy. */
let resetScript: Promise<string> | undefined;
/** The migrated copy's schema objects (schemaOf), made once from a fresh copy. */
let migratedSchema: Promise<string> | undefined;

/** A database on an engine in the migrated state: a reused one when one is idle, else a fresh load. */
export async function takePgliteDatabase(archive: Blob): Promise<Database> {
  let engine = idle.pop();
  if (!engine) {
    engine = await PGlite.create('memory://', { loadDataDir: archive });
    const fresh = engine;
    resetScript ??= describeMigratedState(fresh);
    await resetScript;
    migratedSchema ??= schemaOf(fresh);
    await migratedSchema;
  }
  return pgliteDatabase(engine);
}

/** Gives a test server's engine back for the next one; one that fails to empty is closed. */
export async function givePgliteBack(database: Database): Promise<void> {
  const engine = database.pglite;
  if (!engine || engine.closed) return;
  try {
    if (idle.length >= KEEP_IDLE || !resetScript || !migratedSchema) throw new Error('not kept');
    // Emptying restores rows, not schema: an engine on which a test made or dropped a table, a function, an
    // index or a trigger is not the migrated copy any more.
    if ((await schemaOf(engine)) !== (await migratedSchema)) throw new Error('schema changed');
    await engine.exec(await resetScript);
    await engine.exec('discard all'); // refused inside the script's implicit transaction
    idle.push(engine);
  } catch {
    await engine.close();
  }
}

function pgliteDatabase(engine: PGlite): Database {
  return {
    db: drizzle(engine, { schema }),
    kind: 'pglite',
    pool: undefined,
    pglite: engine,
    readLane: createReadLane({ pglite: engine }),
    close: () => engine.close(),
  };
}

/** Every schema object outside the system schemas (relations, functions, triggers and their state), as one text. */
async function schemaOf(engine: PGlite): Promise<string> {
  const { rows } = await engine.query<{ schema: string | null }>(
    `select string_agg(item, ',' order by item) as schema from (
       select c.oid::regclass::text || ':' || c.relkind::text as item
         from pg_class c join pg_namespace n on n.oid = c.relnamespace
        where n.nspname <> 'information_schema' and n.nspname not like 'pg\\_%'
       union all
       select p.oid::regprocedure::text
         from pg_proc p join pg_namespace n on n.oid = p.pronamespace
        where n.nspname <> 'information_schema' and n.nspname not like 'pg\\_%'
       union all
       select t.tgrelid::regclass::text || '.' || t.tgname || ':' || t.tgenabled::text
         from pg_trigger t where not t.tgisinternal
     ) objects`,
  );
  return rows[0]?.schema ?? '';
}

const quoteLiteral = (text: string) => `'${text.replaceAll("'", "''")}'`;

/**
 * Reads a freshly loaded engine (every copy is the same) into one script: empty every table, insert
 * the rows the migrations wrote, set each sequence as it was, and discard the session's state. Triggers
 * (the immutable ledger's and audit's refusals, the foreign keys) are off while it runs.
 */
async function describeMigratedState(engine: PGlite): Promise<string> {
  const userSchemas = `n.nspname <> 'information_schema' and n.nspname not like 'pg\\_%'`;
  const tables = await engine.query<{ name: string; kind: string }>(
    `select c.oid::regclass::text as name, c.relkind::text as kind
       from pg_class c join pg_namespace n on n.oid = c.relnamespace
      where c.relkind in ('r', 'p') and ${userSchemas}
      order by 1`,
  );
  const statements = [
    'set session_replication_role = replica',
    // DELETE, not TRUNCATE: a truncate makes every table's files anew, ten times the cost on tables this small.
    ...tables.rows.filter((t) => t.kind === 'r').map((t) => `delete from only ${t.name}`),
  ];
  for (const table of tables.rows.filter((t) => t.kind === 'r')) {
    const rows = await engine.query<{ rows: string | null }>(
      `select json_agg(t)::text as rows from only ${table.name} t`,
    );
    const json = rows.rows[0]?.rows;
    if (!json) continue;
    const columns = await engine.query<{ name: string }>(
      `select quote_ident(attname) as name from pg_attribute
        where attrelid = $1::regclass and attnum > 0 and not attisdropped and attgenerated = ''
        order by attnum`,
      [table.name],
    );
    const list = columns.rows.map((c) => c.name).join(', ');
    statements.push(
      `insert into ${table.name} (${list}) overriding system value
         select ${list} from json_populate_recordset(null::${table.name}, ${quoteLiteral(json)})`,
    );
  }
  const sequences = await engine.query<{ name: string; value: string }>(
    `select format('%I.%I', schemaname, sequencename) as name,
            coalesce(last_value, start_value)::text || ', ' || (last_value is not null)::text as value
       from pg_sequences order by 1`,
  );
  for (const s of sequences.rows) statements.push(`select setval(${quoteLiteral(s.name)}, ${s.value})`);
  statements.push('reset session_replication_role');
  return statements.join(';\n') + ';';
}
