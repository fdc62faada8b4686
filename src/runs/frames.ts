import { jsonNestsDeeperThan, MAX_JSON_DEPTH } from '../http/json-body.js';
import { z } from 'zod';
import { messageContent } from '../models/schema.js';

// Frames of the run WebSocket (interface document: Run WebSocket frames; CONTRACT §9). Every client
// frame is parsed here; anything else is answered with an `error` frame, never a crash.

const message = z.looseObject({
  role: z.enum(['system', 'developer', 'user', 'assistant', 'tool']),
  content: messageContent.optional(),
});

export const clientFrame = z.discriminatedUnion('type', [
  z.object({
    type: z.literal('auth'),
    token: z.string().min(1).max(4096),
    /** Same as the x-svc-organisation header (browsers cannot set headers on a WebSocket). */
    organisation: z.string().max(100).optional(),
  }),
  z.object({
    type: z.literal('start'),
    agent: z.string().min(1).max(64),
    messages: z.array(message).min(1).max(1000),
  }),
  z.object({
    type: z.literal('tool_result'),
    tool_call_id: z.string().min(1).max(256),
    status: z.string().min(1).max(32).default('ok'),
    result: z.unknown().optional(),
  }),
  /** Stops the running run; what was spent is billed (not in the document: an addition). */
  z.object({ type: z.literal('cancel') }),
  /** Application-level keep-alive for clients that cannot send WebSocket pings. */
  z.object({ type: z.literal('ping') }),
]);

export type ClientFrame = z.output<typeof clientFrame>;

export type ServerFrame =
  | { type: 'authenticated'; client_id: string }
  | { type: 'run_started'; run_id: string; agent: string }
  | {
      type: 'assistant_message';
      run_id: string;
      step: number;
      message: { role: 'assistant'; content: string | null; tool_calls?: unknown[] };
    }
  | { type: 'tool_call'; run_id: string; tool_call_id: string; name: string; arguments: string }
  | {
      type: 'run_completed';
      run_id: string;
      stop_reason: 'completed' | 'max_steps';
      steps: number;
      usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
      credits_debited: number;
      balance_credits: number;
      outcome: string;
    }
  | { type: 'error'; code: string; message: string; run_id?: string; [field: string]: unknown }
  | { type: 'pong' };

/** Close codes (RFC 6455 §7.4.2: 4000–4999 are the application's). */
export const CLOSE_UNAUTHENTICATED = 4401;
export const CLOSE_FORBIDDEN = 4403;

/** Parses a text frame; returns an error description instead of throwing. */
export function parseFrame(data: string): { frame: ClientFrame } | { error: string } {
  // Frames are JSON bodies too: nesting-limited before the parse (src/http/json-body.ts).
  if (jsonNestsDeeperThan(Buffer.from(data), MAX_JSON_DEPTH))
    return { error: `nested deeper than ${MAX_JSON_DEPTH} levels` };
  let raw: unknown;
  try {
    raw = JSON.parse(data);
  } catch {
    return { error: 'frames are JSON objects' };
  }
  const parsed = clientFrame.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    return { error: `${issue.path.join('.') || 'frame'}: ${issue.message}` };
  }
  return { frame: parsed.data };
}
