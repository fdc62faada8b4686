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
//
// A dead process's leases come back within seconds, as on PostgreSQL. Lease ids carry
// the process's tag (`<tag>.<random>`, src/models/slot/liveness.ts), and each process keeps a key
// `svc:process:<tag>` alive in Redis (set every quarter of PROCESS_DEAD_AFTER_MS, expiring after it; set
// again by each of its acquires). An acquire that finds the org at its cap first drops the leases whose
// process key is gone: a process silent for PROCESS_DEAD_AFTER_MS is dead. The lease TTL stays as the
// fallback for a lease without a tag. A process cut off from Redis alone for that long is declared dead
// while it lives, as on PostgreSQL; it stops admitting calls before that (src/models/slot/liveness.ts).

const ACQUIRE = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ARGV[4] ~= '' then redis.call('SET', 'svc:process:' .. ARGV[4], '1', 'PX', tonumber(ARGV[5])) end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then
  for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
    local dot = string.find(id, '.', 1, true)
    if dot and redis.call('EXISTS', 'svc:process:' .. string.sub(id, 1, dot - 1)) == 0 then
      redis.call('ZREM', KEYS[1], id)
    end
  end
  if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
end
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
const processKeyOf = (tag: string) => `svc:process:${tag}`;

export interface RedisLimiterOptions extends LimiterOptions {
  /** This process's tag (the prefix of its lease ids) and how long its silence takes to mean death. */
  process?: { tag: string; deadAfterMs: number };
}

export function createRedisLimiter(url: string, options: RedisLimiterOptions): ConcurrencyLimiter {
  const ttlMs = options.ttlMs ?? DEFAULT_LEASE_TTL_MS;
  const redis = new Redis(url, { maxRetriesPerRequest: 2, enableOfflineQueue: true, lazyConnect: false });
  redis.on('error', () => {
    // Reconnects by itself; a call made while it is down fails and is answered as 503 by the caller.
  });
  const book = leaseBook(Math.max(100, Math.floor(ttlMs / 3)), async (ids) => {
    await redis.eval(EXTEND, ids.length, ...ids.map((id) => keyOf(book.live.get(id) ?? '')), ttlMs, ...ids);
  });
  // This process's heartbeat in Redis: its key outlives a beat by three beats.
  const proc = options.process;
  const beat = () => {
    if (proc) void redis.set(processKeyOf(proc.tag), '1', 'PX', proc.deadAfterMs).catch(() => {});
  };
  beat();
  const beating = proc ? setInterval(beat, Math.max(100, Math.floor(proc.deadAfterMs / 4))) : null;
  beating?.unref();
  // Releases Redis did not take, retried until they land (the org of each kept beside it).
  const leaseOrg = new Map<string, string>();
  const retrier = releaseRetrier(async (ids) => {
    await Promise.all(ids.map((id) => redis.zrem(keyOf(leaseOrg.get(id) ?? ''), id)));
    for (const id of ids) leaseOrg.delete(id);
  });
  return {
    async acquire(orgKey, _kind) {
      const leaseId = (options.newLeaseId ?? newLeaseId)();
      const ok = await redis.eval(
        ACQUIRE,
        1,
        keyOf(orgKey),
        options.cap,
        ttlMs,
        leaseId,
        proc?.tag ?? '',
        proc?.deadAfterMs ?? 0,
      );
      if (ok !== 1) throw concurrencyLimited();
      return book.hand(orgKey, leaseId, async (id) => {
        await redis.zrem(keyOf(orgKey), id).catch(() => {
          leaseOrg.set(id, orgKey);
          retrier.failed([id]);
        });
      });
    },
    // Redis leases outlive a PostgreSQL partition (this process still beats in Redis, so no peer frees
    // its slots): nothing to take back.
    revoke() {},
    async close() {
      if (beating) clearInterval(beating);
      book.stop();
      retrier.stop();
      // Gone at once: whatever this process could not give back is free for the others' next acquire.
      if (proc) await redis.del(processKeyOf(proc.tag)).catch(() => {});
      redis.disconnect();
    },
  };
}
