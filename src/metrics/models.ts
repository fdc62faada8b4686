import { creditsDebited, modelCallDuration, modelCalls, modelFirstByte } from './registry.js';

// Model-call metrics, recorded by the model path after the work they measure (src/models/metering/metered.ts,
// src/models/front-ends/chat.ts): a settled or voided call, its credits, the first byte relayed.

export function recordModelCall(outcome: string, milliseconds: number, debited: number): void {
  modelCalls.inc({ outcome });
  modelCallDuration.observe({ outcome }, milliseconds / 1000);
  if (debited > 0) creditsDebited.inc(debited);
}

export function recordFirstByte(milliseconds: number): void {
  modelFirstByte.observe(milliseconds / 1000);
}
