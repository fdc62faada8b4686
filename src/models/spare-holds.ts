import { newId } from '../ids.js';

// Holds taken ahead (docs/models.md, "Holds taken ahead"). A model call may not start before its hold
// is committed (CONTRACT §8), and taking a hold is a write: the costliest step before a streamed call's
// first byte. So once a call of an organization has settled, this process takes that org's next hold at
// once, in the background: a real hold (a billing_holds row counted in the account's `held`, settled,
// voided and expired like any other), the size of the call just made with headroom. One call of the org
// claims it as its request arrives and adopts it as its own hold (its request id), with no write of its
// own, after the same live read of its caller as every call: a revoked token, a removed member or a
// viewer is refused before the spare is touched. The allocation never pays more than before: the spare
// is held, never debited, and a call settles its real cost against it as against a hold of its own.
//
// What a spare costs: its tokens are held while it waits, so they are not available to other holds or
// reclaims. Hence a spare is taken only while the org's balance is at least SPARE_MARGIN times its size,
// one per org per process, and given back after SPARE_IDLE_MS unused, when this process's own hold or
// reclaim for the org needs its tokens (release), and on shutdown. A crashed process's spares expire as
// its holds in flight do (DEFAULT_HOLD_TTL_SECONDS).

/** An org's spare is given back after this long unused. */
export const SPARE_IDLE_MS = 2_000;
/** A spare is taken only while the org's balance is at least this many times its size. */
export const SPARE_MARGIN = 10;
/**
 * A spare is this much larger than the call it follows: an agent's next call carries a longer history,
 * and a spare too small for it would cost that call a hold of its own after its read.
 */
export const SPARE_HEADROOM = 1.5;

export interface SpareHold {
  requestId: string;
  amount: number;
}

export interface SpareHoldsDeps {
  /** Takes a hold of exactly `amount` tokens for no user (src/billing/spend.ts reserve, batched). */
  hold(input: { orgKey: string; requestId: string; amount: number }): Promise<number>;
  /** Gives a hold back whole (src/billing/spend.ts voidHold). */
  giveBack(requestId: string): Promise<unknown>;
  idleMs?: number;
  onError?(err: unknown): void;
}

export interface SpareHolds {
  /**
   * Claims the org's spare (waiting, or on its way) for one call, at once: the calls of a busy org do
   * not queue for one spare; all but the claimant get null and hold their own. Settles to the spare, or
   * null when the one on its way was not taken. An unused spare goes back with putBack.
   */
  claim(orgKey: string): Promise<SpareHold | null> | null;
  /** A claimed spare the call did not use (too small, caller refused): back on the shelf, or given back. */
  putBack(orgKey: string, spare: SpareHold): void;
  /** A claimed spare for a call that could cost up to `atLeast`: the spare if it covers that, else put back and null. */
  fit(orgKey: string, spare: SpareHold | null, atLeast: number): SpareHold | null;
  /** After a call of `orgKey` that could cost up to `callMax` settled at `balance`: keep a hold ready for the next. */
  restock(orgKey: string, callMax: number, balance: number): void;
  /** Gives the org's spare back now; true when there was one. */
  release(orgKey: string): Promise<boolean>;
  close(): Promise<void>;
}

interface Shelf {
  spare: SpareHold | null;
  since: number;
  coming: Promise<void> | null;
  /** A call has claimed what the shelf has or will have. */
  claimed: boolean;
}

export function createSpareHolds(deps: SpareHoldsDeps): SpareHolds {
  const idleMs = deps.idleMs ?? SPARE_IDLE_MS;
  const shelves = new Map<string, Shelf>();
  let sweeper: NodeJS.Timeout | null = null;
  let closed = false;

  const giveBack = (spare: SpareHold) =>
    deps.giveBack(spare.requestId).then(
      () => {},
      (err: unknown) => deps.onError?.(err), // unreleased, it expires with the hold TTL
    );

  function forget(orgKey: string, shelf: Shelf) {
    if (!shelf.spare && !shelf.coming && !shelf.claimed && shelves.get(orgKey) === shelf) shelves.delete(orgKey);
  }

  function shelfOf(orgKey: string): Shelf {
    let shelf = shelves.get(orgKey);
    if (!shelf) shelves.set(orgKey, (shelf = { spare: null, since: 0, coming: null, claimed: false }));
    return shelf;
  }

  function shelve(shelf: Shelf, spare: SpareHold) {
    shelf.spare = spare;
    shelf.since = Date.now();
    sweeper ??= setInterval(sweep, Math.max(50, idleMs / 2)).unref();
  }

  function sweep() {
    const cutoff = Date.now() - idleMs;
    for (const [orgKey, shelf] of shelves) {
      if (shelf.spare && !shelf.claimed && shelf.since <= cutoff) {
        void giveBack(shelf.spare);
        shelf.spare = null;
        forget(orgKey, shelf);
      }
    }
    if (shelves.size === 0 && sweeper) {
      clearInterval(sweeper);
      sweeper = null;
    }
  }

  const spares: SpareHolds = {
    claim(orgKey) {
      const shelf = shelves.get(orgKey);
      if (!shelf || shelf.claimed || (!shelf.spare && !shelf.coming)) return null;
      shelf.claimed = true;
      return (async () => {
        if (shelf.coming) await shelf.coming;
        const spare = shelf.spare;
        shelf.spare = null;
        shelf.claimed = false;
        forget(orgKey, shelf);
        return spare;
      })();
    },

    putBack(orgKey, spare) {
      const shelf = shelves.get(orgKey);
      if (closed || shelf?.spare || shelf?.coming) void giveBack(spare);
      else shelve(shelfOf(orgKey), spare);
    },

    fit(orgKey, spare, atLeast) {
      if (!spare || spare.amount >= atLeast) return spare;
      // Too small for this call, which holds its own; the spare waits for a smaller one.
      spares.putBack(orgKey, spare);
      return null;
    },

    restock(orgKey, callMax, balance) {
      const amount = Math.ceil(callMax * SPARE_HEADROOM);
      if (closed || amount <= 0 || balance < SPARE_MARGIN * amount) return;
      const shelf = shelfOf(orgKey);
      if (shelf.coming || (shelf.spare && shelf.spare.amount >= amount)) return;
      const smaller = shelf.spare;
      shelf.spare = null;
      if (smaller) void giveBack(smaller);
      const requestId = newId('req');
      shelf.coming = deps
        .hold({ orgKey, requestId, amount })
        .then(
          (held) => {
            if (closed) return giveBack({ requestId, amount: held });
            shelve(shelf, { requestId, amount: held });
          },
          () => {
            // Not held (the allocation ran short, or the database is away): the next call holds its own.
          },
        )
        .finally(() => {
          shelf.coming = null;
          forget(orgKey, shelf);
        });
    },

    async release(orgKey) {
      const shelf = shelves.get(orgKey);
      if (!shelf) return false;
      if (shelf.coming) await shelf.coming;
      const spare = shelf.spare;
      if (!spare) return false;
      shelf.spare = null;
      forget(orgKey, shelf);
      await giveBack(spare);
      return true;
    },

    async close() {
      closed = true;
      if (sweeper) clearInterval(sweeper);
      sweeper = null;
      const all = [...shelves.values()];
      shelves.clear();
      await Promise.all(all.map((s) => s.coming));
      await Promise.all(all.map((s) => (s.spare ? giveBack(s.spare) : undefined)));
    },
  };
  return spares;
}
