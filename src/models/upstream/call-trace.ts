import type { Deps } from '../../deps.js';
import { orgIdOf } from '../../ids.js';
import { providerName, traceModelCall } from '../../telemetry/model-call.js';
import type { PreparedCall } from '../metering/metered.js';
import type { ProviderLeg } from './types.js';

// The provider a model call uses, traced (CONTRACT §1): its client span `chat {MODEL_ID}` opens when the
// provider is asked and ends at the call's settle or void (settle.ts). With tracing off, `leg` itself.

export function tracedProvider(
  deps: Deps,
  call: PreparedCall,
  leg: ProviderLeg,
  runId?: string,
): ProviderLeg {
  return traceModelCall(
    call,
    () => ({
      requestModel: deps.models.modelId,
      provider: providerName(deps.config.model.upstreamUrl),
      orgId: orgIdOf(call.actor.orgKey),
      requestId: call.requestId,
      ...(runId ? { runId } : {}),
    }),
    leg,
  );
}
