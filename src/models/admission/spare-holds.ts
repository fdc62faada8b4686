import { newId } from '../../ids.js';
import type { NextHoldInput } from '../../billing/spend.js';

// Holds taken ahead (docs/models.md, "Holds taken ahead"). A model call may not start before its hold
// is committed (CONTRACT §8), and taking a hold is a write: the costliest step before a streamed call's
// first byte. So the statement that settles a call of an organization also takes that org's next hold
// (svc_settle_holds: no round trip of its own, and nothing left for the database to do once the
// call's last byte has left, when the org's next call may already be on its way): a real hold (a
// billing_holds row counted in the account's `held`, settled, voided and expired like any other), the
// size of the call just made with headroom. One call of the org claims it as its request arrives and
// adopts it as its own hold (its request id), with no write of its own, after the same live read of its
// caller as every call: a revoked token, a removed member or a viewer is refused before the spare is
// touched. The allocation never pays more than before: the spare
// is held, never debited, and a call settles its real cost against it as against a hold of its own.
//
// What a spare costs: its tokens are held while it waits, so they are not available to other holds or
// reclaims. Hence an org's k-th spare is taken only while its balance is at least SPARE_MARGIN times k
// spares; each is given back after SPARE_IDLE_MS unused, and all of them when this process's own hold or
// reclaim for the org needs their tokens (release), and on shutdown. How many an org may have follows its
// calls: SPARES_PER_ORG to start with, one more for each call that found none (up to
// SPARES_MAX_PER_ORG), one fewer for each given back unused. A crashed process's spares expire as its
// holds in flight do (DEFAULT_HOLD_TTL_SECONDS).

/** A spare is given back after this long unused. */
export const SPARE_IDLE_MS = 2_000;
/** An org's k-th spare is taken only while its balance is at least this many times k spares. */
export const SPARE_MARGIN = 10;
/**
 * A spare is this much larger than the call it follows: an agent's next call carries a longer history,
 * and a spare too small for it would cost that call a hold of its own after its read.
 */
export const SPARE_HEADROOM = 1.5;
/**
 * Spares an org may have waiting or on their way in one process to start with: enough that calls arriving
 * close together, or while a settle waits on its commit, each find one instead of writing a hold of their
 * own on the org's account, the row every settle of the org locks.
 */
export const SPARES_PER_ORG = 4;
/**
 * The most an org may have in one process: a busy org's depth grows to the number of its calls in flight
 * here, so that each finds a spare, up to this.
 */
export const SPARES_MAX_PER_ORG = 64;

export interface SpareHold {
  requestId: string;
  amount: number;
}

export interface SpareHoldsDeps {
  /** Gives holds back whole, together (src/billing/spend.ts voidHolds). */
  giveBack(requestIds: string[]): Promise<unknown>;
  /** A new request id for a spare (stamped with this process's tag: src/models/slot/liveness.ts). */
  newRequestId?: () => string;
  idleMs?: number;
  /** Spares per org to start with (SPARES_PER_ORG). */
  perOrg?: number;
  /** The most spares per org (SPARES_MAX_PER_ORG). */
  maxPerOrg?: number;
  onError?(err: unknown): void;
}

export interface SpareHolds {
  /**
   * Claims one of the org's spares for one call, at once: one waiting, else one on its way that no other
   * call claimed; the calls of a busy org beyond those get null and hold their own. Settles to the spare,
   * or null when the one on its way was not taken. An unused spare goes back with putBack.
   */
  claim(orgKey: string): Promise<SpareHold | null> | null;
  /** A claimed spare the call did not use (too small, caller refused): back on the shelf, or given back. */
  putBack(orgKey: string, spare: SpareHold): void;
  /** A claimed spare for a call that could cost up to `atLeast`: the spare if it covers that, else put back and null. */
  fit(orgKey: string, spare: SpareHold | null, atLeast: number): SpareHold | null;
  /**
   * Before a call of `orgKey` that could cost up to `callMax` settles: the hold its settle should take
   * for the org's next call, or null when none is wanted (the org's spares waiting or on their way are
   * at their most and none is smaller than this call's, or shutting down). Every non-null answer must
   * be followed by `landed`.
   */
  ahead(orgKey: string, callMax: number): NextHoldInput | null;
  /** What the settle that carried `next` held for it: tokens (0: not taken), or null when unknown (the settle failed). */
  landed(next: NextHoldInput, held: number | null): void;
  /** Gives the org's spares back now, once those on their way have landed; true when there was one. */
  release(orgKey: string): Promise<boolean>;
  close(): Promise<void>;
}

interface Shelf {
  /** Spares waiting for a call, oldest first, each with when it was shelved. */
  spares: { spare: SpareHold; since: number }[];
  /** Settles in flight taking a next spare for this org. */
  coming: number;
  /** Calls that claimed a spare on its way, first come first served as the spares land. */
  waiting: ((spare: SpareHold | null) => void)[];
  /**
   * Spares the org may have waiting or on their way: one more per call that found none, one fewer per
   * spare given back idle.
   */
  depth: number;
}

