import type { Db } from './client.js';

// A hot read built once: the ORM writes its SQL text once per database handle, and PostgreSQL parses and
// plans it once per connection (a named statement), instead of both on every request (decision 0130).
// A transaction is a handle of its own, so a read made inside one still runs inside it; its statement is
// built again for that transaction, as an unprepared read would be. Values go in as placeholders
// (`sql.placeholder`), so one statement serves every caller.

/** `build` on a handle, once per handle: `prepared(db).execute({...})`. `name` is unique in the process. */
export function preparedRead<Q>(build: (db: Db, name: string) => Q, name: string): (db: Db) => Q {
  const built = new WeakMap<Db, Q>();
  return (db) => {
    let query = built.get(db);
    if (!query) {
      query = build(db, name);
      built.set(db, query);
    }
    return query;
  };
}
