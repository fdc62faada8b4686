import { input } from '@inquirer/prompts';
import { text as readAll } from 'node:stream/consumers';
import { CliError, EXIT } from '../errors.js';
import { line, type IO } from '../io.js';
import { serverOrigin } from '../server.js';
import { callWithCredential, modelCredential } from '../api.js';
import { debitText, verifyOutcome, type Outcome } from '../outcome.js';
import { readSse } from '../sse.js';
import { inert, inertLine, InertStream, jsonText } from '../inert.js';
import { spin } from '../spinner.js';

// `svc chat [PROMPT]`: one question (the argument, or stdin when it is not a terminal), or a conversation
// when a person is at the terminal. Answers stream as they arrive (stdout); after each turn the tokens
// debited, from the x-svc-outcome JWS verified against the JWKS (stderr, so stdout is the answer alone).

export interface ChatOptions {
  url?: string;
  json?: boolean;
  stream?: boolean;
  system?: string;
}

type Message = { role: 'system' | 'user' | 'assistant'; content: string };

export async function chat(io: IO, prompt: string | undefined, opts: ChatOptions): Promise<number> {
  const origin = serverOrigin(opts.url, io.env);
  const messages: Message[] = opts.system ? [{ role: 'system', content: opts.system }] : [];
  let question = prompt ?? (io.stdinIsTTY ? undefined : (await readAll(io.stdin)).trim());
  if (question === '')
    throw new CliError(EXIT.usage, 'Nothing to ask: the prompt is empty.', 'Run `svc chat "your question"`.');
  const interactive = question === undefined;
  if (interactive && opts.json) {
    throw new CliError(
      EXIT.usage,
      '--json needs a prompt (an argument or stdin).',
      'Run `svc chat --json "…"`.',
    );
  }
  if (interactive) line(io.stderr, io.color.dim('Chatting with svc. An empty line, Ctrl-D or Ctrl-C ends.'));
  for (;;) {
    if (interactive) {
      try {
        question = await input({ message: 'You' }, { input: io.stdin, output: io.stderr, signal: io.signal });
      } catch {
        return EXIT.ok; // Ctrl-C / Ctrl-D at the prompt ends the conversation, not an error
      }
      if (!question.trim()) return EXIT.ok;
    }
    messages.push({ role: 'user', content: question! });
    const { answer, outcome, response } = await turn(io, origin, messages, opts);
    messages.push({ role: 'assistant', content: answer });
    if (opts.json) line(io.stdout, jsonText({ ...response, svc_outcome: outcome }));
    else showDebit(io, outcome);
    if (!interactive) return EXIT.ok;
  }
}

export function showDebit(io: IO, o: Outcome): void {
  line(io.stderr, io.color.dim(`${debitText(o)} (${inertLine(o.request_id)})`));
}

async function turn(io: IO, origin: string, messages: Message[], opts: ChatOptions) {
  const stream = opts.stream !== false && !opts.json;
  const body = {
    model: 'default',
    messages,
    ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}),
  };
  // A spinner until the first token (or the whole answer) arrives; on a terminal only.
  const waiting = spin(io, 'Waiting for the model…');
  const res = await callWithCredential(
    io,
    origin,
    '/v1/chat/completions',
    { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) },
    await modelCredential(io, origin),
  ).then(
    (r) => (stream ? r : (waiting.stop(), r)),
    (err: unknown) => {
      waiting.stop();
      throw err;
    },
  );
  const requestId = res.headers.get('x-svc-request-id');
  if (!stream) {
    const response = (await res.json()) as { choices: { message: { content: string | null } }[] };
    const answer = response.choices[0]?.message.content ?? '';
    if (!opts.json) line(io.stdout, inert(answer));
    const outcome = await verifyOutcome(origin, res.headers.get('x-svc-outcome') ?? '', requestId);
    return { answer, outcome, response };
  }
  let answer = '';
  let jws = '';
  // The model's text reaches the terminal inert, an escape sequence split across chunks included.
  const shown = new InertStream();
  try {
    for await (const event of readSse(res.body!)) {
      if (event.comment?.startsWith('x-svc-outcome '))
        jws = event.comment.slice('x-svc-outcome '.length).trim();
      if (!event.data || event.data === '[DONE]') continue;
      const chunk = JSON.parse(event.data) as {
        choices?: { delta?: { content?: string } }[];
        error?: { message?: string };
      };
      if (chunk.error)
        throw new CliError(
          EXIT.failure,
          `The model failed mid-answer: ${chunk.error.message ?? 'error'}.`,
          'Try again.',
        );
      const piece = chunk.choices?.[0]?.delta?.content ?? '';
      if (piece) waiting.stop();
      answer += piece;
      io.stdout.write(shown.push(piece));
    }
  } finally {
    waiting.stop();
  }
  line(io.stdout, shown.end());
  if (!jws) throw new CliError(EXIT.failure, 'The answer ended without its signed outcome.', 'Try again.');
  return { answer, outcome: await verifyOutcome(origin, jws, requestId), response: undefined };
}
