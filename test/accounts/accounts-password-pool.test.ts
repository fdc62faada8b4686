import { lookup } from 'node:dns/promises';
import { describe, expect, it } from 'vitest';
import { hashPassword, PASSWORD_HASHES_AT_ONCE } from '../../src/accounts/password.js';

// Password hashes run on libuv's thread pool, which the process's short jobs share (a host name's
// lookup when a connection to the model provider opens, among them). They are let through
// PASSWORD_HASHES_AT_ONCE at a time, so a burst of sign-ins never queues those jobs behind it.

describe('password hashing and the thread pool', () => {
  it(`a lookup asked for during a burst of password hashes is not queued behind them (${PASSWORD_HASHES_AT_ONCE} at once)`, async () => {
    let hashed = 0;
    const burst = Array.from({ length: 8 }, (_, i) => hashPassword(`burst-${i}-A1!`).then(() => hashed++));
    // One turn of the event loop: the hashes let through are on the pool's queue before the lookup.
    await new Promise((resolve) => setImmediate(resolve));
    const found = await lookup('localhost');
    // libuv's four threads serve jobs in arrival order: were all eight hashes in its queue, the lookup
    // would start only once four of them had finished. It finished before that.
    expect(found.address).toBeTruthy();
    expect(hashed).toBeLessThan(4);
    await Promise.all(burst);
    expect(hashed).toBe(8);
  });
});
