import type { ChatRequest } from '../../schema.js';
import type { ChatMessage, ToolCall, Usage } from '../../upstream/types.js';
import type { Block, ImageBlock, MessagesRequest } from './schema.js';

// The Messages API over the internal call, by translation: an Anthropic request
// becomes a chat completions request (system → the system message, tool_use blocks → an assistant's
// tool_calls, tool_result blocks → tool messages, tools' input_schema → function parameters), and the
// chat answer becomes an Anthropic message (text and tool_use content blocks, stop_reason, usage).

const imageUrl = (b: ImageBlock) =>
  b.source.type === 'url' ? b.source.url : `data:${b.source.media_type};base64,${b.source.data}`;

const textOf = (content: string | Block[] | undefined): string =>
  typeof content === 'string'
    ? content
    : (content ?? [])
        .map((b) => (b.type === 'text' ? b.text : ''))
        .filter(Boolean)
        .join('\n');

/** A user turn's text and image blocks as chat content: a string when all are text. */
function userContent(blocks: Block[]): ChatMessage['content'] {
  if (blocks.every((b) => b.type === 'text')) return textOf(blocks);
  return blocks.map((b) =>
    b.type === 'image'
      ? { type: 'image_url', image_url: { url: imageUrl(b) } }
      : { type: 'text', text: textOf([b]) },
  );
}

function chatMessages(r: MessagesRequest): ChatMessage[] {
  const out: ChatMessage[] = [];
  const system = textOf(r.system);
  if (system) out.push({ role: 'system', content: system });
  const lastUser = r.messages.findLastIndex((m) => m.role === 'user');
  for (const [i, m] of r.messages.entries()) {
    if (m.role === 'system') {
      // Shown until a later user turn exists, when the client asked so.
      if (m.clear_at === 'next_user_message' && lastUser > i) continue;
      out.push({ role: 'system', content: textOf(m.content) });
      continue;
    }
    if (typeof m.content === 'string') {
      out.push({ role: m.role, content: m.content });
      continue;
    }
    if (m.role === 'assistant') {
      const calls: ToolCall[] = m.content.flatMap((b) =>
        b.type === 'tool_use'
          ? [
              {
                id: b.id,
                type: 'function' as const,
                function: { name: b.name, arguments: JSON.stringify(b.input) },
              },
            ]
          : [],
      );
      const text = textOf(m.content);
      out.push(
        calls.length
          ? { role: 'assistant', content: text || null, tool_calls: calls }
          : { role: 'assistant', content: text },
      );
      continue;
    }
    // A user turn: its tool results first (chat wants them right after the assistant's calls), then the rest.
    for (const b of m.content) {
      if (b.type !== 'tool_result') continue;
      const text = textOf(b.content);
      out.push({ role: 'tool', tool_call_id: b.tool_use_id, content: b.is_error ? `[error] ${text}` : text });
    }
    const rest = m.content.filter((b) => b.type === 'text' || b.type === 'image');
    if (rest.length) out.push({ role: 'user', content: userContent(rest) });
  }
  return out;
}

/** The chat request the internal call makes. */
export function toChatRequest(r: MessagesRequest): ChatRequest {
  const choice = r.tool_choice;
  const request: Record<string, unknown> = {
    model: r.model,
    messages: chatMessages(r),
    max_tokens: r.max_tokens,
  };
  if (r.stream) request.stream = true;
  if (r.temperature != null) request.temperature = r.temperature;
  if (r.top_p != null) request.top_p = r.top_p;
  if (r.stop_sequences?.length) request.stop = r.stop_sequences;
  if (r.tools?.length) {
    request.tools = r.tools.map((t) => ({
      type: 'function',
      function: {
        name: t.name,
        ...(t.description ? { description: t.description } : {}),
        parameters: t.input_schema,
      },
    }));
  }
  if (choice) {
    request.tool_choice =
      choice.type === 'tool'
        ? { type: 'function', function: { name: choice.name } }
        : { auto: 'auto', any: 'required', none: 'none' }[choice.type];
    if ('disable_parallel_tool_use' in choice && choice.disable_parallel_tool_use)
      request.parallel_tool_calls = false;
  }
  return request as ChatRequest;
}

/** A chat finish reason as Anthropic's stop_reason. */
export function stopReason(finish: string | null): string {
  if (finish === 'length') return 'max_tokens';
  if (finish === 'tool_calls' || finish === 'function_call') return 'tool_use';
  if (finish === 'content_filter') return 'refusal';
  return 'end_turn';
}

/** Chat usage in Anthropic's words: prompt tokens read from the provider's cache are counted apart. */
export function messagesUsage(u: Usage) {
  const raw = (u.prompt_tokens_details as { cached_tokens?: unknown } | undefined)?.cached_tokens;
  const cached = typeof raw === 'number' && raw > 0 ? Math.min(raw, u.prompt_tokens) : 0;
  return {
    input_tokens: u.prompt_tokens - cached,
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: cached,
    output_tokens: u.completion_tokens,
  };
}

/** A tool call's arguments as a tool_use block's input: an object, whatever the provider wrote. */
export function toolInput(args: string): Record<string, unknown> {
  try {
    const v: unknown = JSON.parse(args || '{}');
    return v && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}
