import { Redis } from 'ioredis';
import {
  concurrencyLimited,
  DEFAULT_LEASE_TTL_MS,
  leaseBook,
  newLeaseId,
  releaseRetrier,
  type ConcurrencyLimiter,
  type LimiterOptions,
} from './concurrency.js';

// The same cap on Redis when REDIS_URL is set (CONTRACT §1, §9): one sorted set per organization whose
// members are lease ids scored by their expiry (Redis server time). The check-and-add is one Lua script,
// so it is atomic across every process using the Redis.

const ACQUIRE = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) * 2)
return 1`;

const EXTEND = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 1, #KEYS do
  redis.call('ZADD', KEYS[i], 'XX', now + tonumber(ARGV[1]), ARGV[i + 1])
  redis.call('PEXPIRE', KEYS[i], tonumber(ARGV[1]) * 2)
end
return 1`;

const keyOf = (orgKey: string) => `svc:concurrency:${orgKey}`;

export function createRedisLimiter(url: string, options: LimiterOptions): ConcurrencyLimiter {
  const ttlMs = options.ttlMs ?? DEFAULT_LEASE_TTL_MS;
  const redis = new Redis(url, { maxRetriesPerRequest: 2, enableOfflineQueue: true, lazyConnect: false });
  redis.on('error', () => {
    // Reconnects by itself; a call made while it is down fails and is answered as 503 by the caller.
  });
  const book = leaseBook(Math.max(100, Math.floor(ttlMs / 3)), async (ids) => {
    await redis.eval(EXTEND, ids.length, ...ids.map((id) => keyOf(book.live.get(id) ?? '')), ttlMs, ...ids);
  });
  // Releases Redis did not take, retried until they land (the org of each kept beside it).
  const leaseOrg = new Map<string, string>();
  const retrier = releaseRetrier(async (ids) => {
    await Promise.all(ids.map((id) => redis.zrem(keyOf(leaseOrg.get(id) ?? ''), id)));
    for (const id of ids) leaseOrg.delete(id);
  });
  return {
    async acquire(orgKey, _kind) {
      const leaseId = newLeaseId();
      const ok = await redis.eval(ACQUIRE, 1, keyOf(orgKey), options.cap, ttlMs, leaseId);
      if (ok !== 1) throw concurrencyLimited();
      return book.hand(orgKey, leaseId, async (id) => {
        await redis.zrem(keyOf(orgKey), id).catch(() => {
          leaseOrg.set(id, orgKey);
          retrier.failed([id]);
        });
      });
    },
    close() {
      book.stop();
      retrier.stop();
      redis.disconnect();
      return Promise.resolve();
    },
  };
}
