import { randomBytes } from 'node:crypto';
import {
  appendFileSync,
  existsSync,
  fsyncSync,
  openSync,
  closeSync,
  readdirSync,
  readFileSync,
} from 'node:fs';
import { mkdirSync, renameSync, unlinkSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { AppError } from '../../http/errors.js';
import type { SettleInput } from '../../billing/spend.js';
import type { Logger } from '../../log.js';

// Settles (and voids) that could not be written when their call ended (CONTRACT §8: never an unbilled
// call). The provider's work was done and the client got it; only the ledger row is
// missing, because the database did not answer. Such a write is kept here, in memory, and retried with
// backoff until it lands; at shutdown what is still pending is tried once more and then appended to a
// durable spool file (SETTLE_SPOOL_FILE), which the next start replays.
//
// Exactly once: a settle is keyed by its call's request id, and the statement itself is idempotent by
// that id (svc_settle_holds: a repeated settle returns the first result, src/billing/spend.ts), so a retry
// whose first attempt did commit (its answer was lost), or a spool entry replayed twice, debits nothing
// more. The input is carried whole, as the call's settle built it: what a settle debits is decided there.

export type PendingWrite =
  | { kind: 'settle'; input: SettleInput }
  /** A failed call's hold, given back whole (src/billing/spend.ts voidHold). */
  | { kind: 'void'; requestId: string };

export interface PendingSettlesDeps {
  settle(input: SettleInput): Promise<unknown>;
  voidHold(requestId: string): Promise<unknown>;
  log: Logger;
  /** The spool file; unset: what cannot be written by shutdown is logged (an in-memory test setup). */
  spoolFile: string | undefined;
  /** First retry after this long, doubling up to maxDelayMs. */
  firstDelayMs?: number;
  maxDelayMs?: number;
}

export interface PendingSettles {
  /** Keeps a write that failed for a reason other than its own answer (an AppError) and retries it. */
  keep(write: PendingWrite): void;
  /** Writes kept and not landed yet. */
  size(): number;
  /** At start: takes over the spool (and any left by a process that died replaying it), retried as kept. */
  replaySpool(): number;
  /**
   * At shutdown: tries every pending write until `deadline` (epoch ms), then appends what is left to the
   * spool. Resolves with the numbers landed and spooled.
   */
  flush(deadline: number): Promise<{ landed: number; spooled: number }>;
}

const idOf = (w: PendingWrite) => (w.kind === 'settle' ? w.input.requestId : w.requestId);

export function createPendingSettles(deps: PendingSettlesDeps): PendingSettles {
  const firstDelayMs = deps.firstDelayMs ?? 200;
  const maxDelayMs = deps.maxDelayMs ?? 5_000;
  const pending = new Map<string, PendingWrite>();
  /** Spool files this process took over: deleted once every write they held has landed. */
  const replaying = new Map<string, Set<string>>();
  let delay = firstDelayMs;
  let timer: NodeJS.Timeout | null = null;
  let running: Promise<void> | null = null;
  /** After the shutdown flush: a write kept now goes straight to the spool. */
  let flushed = false;

  const write = (w: PendingWrite) =>
    w.kind === 'settle' ? deps.settle(w.input) : deps.voidHold(w.requestId);

  function landed(id: string) {
    pending.delete(id);
    for (const [file, ids] of replaying) {
      ids.delete(id);
      if (ids.size === 0) {
        replaying.delete(file);
        try {
          unlinkSync(file);
        } catch {
          // already gone
        }
      }
    }
  }

  /** One pass over every pending write; true when all landed. */
  async function attempt(): Promise<boolean> {
    let failed = 0;
    await Promise.all(
      [...pending.values()].map((w) =>
        write(w).then(
          () => landed(idOf(w)),
          (err: unknown) => {
            if (err instanceof AppError) {
              // The database answered and refused (no such hold): retrying changes nothing.
              deps.log.error({ err, requestId: idOf(w) }, `a kept ${w.kind} was refused`);
              landed(idOf(w));
            } else failed++;
          },
        ),
      ),
    );
    return failed === 0;
  }

  function schedule() {
    if (timer || running || pending.size === 0) return;
    timer = setTimeout(() => {
      timer = null;
      running = attempt().then((allLanded) => {
        running = null;
        delay = allLanded ? firstDelayMs : Math.min(maxDelayMs, delay * 2);
        if (pending.size > 0) {
          deps.log.warn({ pending: pending.size, retryInMs: delay }, 'settles waiting for the database');
          schedule();
        } else deps.log.info('every kept settle has landed');
      });
    }, delay);
    timer.unref();
  }

  function spool(writes: PendingWrite[]) {
    if (writes.length === 0) return;
    if (!deps.spoolFile) {
      // Nowhere durable to put them (in-memory DATA_DIR): the log is the record an operator can apply.
      for (const w of writes) deps.log.error({ write: w }, 'settle lost at shutdown: no SETTLE_SPOOL_FILE');
      return;
    }
    mkdirSync(dirname(deps.spoolFile), { recursive: true });
    const fd = openSync(deps.spoolFile, 'a', 0o600);
    try {
      appendFileSync(fd, writes.map((w) => JSON.stringify(w) + '\n').join(''));
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
  }

  function readSpool(file: string): PendingWrite[] {
    const out: PendingWrite[] = [];
    for (const line of readFileSync(file, 'utf8').split('\n')) {
      if (!line.trim()) continue;
      try {
        out.push(JSON.parse(line) as PendingWrite);
      } catch {
        // A line cut by a crash mid-write: the whole ones are still good.
        deps.log.error({ line: line.slice(0, 200) }, 'unreadable settle spool line skipped');
      }
    }
    return out;
  }

  const pidAlive = (pid: number) => {
    try {
      process.kill(pid, 0);
      return true;
    } catch (err) {
      return (err as NodeJS.ErrnoException).code === 'EPERM';
    }
  };

  return {
    keep(w) {
      if (flushed) return spool([w]);
      pending.set(idOf(w), w);
      schedule();
    },
    size: () => pending.size,

    replaySpool() {
      const file = deps.spoolFile;
      if (!file) return 0;
      const dir = dirname(file);
      const prefix = `${basename(file)}.replaying.`;
      const files: string[] = [];
      // A spool another process was replaying when it died (its pid is in the name).
      if (existsSync(dir))
        for (const name of readdirSync(dir)) {
          const pid = Number(name.startsWith(prefix) ? name.slice(prefix.length).split('.')[0] : NaN);
          if (Number.isInteger(pid) && !pidAlive(pid)) files.push(join(dir, name));
        }
      if (existsSync(file)) {
        // Taken whole by a rename: a second process starting at the same time gets nothing of it.
        const mine = join(dir, `${prefix}${process.pid}.${randomBytes(4).toString('hex')}`);
        try {
          renameSync(file, mine);
          files.push(mine);
        } catch {
          // taken by another process first
        }
      }
      let n = 0;
      for (const f of files) {
        const writes = readSpool(f);
        replaying.set(f, new Set(writes.map(idOf)));
        for (const w of writes) pending.set(idOf(w), w);
        n += writes.length;
        if (writes.length === 0) landed('');
      }
      if (n > 0) deps.log.warn({ writes: n }, 'replaying settles spooled at the last shutdown');
      delay = 0;
      schedule();
      delay = firstDelayMs;
      return n;
    },

    async flush(deadline) {
      flushed = true;
      if (timer) clearTimeout(timer);
      timer = null;
      if (running) await running;
      const before = pending.size;
      while (pending.size > 0 && Date.now() < deadline) {
        if (await attempt()) break;
        await new Promise((r) => setTimeout(r, Math.min(500, Math.max(0, deadline - Date.now()))));
      }
      const left = [...pending.values()];
      spool(left);
      pending.clear();
      // What was replayed from a spool and is now in the spool again: its old file is no longer needed.
      for (const f of replaying.keys()) {
        try {
          unlinkSync(f);
        } catch {
          // already gone
        }
      }
      replaying.clear();
      return { landed: before - left.length, spooled: left.length };
    },
  };
}
