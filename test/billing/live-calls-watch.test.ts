import { describe, expect, it } from 'vitest';
import { clientDeleted, createRegistry } from '../../src/billing/live-calls.js';

// A model call's one signal (src/models/call.ts): ended by its client's deletion or by its lease taken
// back, whichever comes first, each with its own reason; a call that is over hears of neither.

describe('live calls: watch', () => {
  it('ends with the deletion, its reason the deletion', () => {
    const calls = createRegistry();
    const lease = new AbortController();
    const watched = calls.watch('org_a', lease.signal);
    expect(calls.endOrg('org_a')).toBe(1);
    expect(watched.signal.aborted).toBe(true);
    expect((watched.signal.reason as { code: string }).code).toBe(clientDeleted().code);
    lease.abort(new Error('revoked'));
    expect((watched.signal.reason as { code: string }).code).toBe(clientDeleted().code);
  });

  it('ends with the other signal, its reason that signal’s, and is no longer tracked once done', () => {
    const calls = createRegistry();
    const lease = new AbortController();
    const watched = calls.watch('org_a', lease.signal);
    const revoked = new Error('revoked');
    lease.abort(revoked);
    expect(watched.signal.reason).toBe(revoked);
    watched.done();
    expect(calls.size()).toBe(0);
  });

  it('is ended at once when the other signal fired before it was watched', () => {
    const calls = createRegistry();
    const revoked = new Error('revoked');
    const watched = calls.watch('org_a', AbortSignal.abort(revoked));
    expect(watched.signal.reason).toBe(revoked);
    watched.done();
  });

  it('after done, neither a deletion nor the other signal reaches it', () => {
    const calls = createRegistry();
    const lease = new AbortController();
    const watched = calls.watch('org_a', lease.signal);
    watched.done();
    expect(calls.endOrg('org_a')).toBe(0);
    lease.abort(new Error('revoked'));
    expect(watched.signal.aborted).toBe(false);
  });
});
