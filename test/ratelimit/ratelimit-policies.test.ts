import { describe, expect, it } from 'vitest';
import { MAX_WINDOW_SECONDS, POLICIES } from '../../src/ratelimit/limits.js';

// The memory store (the embedded database's limits, and every store's fallback) ends an entry with a
// Node timer; a window longer than a timer can wait would end at once and never limit anything.
describe('rate-limit policies', () => {
  it.each(Object.entries(POLICIES))('%s: its window fits a Node timer', (_name, policy) => {
    expect(policy.durationSeconds).toBeGreaterThan(0);
    expect(policy.durationSeconds).toBeLessThanOrEqual(MAX_WINDOW_SECONDS);
  });
});
