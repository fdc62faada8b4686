import { sql } from 'drizzle-orm';
import { queryRows, type Db } from '../../src/db/client.js';

/**
 * Moves a database window `ms` into the past, as time passing would: its entries' timestamps and the
 * mark of what its admissions already swept (src/db/custom/rate-windows.sql), together.
 */
export async function ageDatabaseWindow(db: Db, key: string, ms: number): Promise<void> {
  const by = sql`make_interval(secs => ${ms / 1000}::float8)`;
  await queryRows(db, sql`update rate_window_entries set at = at - ${by} where key = ${key}`);
  await queryRows(db, sql`update rate_window_totals set swept_to = swept_to - ${by} where key = ${key}`);
}
