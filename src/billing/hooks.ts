import type { Config } from '../config.js';
import type { Db } from '../db/client.js';
import type { Keys } from '../crypto/server-secrets.js';
import type { Logger } from '../log.js';
import { expireStaleHolds } from './spend.js';

export { grantTrial, reclaimDeletedOrg } from './service.js';

/** How often the sweep releases holds left by crashed processes (reserve also releases them per org). */
export const HOLD_SWEEP_INTERVAL_MS = 60_000;

export interface BillingParts {
  config: Config;
  db: Db;
  keys: Keys;
  log: Logger;
  onClose(fn: () => Promise<void> | void): void;
}

export interface Billing {
  /** Stops nothing by itself: deps.close() stops the sweep. */
  readonly sweepIntervalMs: number;
}

/**
 * Billing's part of the composition root (src/deps.ts): the stale-hold sweep runs until deps.close().
 * The trial and the reclaim of a deleted client run as deps.hooks inside those events' transactions
 * (CONTRACT §5, §8).
 */
export function createBilling(parts: BillingParts): Billing {
  let running = false;
  const timer = setInterval(() => {
    if (running) return;
    running = true;
    expireStaleHolds(parts.db)
      .then((released) => {
        if (released > 0) parts.log.info({ released }, 'released expired credit holds');
      })
      .catch((err: unknown) => parts.log.warn({ err }, 'hold sweep failed'))
      .finally(() => {
        running = false;
      });
  }, HOLD_SWEEP_INTERVAL_MS);
  timer.unref();
  parts.onClose(() => clearInterval(timer));
  return { sweepIntervalMs: HOLD_SWEEP_INTERVAL_MS };
}
