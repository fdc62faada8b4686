import { newId } from '../../ids.js';
import type { NextHoldInput } from '../../billing/spend.js';

// Holds taken ahead (docs/models.md, "Holds taken ahead"). A model call may not start before its hold
// is committed (CONTRACT §8), and taking a hold is a write: the costliest step before a streamed call's
// first byte. So the statement that settles a call of an organization also takes that org's next hold
// (svc_settle_and_hold_next: no round trip of its own, and nothing left for the database to do once the
// call's last byte has left, when the org's next call may already be on its way): a real hold (a
// billing_holds row counted in the account's `held`, settled, voided and expired like any other), the
// size of the call just made with headroom. One call of the org claims it as its request arrives and
// adopts it as its own hold (its request id), with no write of its own, after the same live read of its
// caller as every call: a revoked token, a removed member or a viewer is refused before the spare is
// touched. The allocation never pays more than before: the spare
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
  /** Gives a hold back whole (src/billing/spend.ts voidHold). */
  giveBack(requestId: string): Promise<unknown>;
  /** A new request id for a spare (stamped with this process's tag: src/models/slot/liveness.ts). */
  newRequestId?: () => string;
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
  /**
   * Before a call of `orgKey` that could cost up to `callMax` settles: the hold its settle should take
   * for the org's next call, or null when none is wanted (one is waiting or on its way, or shutting
   * down). Every non-null answer must be followed by `landed`.
   */
  ahead(orgKey: string, callMax: number): NextHoldInput | null;
  /** What the settle that carried `next` held for it: tokens (0: not taken), or null when unknown (the settle failed). */
  landed(next: NextHoldInput, held: number | null): void;
  /** Gives the org's spare back now; true when there was one. */
  release(orgKey: string): Promise<boolean>;
  close(): Promise<void>;
}

interface Shelf {
  spare: SpareHold | null;
  since: number;
  /** A settle is taking the next spare; settles when it has landed. */
  coming: Promise<void> | null;
  /** A call has claimed what the shelf has or will have. */
  claimed: boolean;
}

export function createSpareHolds(deps: SpareHoldsDeps): SpareHolds {
  const idleMs = deps.idleMs ?? SPARE_IDLE_MS;
  const shelves = new Map<string, Shelf>();
  /** The shelves whose next spare a settle in flight is taking, by that spare's request id. */
  const landing = new Map<string, { shelf: Shelf; resolve: () => void }>();
  let sweeper: NodeJS.Timeout | null = null;
  let closed = false;

  const giveBack = (spare: SpareHold) =>
    deps.giveBack(spare.requestId).then(
      () => {},
      (err: unknown) => deps.onError?.(err), // unreleased, it expires with the hold TTL
    );

  function forget(orgKey: string, shelf: Shelf) {
    if (!shelf.spare && !shelf.coming && !shelf.claimed && shelves.get(orgKey) === shelf)
      shelves.delete(orgKey);
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

    ahead(orgKey, callMax) {
      const amount = Math.ceil(callMax * SPARE_HEADROOM);
      if (closed || amount <= 0) return null;
      const shelf = shelfOf(orgKey);
      if (shelf.coming || (shelf.spare && shelf.spare.amount >= amount)) return null;
      const smaller = shelf.spare;
      shelf.spare = null;
      if (smaller) void giveBack(smaller);
      const next = {
        requestId: (deps.newRequestId ?? (() => newId('req')))(),
        orgKey,
        amount,
        floor: SPARE_MARGIN * amount,
      };
      shelf.coming = new Promise<void>((resolve) => landing.set(next.requestId, { shelf, resolve }));
      return next;
    },

    landed(next, held) {
      const pending = landing.get(next.requestId);
      if (!pending) return;
      landing.delete(next.requestId);
      const { shelf, resolve } = pending;
      const spare = { requestId: next.requestId, amount: held ?? next.amount };
      // Unknown (the settle's answer was lost, so it may have committed): given back, else it would wait
      // out the hold TTL. Not taken (the balance under the margin, or short): the next call holds its own.
      if (held === null || (held > 0 && closed)) void giveBack(spare);
      else if (held > 0) shelve(shelf, spare);
      shelf.coming = null;
      forget(next.orgKey, shelf);
      resolve();
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
      await Promise.all(all.flatMap((s) => (s.coming ? [s.coming] : [])));
      await Promise.all(all.flatMap((s) => (s.spare ? [giveBack(s.spare)] : [])));
    },
  };
  return spares;
}
