import type { ServerResponse } from 'node:http';
import type { Deps } from '../deps.js';
import { AppError, databaseUnavailable } from '../http/errors.js';
import type { Lease } from './concurrency.js';

// A chat call's slot (CONTRACT §9) is held before its hold is written: a call refused
// 429 `concurrency_limit` writes nothing to the ledger. Taking them one after the other would cost the
// first byte a round trip, so the lease is started as early as the org is known: as the request arrives
// for an `svc_` token this process has seen (chat-admission.ts), once the caller is read for the others
// (chat-credential.ts), in both cases while the body is still being read. The hold waits for it.
//
// Every lease taken for a request is given back when its response closes (a request refused before its
// route, a client gone), and by the route when the call ends; Lease.release is idempotent.

export async function acquireLease(deps: Deps, orgKey: string, kind: 'chat' | 'run'): Promise<Lease> {
  // Self-fencing (src/models/liveness.ts): a process whose heartbeat has not landed for a while may be
  // declared dead by its peers, who would then count its slots free; it admits nothing until it beats.
  if (deps.models.liveness.fenced()) throw databaseUnavailable();
  try {
    return await deps.models.limiter.acquire(orgKey, kind);
  } catch (err) {
    if (err instanceof AppError) throw err;
    deps.log.error({ err }, 'concurrency store unavailable');
    throw new AppError(
      503,
      'concurrency_unavailable',
      'the concurrency limiter cannot be reached; try again',
    );
  }
}

const LEASES = Symbol('svc.chatLeases');
type WithLeases = object & { [LEASES]?: Map<string, Promise<Lease>> };

const releaseWhenTaken = (lease: Promise<Lease>) =>
  void lease.then(
    (l) => l.release(),
    () => {},
  );

/**
 * The request's chat lease for `orgKey`: the one already started for it, else one started now. Safe to
 * call as soon as the org is known and again later (same promise); a 429 or 503 rejects it.
 */
export function chatLease(deps: Deps, req: object, res: ServerResponse, orgKey: string): Promise<Lease> {
  const holder = req as WithLeases;
  const leases: Map<string, Promise<Lease>> = (holder[LEASES] ??= new Map<string, Promise<Lease>>());
  const started = leases.get(orgKey);
  if (started) return started;
  const lease = acquireLease(deps, orgKey, 'chat');
  lease.catch(() => {}); // awaited by the route; a request that never gets there must not leave it unhandled
  leases.set(orgKey, lease);
  if (res.closed) releaseWhenTaken(lease);
  else res.once('close', () => releaseWhenTaken(lease));
  return lease;
}
