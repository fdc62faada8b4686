import { randomBytes } from 'node:crypto';
import { countPrompt, contentText, textPieces } from './local-words.js';
import { structuredAnswer, type ResponseFormat } from './local-structured.js';
import type {
  ChatBody,
  ChatChunk,
  ChatCompletion,
  ChatMessage,
  ToolCall,
  ToolSpec,
  Upstream,
  Usage,
} from './types.js';

// The built-in offline model `svc-local` (CONTRACT §9): used when no MODEL_UPSTREAM_URL is configured,
// so chat, streaming, tool calls and runs work on a fresh machine. Deterministic: the same request gives
// the same text, tool call and token counts (its tokenizer is tokens.ts: one word per token).
//
// Behaviour: when the request offers tools (and tool_choice allows), and the last message is the user's,
// it calls the tool that best fits the user's words with arguments filled from the tool's JSON Schema.
// After a tool result it answers with text about that result. Otherwise it answers with text, as JSON when
// the request's `response_format` asks for JSON (local-structured.ts).

const nowUnix = () => Math.floor(Date.now() / 1000);
const newId = (prefix: string) => `${prefix}${randomBytes(12).toString('base64url')}`;

interface Plan {
  text: string | null;
  toolCall: ToolCall | null;
  finish: 'stop' | 'length' | 'tool_calls';
  usage: Usage;
  pieces: string[];
}

const INTENTS: [RegExp, string[]][] = [
  [/\b(write|create|save)\b/i, ['write_file']],
  [/\b(run|execute|command|shell)\b/i, ['run_command']],
  [/\b(read|open|show|cat)\b/i, ['read_file']],
  [/\b(list|ls|director(y|ies)|folder|files)\b/i, ['list_directory']],
];

function functionTools(tools: ToolSpec[] | undefined) {
  return (tools ?? []).filter((t) => t.type === 'function' && t.function?.name).map((t) => t.function!);
}

function pickTool(body: ChatBody, userText: string) {
  const tools = functionTools(body.tools);
  if (!tools.length) return null;
  const choice = body.tool_choice;
  if (choice === 'none') return null;
  if (choice && typeof choice === 'object') {
    const name = (choice as { function?: { name?: string } }).function?.name;
    return tools.find((t) => t.name === name) ?? null;
  }
  for (const [re, names] of INTENTS) {
    if (!re.test(userText)) continue;
    const hit = tools.find((t) => names.includes(t.name));
    if (hit) return hit;
  }
  return tools[0]!;
}

