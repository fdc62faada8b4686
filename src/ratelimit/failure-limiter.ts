import { createHmac } from 'node:crypto';
import { RateLimiterRes, type RateLimiterAbstract } from 'rate-limiter-flexible';
import { rateLimited } from '../http/errors.js';

// Failures are limited per identifier whatever the address (CONTRACT §1): login failures per e-mail,
// wrong 2FA codes, reset requests per e-mail, wrong device user codes per user.
//
// Semantics, the same for every policy: a policy allows `points` failures per `duration` window.
// Once that many are recorded, check() refuses with 429 RATE_LIMITED and Retry-After until the window
// ends. So with 10 per 15 min, attempts 1–10 get their normal answer and the 11th gets 429.
// Call check() before the attempt and fail() after a wrong one; fail() itself throws only when a
// failure goes beyond the budget (two racing attempts that both passed check()).

export interface FailureLimiter {
  /** Throws 429 RATE_LIMITED (with Retry-After) while the key is blocked. */
  check(key: string): Promise<void>;
  /** Records one failure; throws 429 when it goes beyond the limit. */
  fail(key: string): Promise<void>;
  /** Forgets the key's failures (after a success). */
  reset(key: string): Promise<void>;
}

export interface Policy {
  /** Names the policy in the store (keys of different policies never collide). */
  name: string;
  points: number;
  durationSeconds: number;
}

/**
 * Keys are HMACed before they reach the store, so the shared table or Redis holds no e-mail
 * addresses and a key of any length fits the store's varchar(255).
 */
export const storeKey = (hmacKey: Buffer, key: string): string =>
  createHmac('sha256', hmacKey).update(key).digest('base64url');

export function createFailureLimiter(limiter: RateLimiterAbstract, hmacKey: Buffer): FailureLimiter {
  const points = limiter.points;
  return {
    async check(key) {
      const res = await limiter.get(storeKey(hmacKey, key));
      if (res && res.consumedPoints >= points) throw rateLimited(res.msBeforeNext / 1000);
    },
    async fail(key) {
      try {
        await limiter.consume(storeKey(hmacKey, key), 1);
      } catch (rejection) {
        if (rejection instanceof RateLimiterRes) throw rateLimited(rejection.msBeforeNext / 1000);
        throw rejection;
      }
    },
    async reset(key) {
      await limiter.delete(storeKey(hmacKey, key));
    },
  };
}
