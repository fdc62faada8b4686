import pg from 'pg';
import { sql } from 'drizzle-orm';
import { openDatabase, type Database } from '../src/db/client.js';
import { runMigrations } from '../src/db/migrate.js';
import { grantToOrg, SOURCE_PURCHASES } from '../src/billing/ledger.js';
import { transaction } from '../src/db/transaction.js';
import { randomToken } from '../src/ids.js';

// The billing probes' database (bench/settle-counts.ts, bench/give-back.ts): a throw-away database on
// the PostgreSQL at an admin URL, migrated from this tree, with one user owning organizations funded with
// a trillion tokens each.

export interface FundedDatabase {
  database: Database;
  /** Its URL, for connections of the probe's own. */
  url: string;
  /** Closes the pool and drops the database. */
  drop(): Promise<void>;
}

export async function fundedDatabase(o: {
  adminUrl: string;
  /** The database's name before its random suffix (`svc_…`). */
  prefix: string;
  poolSize: number;
  userId: string;
  orgs: string[];
}): Promise<FundedDatabase> {
  const name = `${o.prefix}_${randomToken(6)}`;
  const admin = new pg.Client({ connectionString: o.adminUrl });
  await admin.connect();
  await admin.query(`create database "${name}"`);
  const url = new URL(o.adminUrl);
  url.pathname = `/${name}`;
  const database = await openDatabase({ databaseUrl: url.toString(), poolSize: o.poolSize });
  const drop = async () => {
    await database.close();
    await admin.query(`drop database if exists "${name}" with (force)`);
    await admin.end();
  };
  try {
    await runMigrations(database);
    const db = database.db;
    await db.execute(
      sql`insert into users (id, email, name, password_hash) values (${o.userId}, ${`${o.userId}@example.test`}, ${o.userId}, 'x')`,
    );
    for (const org of o.orgs) {
      await db.execute(sql`insert into orgs (id, name, owner_id) values (${org}, ${org}, ${o.userId})`);
      await transaction(db, (tx) =>
        grantToOrg(tx, {
          key: `${o.prefix}:fund:${org}`,
          source: SOURCE_PURCHASES,
          ownerId: o.userId,
          orgKey: org,
          amount: 1e12,
          type: 'topup',
          description: 'bench funding',
        }),
      );
    }
  } catch (err) {
    await drop();
    throw err;
  }
  return { database, url: url.toString(), drop };
}
