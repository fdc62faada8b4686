import type { Redis } from 'ioredis';
import { randomToken } from '../ids.js';
import { WINDOW_MS, type RollingWindows, type WindowAdmission, type WindowCount } from './rolling-window.js';

// The rolling windows in Redis (REDIS_URL): a window is a sorted set whose members are
// `<entry id>:<amount>`, scored by the time they were admitted (Redis's clock, one for every process).
// One Lua script decides a call against all its windows and adds it to all or none: Redis runs a script
// alone, so two processes never both take the last of a window. The same rules as on PostgreSQL
// (src/db/custom/rate-windows.sql): an entry counts for WINDOW_MS from its admission. Beside each window,
// `<key>:sum` keeps what its entries add up to, changed with them, so an admission reads one number; a
// missing sum (expired a moment before its log) is added up again from the log.

const ADMIT = `
local function amountOf(member) return tonumber(string.match(member, ':(%d+)$')) end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[1])
local id = ARGV[2]
local n = #KEYS
local used, reset, retry = {}, {}, {}
local fits = true
for i = 1, n do
  local key = KEYS[i]
  local limit = tonumber(ARGV[1 + 2 * i])
  local amount = tonumber(ARGV[2 + 2 * i])
  local total = key .. ':sum'
  local gone = 0
  for _, member in ipairs(redis.call('ZRANGEBYSCORE', key, '-inf', now - window)) do
    gone = gone + amountOf(member)
  end
  if gone > 0 then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
    redis.call('DECRBY', total, gone)
  end
  local sum = tonumber(redis.call('GET', total) or '-1')
  if redis.call('ZCARD', key) == 0 then
    redis.call('DEL', total)
    sum = 0
  elseif sum < 0 then
    -- The total is missing (it expired a moment before its log): added up once from the log.
    sum = 0
    for _, member in ipairs(redis.call('ZRANGE', key, 0, -1)) do sum = sum + amountOf(member) end
    redis.call('SET', total, sum, 'PX', window + 1000)
  end
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  local newest = last[2] and tonumber(last[2]) or nil
  used[i] = sum
  reset[i] = newest and math.max(0, newest + window - now) or 0
  if amount > limit then
    retry[i] = -1
    fits = false
  elseif sum + amount <= limit then
    retry[i] = 0
  else
    fits = false
    local freed = 0
    local entries = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
    for j = 1, #entries, 2 do
      freed = freed + amountOf(entries[j])
      if sum - freed + amount <= limit then
        retry[i] = math.max(1, tonumber(entries[j + 1]) + window - now)
        break
      end
    end
  end
end
if fits then
  for i = 1, n do
    local amount = tonumber(ARGV[2 + 2 * i])
    redis.call('ZADD', KEYS[i], now, id .. ':' .. amount)
    redis.call('INCRBY', KEYS[i] .. ':sum', amount)
    redis.call('PEXPIRE', KEYS[i], window + 1000)
    redis.call('PEXPIRE', KEYS[i] .. ':sum', window + 1000)
    used[i] = used[i] + amount
    reset[i] = window
  end
end
local out = { fits and 1 or 0 }
for i = 1, n do
  out[#out + 1] = used[i]
  out[#out + 1] = reset[i]
  out[#out + 1] = retry[i]
end
return out`;

// An entry's amount is part of its member: a correction replaces the member, at its score, if it is
// still in the window.
const CORRECT = `
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[1], score, ARGV[2])
if redis.call('EXISTS', KEYS[1] .. ':sum') == 1 then redis.call('INCRBY', KEYS[1] .. ':sum', ARGV[3]) end
return 1`;

const storeKey = (key: string) => `svc:rate:${key}`;

export function createRedisWindows(redis: Redis): RollingWindows {
  return {
    async admit(counts: WindowCount[]): Promise<WindowAdmission> {
      const id = randomToken(12);
      const out = (await redis.eval(
        ADMIT,
        counts.length,
        ...counts.map((c) => storeKey(c.key)),
        WINDOW_MS,
        id,
        ...counts.flatMap((c) => [c.limit, c.amount]),
      )) as number[];
      const admitted = out[0] === 1;
      return {
        admitted,
        states: counts.map((_, i) => {
          const retry = Number(out[3 + 3 * i]);
          return {
            used: Number(out[1 + 3 * i]),
            resetMs: Number(out[2 + 3 * i]),
            retryMs: retry < 0 ? null : retry,
          };
        }),
        entries: admitted ? counts.map((c) => ({ key: c.key, id, amount: c.amount })) : [],
      };
    },
    async correct(entry, amount) {
      await redis.eval(
        CORRECT,
        1,
        storeKey(entry.key),
        `${entry.id}:${entry.amount}`,
        `${entry.id}:${amount}`,
        amount - entry.amount,
      );
    },
    close() {},
  };
}
