import type { Deps } from '../../deps.js';
import { AppError, databaseUnavailable, errorOf } from '../../http/errors.js';
import { MODEL_ERRORS } from '../errors.js';
import type { Lease } from './concurrency.js';

// A call's slot (CONTRACT §9): a chat call's is held before its hold is written, started as soon as its org
// is known (src/models/admission/admission.ts, Admission.lease); a run takes its own (src/runs/loop.ts).

export async function acquireLease(deps: Deps, orgKey: string, kind: 'chat' | 'run'): Promise<Lease> {
  // Self-fencing (src/models/slot/liveness.ts): a process whose heartbeat has not landed for a while may be
  // declared dead by its peers, who would then count its slots free; it admits nothing until it beats.
  if (deps.models.liveness.fenced()) throw databaseUnavailable();
  try {
    return await deps.models.limiter.acquire(orgKey, kind);
  } catch (err) {
    if (err instanceof AppError) throw err;
    deps.log.error({ err }, 'concurrency store unavailable');
    throw errorOf(MODEL_ERRORS, 'CONCURRENCY_UNAVAILABLE');
  }
}
