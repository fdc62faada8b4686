// One interface for every model provider (STYLE: optional outside parts get a real default with the same
// interface): the OpenAI-compatible HTTP upstream, or the built-in offline `svc-local` model.

/** An OpenAI chat-completions request body, already forced and capped by the proxy. */
export type ChatBody = Record<string, unknown> & {
  model: string;
  messages: ChatMessage[];
  stream?: boolean;
  tools?: ToolSpec[];
};

export interface ChatMessage {
  role: string;
  content?: unknown;
  tool_calls?: ToolCall[];
  tool_call_id?: string;
  name?: string;
  [k: string]: unknown;
}

export interface ToolSpec {
  type: string;
  function?: { name: string; description?: string; parameters?: Record<string, unknown> };
  [k: string]: unknown;
}

export interface ToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  [k: string]: unknown;
}

export interface ChatCompletion {
  id: string;
  object: 'chat.completion';
  created: number;
  model: string;
  choices: {
    index: number;
    message: { role: 'assistant'; content: string | null; tool_calls?: ToolCall[]; [k: string]: unknown };
    finish_reason: string | null;
    [k: string]: unknown;
  }[];
  usage?: Usage;
  [k: string]: unknown;
}

export interface ChunkDelta {
  role?: string;
  content?: string | null;
  tool_calls?: {
    index: number;
    id?: string;
    type?: string;
    function?: { name?: string; arguments?: string };
  }[];
  [k: string]: unknown;
}

export interface ChatChunk {
  id: string;
  object: 'chat.completion.chunk';
  created: number;
  model: string;
  choices: { index: number; delta: ChunkDelta; finish_reason: string | null; [k: string]: unknown }[];
  usage?: Usage | null;
  [k: string]: unknown;
}

/**
 * A provider's own Responses API (MODEL_UPSTREAM_API=responses; src/models/front-ends/responses/passthrough.ts).
 * Each answer comes as the chat view the call meters and settles by (responses-view.ts), the provider's
 * own object or event kept beside it in `native` for the front-end to relay.
 */
export interface NativeResponses {
  complete(body: Record<string, unknown>, signal: AbortSignal): Promise<ChatCompletion>;
  stream(body: Record<string, unknown>, signal: AbortSignal): AsyncIterable<ChatChunk>;
}

/** The provider side of a call: what the call asks, given the body it prepared (model forced, limit capped). */
export type ProviderLeg = Pick<Upstream, 'complete' | 'stream'>;

export interface Upstream {
  readonly kind: 'local' | 'openai-compatible';
  /** Set when the provider speaks the Responses API and POST /v1/responses passes through to it. */
  readonly responses?: NativeResponses;
  /** A non-streaming call. Throws AppError (already in the OpenAI error vocabulary) on failure. */
  complete(body: ChatBody, signal: AbortSignal): Promise<ChatCompletion>;
  /** A streaming call; the body asks for usage (stream_options.include_usage) so the last chunk has it. */
  stream(body: ChatBody, signal: AbortSignal): AsyncIterable<ChatChunk>;
  /** Open connections to the provider, in use and idle (kept alive for the next call); none for svc-local. */
  connections?(): UpstreamConnections;
  close(): Promise<void>;
}

export interface UpstreamConnections {
  busy: number;
  idle: number;
}
