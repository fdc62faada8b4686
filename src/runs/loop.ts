import type { IncomingHttpHeaders } from 'node:http';
import type { Deps } from '../deps.js';
import { AppError } from '../http/errors.js';
import { newId } from '../ids.js';
import type { Actor } from '../models/admission/actor.js';
import { openAiTools, type Agent } from '../models/front-ends/agents.js';
import { signOutcome } from '../models/metering/settle.js';
import { acquireLease } from '../models/slot/lease.js';
import { prepareCall, type PreparedCall } from '../models/metering/metered.js';
import { balanceOf, settleOrKeep, voidCall } from '../models/metering/settle.js';
import { StreamMeter } from '../models/metering/stream-meter.js';
import { tracedProvider } from '../models/upstream/call-trace.js';
import { withSpan } from '../telemetry/spans.js';
import type { ChatMessage } from '../models/upstream/types.js';
import type { ServerFrame } from './frames.js';

// One agent run (CONTRACT §9): model call → assistant_message → one tool_call per call → wait for each
// tool_result → next call, at most RUN_MAX_STEPS model calls. Every model call is reserved and settled
// exactly like a chat call (one `usage` transaction each). The run holds one concurrency lease for its
// whole life. Aborting (socket dropped, cancel) stops the provider and bills what was generated.

export const TOOL_RESULT_TIMEOUT_MS = 120_000;

export interface RunIO {
  send(frame: ServerFrame): void;
  /** Resolves with the client's tool_result for `toolCallId`; rejects when the run is aborted. */
  toolResult(toolCallId: string, timeoutMs: number): Promise<{ status: string; result: unknown }>;
}

export interface RunInput {
  runId: string;
  agent: Agent;
  messages: ChatMessage[];
  /** Re-checks the credential and the live membership before each model call (Authentication 5). */
  recheck(): Promise<Actor>;
  signal: AbortSignal;
  toolTimeoutMs?: number;
  /** The upgrade request's headers: its `traceparent`, when it has one, is the run span's parent. */
  traceHeaders?: IncomingHttpHeaders;
}

export class RunAborted extends Error {}

const resultText = (status: string, result: unknown) => {
  const text = typeof result === 'string' ? result : result === undefined ? '' : JSON.stringify(result);
  return status === 'ok' ? text : `[${status}] ${text}`;
};

/** A run is a span of its own (CONTRACT §1), continuing the upgrade request's W3C trace context. */
export function runAgent(deps: Deps, input: RunInput, io: RunIO): Promise<void> {
  const attributes = {
    'gen_ai.operation.name': 'invoke_agent',
    'gen_ai.agent.name': input.agent.name,
    'svc.run_id': input.runId,
  };
  const options = { kind: 'server' as const, attributes, parentHeaders: input.traceHeaders };
  return withSpan(`invoke_agent ${input.agent.name}`, options, () => runSteps(deps, input, io));
}

