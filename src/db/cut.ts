import type pg from 'pg';

/**
 * Closes a node-postgres connection at once, without the goodbye `end()` sends: a connection that stopped
 * answering (a black hole) would never acknowledge it and its socket would stay open. The client then
 * emits its `'error'`/`'end'` and is no longer queryable, so a pool drops it.
 */
export function cutConnection(client: pg.ClientBase): void {
  (client as unknown as { connection: { stream: { destroy(): void } } }).connection.stream.destroy();
}