/** Plausible arguments from a JSON Schema, by property name and type. */
function argumentsFor(
  parameters: Record<string, unknown> | undefined,
  userText: string,
): Record<string, unknown> {
  const props = (parameters?.properties ?? {}) as Record<
    string,
    { type?: string; enum?: unknown[]; default?: unknown }
  >;
  const required = Array.isArray(parameters?.required)
    ? (parameters.required as string[])
    : Object.keys(props);
  const pathInText = /(?:^|\s)((?:\.{0,2}\/)?[\w.-]+(?:\/[\w.-]+)*\.[A-Za-z0-9]+)\b/.exec(userText)?.[1];
  const quoted = /`([^`]+)`/.exec(userText)?.[1];
  const out: Record<string, unknown> = {};
  for (const name of required) {
    const spec = props[name] ?? {};
    if (spec.default !== undefined) out[name] = spec.default;
    else if (spec.enum?.length) out[name] = spec.enum[0];
    else if (spec.type === 'integer' || spec.type === 'number') out[name] = 1;
    else if (spec.type === 'boolean') out[name] = false;
    else if (spec.type === 'array') out[name] = [];
    else if (spec.type === 'object') out[name] = {};
    else if (/path|file|dir/i.test(name)) out[name] = pathInText ?? '.';
    else if (/command|cmd/i.test(name)) out[name] = quoted ?? 'ls';
    else if (/content|text|body/i.test(name)) out[name] = 'Hello from svc-local.\n';
    else out[name] = quoted ?? 'example';
  }
  return out;
}

function lastOf(messages: ChatMessage[], role: string) {
  for (let i = messages.length - 1; i >= 0; i--) if (messages[i]!.role === role) return messages[i]!;
  return undefined;
}

function plan(body: ChatBody): Plan {
  const messages = body.messages;
  const last = messages[messages.length - 1];
  const userText = contentText(lastOf(messages, 'user')?.content).trim();
  const promptTokens = countPrompt(messages, body.tools);
  const limit = Number(body.max_completion_tokens ?? body.max_tokens ?? Infinity);
  const usage = (completion: number): Usage => ({
    prompt_tokens: promptTokens,
    completion_tokens: completion,
    total_tokens: promptTokens + completion,
  });

  if (last?.role === 'user') {
    const tool = pickTool(body, userText);
    if (tool) {
      const args = JSON.stringify(argumentsFor(tool.parameters, userText));
      const cost = 2 + textPieces(tool.name).length + textPieces(args.replace(/[{}",:]/g, ' ')).length;
      if (cost <= limit) {
        const id = `call_${randomBytes(9).toString('base64url')}`;
        return {
          text: null,
          toolCall: { id, type: 'function', function: { name: tool.name, arguments: args } },
          finish: 'tool_calls',
          usage: usage(cost),
          pieces: [],
        };
      }
    }
  }
  let text: string;
  if (last?.role === 'tool') {
    const result = contentText(last.content).replace(/\s+/g, ' ').trim();
    const call = messages.flatMap((m) => m.tool_calls ?? []).find((c) => c.id === last.tool_call_id);
    text = `The ${call?.function.name ?? 'tool'} call returned: ${result.slice(0, 200) || '(nothing)'}. Done.`;
  } else {
    text = userText
      ? `This is svc-local, the built-in offline model. You said: ${userText.slice(0, 200)}`
      : 'This is svc-local, the built-in offline model.';
  }
  text = structuredAnswer(body.response_format as ResponseFormat | null | undefined, text) ?? text;
  let pieces = textPieces(text);
  let finish: Plan['finish'] = 'stop';
  if (pieces.length > limit) {
    pieces = pieces.slice(0, Math.max(0, limit));
    finish = 'length';
  }
  return { text: pieces.join(''), toolCall: null, finish, usage: usage(pieces.length), pieces };
}

/**
 * `n` choices (OpenAI's `n`; the schema bounds it): a deterministic model gives n equal answers, each
 * tool call with its own id; the prompt is counted once and the completion once per choice.
 */
function choicesOf(body: ChatBody, p: Plan) {
  const n = Math.max(1, Math.floor(Number(body.n ?? 1)));
  const calls = Array.from({ length: n }, (_, i) =>
    p.toolCall && i > 0 ? { ...p.toolCall, id: `call_${randomBytes(9).toString('base64url')}` } : p.toolCall,
  );
  const completion = p.usage.completion_tokens * n;
  const usage: Usage = {
    prompt_tokens: p.usage.prompt_tokens,
    completion_tokens: completion,
    total_tokens: p.usage.prompt_tokens + completion,
  };
  return { n, calls, usage };
}

export function createLocalUpstream(modelId: string): Upstream {
  return {
    kind: 'local',
    // eslint-disable-next-line @typescript-eslint/require-await -- Upstream.complete is async: a throw in plan() must reject
    async complete(body) {
      const p = plan(body);
      const { calls, usage } = choicesOf(body, p);
      const completion: ChatCompletion = {
        id: newId('chatcmpl-'),
        object: 'chat.completion',
        created: nowUnix(),
        model: modelId,
        choices: calls.map((call, index) => ({
          index,
          message: {
            role: 'assistant' as const,
            content: p.text,
            ...(call ? { tool_calls: [call] } : {}),
            refusal: null,
          },
          finish_reason: p.finish,
          logprobs: null,
        })),
        usage,
      };
      return completion;
    },
    async *stream(body, signal) {
      const p = plan(body);
      const { calls, usage } = choicesOf(body, p);
      const id = newId('chatcmpl-');
      const created = nowUnix();
      const chunk = (
        index: number,
        delta: ChatChunk['choices'][0]['delta'],
        finish: string | null = null,
      ): ChatChunk => ({
        id,
        object: 'chat.completion.chunk',
        created,
        model: modelId,
        choices: [{ index, delta, finish_reason: finish, logprobs: null }],
      });
      for (const [i, call] of calls.entries()) {
        yield chunk(i, { role: 'assistant', content: call ? null : '' });
        if (call) {
          yield chunk(i, {
            tool_calls: [
              {
                index: 0,
                id: call.id,
                type: 'function',
                function: { name: call.function.name, arguments: '' },
              },
            ],
          });
          yield chunk(i, { tool_calls: [{ index: 0, function: { arguments: call.function.arguments } }] });
        }
      }
      for (const piece of p.pieces) {
        // Yield to the event loop between pieces so an abandoned stream stops where it was left.
        await new Promise<void>((resolve) => setImmediate(resolve));
        if (signal.aborted) return;
        for (let i = 0; i < calls.length; i++) yield chunk(i, { content: piece });
      }
      for (let i = 0; i < calls.length; i++) yield chunk(i, {}, p.finish);
      const include = (body.stream_options as { include_usage?: boolean } | undefined)?.include_usage;
      if (include) yield { id, object: 'chat.completion.chunk', created, model: modelId, choices: [], usage };
    },
    async close() {},
  };
}