async function runSteps(deps: Deps, input: RunInput, io: RunIO): Promise<void> {
  const { runId, agent, signal } = input;
  let actor = await input.recheck();
  const lease = await acquireLease(deps, actor.orgKey, 'run');
  const totals = { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 };
  let debited = 0;
  let balance: number | null = null;
  try {
    io.send({ type: 'run_started', run_id: runId, agent: agent.name });
    const messages: ChatMessage[] = [
      ...(agent.instructions ? [{ role: 'system', content: agent.instructions }] : []),
      ...input.messages,
    ];
    const tools = openAiTools(agent);
    for (let step = 1; step <= deps.models.runMaxSteps; step++) {
      if (signal.aborted) throw new RunAborted();
      actor = await input.recheck();
      const call = await prepareCall(
        deps,
        actor,
        { model: deps.models.modelId, messages, ...(tools.length ? { tools } : {}) },
        true,
      );
      const meter = new StreamMeter(deps.models.modelId);
      try {
        const provider = tracedProvider(deps, call, deps.models.upstream, runId);
        for await (const chunk of provider.stream(call.body, signal)) meter.observe(chunk, true);
      } catch (err) {
        if (signal.aborted) {
          // Dropped socket, cancel or a deleted client mid-call: the provider was stopped; the prompt and
          // what was delivered are billed (CONTRACT §9), counted with the tokenizer when usage never came.
          await settleAborted(call, meter);
          throw new RunAborted();
        }
        // A provider failing mid-stream: billed for what it delivered, nothing when nothing came (CONTRACT §8).
        if (meter.delivered) await settleAborted(call, meter);
        else await voidCall(deps, call);
        throw err;
      }
      if (signal.aborted) {
        await settleAborted(call, meter);
        throw new RunAborted();
      }
      const { usage } = await meter.finalUsage(call);
      // A settle kept for later (the database did not answer) counts once it lands, not in this run's totals.
      const outcome = await settleOrKeep(deps, call, usage, { note: `run ${runId} step ${step}`, runId });
      totals.prompt_tokens += usage.prompt_tokens;
      totals.completion_tokens += usage.completion_tokens;
      totals.total_tokens += usage.prompt_tokens + usage.completion_tokens;
      debited += outcome?.creditsDebited ?? 0;
      balance = outcome?.balanceCredits ?? balance;

      const toolCalls = meter.toolCalls();
      const message = {
        role: 'assistant' as const,
        content: meter.content || null,
        ...(toolCalls.length ? { tool_calls: toolCalls } : {}),
      };
      io.send({ type: 'assistant_message', run_id: runId, step, message });
      messages.push(message);
      if (toolCalls.length === 0) {
        return await complete('completed', step);
      }
      for (const tc of toolCalls) {
        io.send({
          type: 'tool_call',
          run_id: runId,
          tool_call_id: tc.id,
          name: tc.function.name,
          arguments: tc.function.arguments,
        });
      }
      const results = await Promise.all(
        toolCalls.map((tc) => io.toolResult(tc.id, input.toolTimeoutMs ?? TOOL_RESULT_TIMEOUT_MS)),
      );
      toolCalls.forEach((tc, i) =>
        messages.push({
          role: 'tool',
          tool_call_id: tc.id,
          content: resultText(results[i]!.status, results[i]!.result),
        }),
      );
    }
    return await complete('max_steps', deps.models.runMaxSteps);
  } finally {
    await lease.release();
  }

  async function settleAborted(call: PreparedCall, meter: StreamMeter) {
    const { usage } = await meter.finalUsage(call);
    await settleOrKeep(deps, call, usage, { note: `run ${runId} aborted`, outcome: 'aborted', runId }).catch(
      (err: unknown) => deps.log.error({ err, requestId: call.requestId }, 'run settle refused'),
    );
  }

  async function complete(stopReason: 'completed' | 'max_steps', steps: number) {
    const balanceCredits = balance ?? (await balanceOf(deps, actor.orgKey));
    const outcome = await signOutcome(deps, actor, {
      requestId: runId,
      creditsDebited: debited,
      balanceCredits,
    });
    io.send({
      type: 'run_completed',
      run_id: runId,
      stop_reason: stopReason,
      steps,
      usage: totals,
      credits_debited: debited,
      balance_credits: balanceCredits,
      outcome,
    });
  }
}

export const newRunId = () => newId('run');

/** An error frame for whatever ended a run. */
export function errorFrame(err: unknown, runId?: string): ServerFrame {
  if (err instanceof AppError)
    return {
      type: 'error',
      code: err.code.toLowerCase(),
      message: err.message,
      // What the HTTP answer adds to the error object (a 402's needed_credits), the same in a frame.
      ...err.extra.fields,
      ...(runId ? { run_id: runId } : {}),
    };
  return { type: 'error', code: 'internal', message: 'internal error', ...(runId ? { run_id: runId } : {}) };
}