export function createSpareHolds(deps: SpareHoldsDeps): SpareHolds {
  const idleMs = deps.idleMs ?? SPARE_IDLE_MS;
  const firstDepth = deps.perOrg ?? SPARES_PER_ORG;
  const maxDepth = Math.max(firstDepth, deps.maxPerOrg ?? SPARES_MAX_PER_ORG);
  const shelves = new Map<string, Shelf>();
  /** The shelves whose next spare a settle in flight is taking, by that spare's request id. */
  const landing = new Map<string, { shelf: Shelf; resolve: () => void; landed: Promise<void> }>();
  let sweeper: NodeJS.Timeout | null = null;
  let closed = false;

  /** One statement for all of `given`: an org's idle spares go back together, not one by one. */
  const giveBack = (...given: SpareHold[]) =>
    deps.giveBack(given.map((s) => s.requestId)).then(
      () => {},
      (err: unknown) => deps.onError?.(err), // unreleased, they expire with the hold TTL
    );

  /** Spares waiting or on their way, claimed or not: what the org holds ahead on this process. */
  const count = (shelf: Shelf) => shelf.spares.length + shelf.coming;

  function forget(orgKey: string, shelf: Shelf) {
    if (!shelf.spares.length && !shelf.coming && !shelf.waiting.length && shelves.get(orgKey) === shelf)
      shelves.delete(orgKey);
  }

  function shelfOf(orgKey: string): Shelf {
    let shelf = shelves.get(orgKey);
    if (!shelf) shelves.set(orgKey, (shelf = { spares: [], coming: 0, waiting: [], depth: firstDepth }));
    return shelf;
  }

  function shelve(shelf: Shelf, spare: SpareHold) {
    shelf.spares.push({ spare, since: Date.now() });
    sweeper ??= setInterval(sweep, Math.max(50, idleMs / 2)).unref();
  }

  function sweep() {
    const cutoff = Date.now() - idleMs;
    for (const [orgKey, shelf] of shelves) {
      const idle = shelf.spares.filter((s) => s.since <= cutoff);
      if (!idle.length) continue;
      shelf.spares = shelf.spares.filter((s) => s.since > cutoff);
      shelf.depth = Math.max(firstDepth, shelf.depth - idle.length);
      void giveBack(...idle.map((s) => s.spare));
      forget(orgKey, shelf);
    }
    if (shelves.size === 0 && sweeper) {
      clearInterval(sweeper);
      sweeper = null;
    }
  }

  const spares: SpareHolds = {
    claim(orgKey) {
      const shelf = shelves.get(orgKey);
      if (!shelf) return null;
      // The newest waiting spare: the oldest are the first to go back idle.
      const waiting = shelf.spares.pop();
      if (waiting) {
        forget(orgKey, shelf);
        return Promise.resolve(waiting.spare);
      }
      if (shelf.coming <= shelf.waiting.length) {
        // This call holds its own: the org has more calls in flight here than spares.
        shelf.depth = Math.min(maxDepth, shelf.depth + 1);
        return null;
      }
      return new Promise<SpareHold | null>((resolve) => shelf.waiting.push(resolve));
    },

    putBack(orgKey, spare) {
      const shelf = shelves.get(orgKey);
      const waiter = shelf?.waiting.shift();
      if (waiter) waiter(spare);
      else if (closed || (shelf && count(shelf) >= shelf.depth)) void giveBack(spare);
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
      // A waiting spare too small for calls like this one makes room for one that fits.
      const small = shelf.spares.findIndex((s) => s.spare.amount < amount);
      if (count(shelf) >= shelf.depth) {
        if (small < 0) return null;
        void giveBack(shelf.spares.splice(small, 1)[0]!.spare);
      }
      const next = {
        requestId: (deps.newRequestId ?? (() => newId('req')))(),
        orgKey,
        amount,
        // The k-th spare of an org is taken only while its balance covers SPARE_MARGIN times k spares.
        floor: SPARE_MARGIN * amount * (count(shelf) + 1),
      };
      shelf.coming++;
      let resolve!: () => void;
      const landed = new Promise<void>((r) => (resolve = r));
      landing.set(next.requestId, { shelf, resolve, landed });
      return next;
    },

    landed(next, held) {
      const pending = landing.get(next.requestId);
      if (!pending) return;
      landing.delete(next.requestId);
      const { shelf, resolve } = pending;
      shelf.coming--;
      const spare = { requestId: next.requestId, amount: held ?? next.amount };
      const waiter = shelf.waiting.shift();
      // Unknown (the settle's answer was lost, so it may have committed): given back, else it would wait
      // out the hold TTL. Not taken (the balance under the margin, or short): the next call holds its own.
      if (held === null || (held > 0 && closed)) {
        void giveBack(spare);
        waiter?.(null);
      } else if (held > 0) {
        if (waiter) waiter(spare);
        else shelve(shelf, spare);
      } else waiter?.(null);
      forget(next.orgKey, shelf);
      resolve();
    },

    async release(orgKey) {
      const shelf = shelves.get(orgKey);
      if (!shelf) return false;
      await Promise.all([...landing.values()].filter((l) => l.shelf === shelf).map((l) => l.landed));
      const given = shelf.spares.splice(0);
      forget(orgKey, shelf);
      if (given.length) await giveBack(...given.map((s) => s.spare));
      return given.length > 0;
    },

    async close() {
      closed = true;
      if (sweeper) clearInterval(sweeper);
      sweeper = null;
      await Promise.all([...landing.values()].map((l) => l.landed));
      const all = [...shelves.values()];
      shelves.clear();
      const given = all.flatMap((s) => s.spares.splice(0).map(({ spare }) => spare));
      if (given.length) await giveBack(...given);
    },
  };
  return spares;
}
