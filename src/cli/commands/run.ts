import { expand } from '@inquirer/prompts';
import { realpath } from 'node:fs/promises';
import WebSocket from 'ws';
import { CliError, EXIT } from '../errors.js';
import { line, type IO } from '../io.js';
import { serverOrigin, unreachable } from '../server.js';
import { callWithCredential, errorFor, explainRefusal, MAX_BUSY_RETRIES, modelCredential } from '../api.js';
import { debitText, verifyOutcome } from '../outcome.js';
import { guardOf, KNOWN_TOOLS, READ_TOOLS, runTool, ToolRefused } from '../tools.js';
import { describeCall, type CallView } from '../approval.js';
import { inert, inertLine, jsonText } from '../inert.js';
import { spin, type Spinning } from '../spinner.js';

// `svc run [--agent NAME] [TASK]`: an agent run over the run WebSocket (docs/models.md, "The run
// WebSocket"). The server runs the model; this terminal runs the agent's tools, here, in the working
// directory, after asking (writes and commands) unless --yes. Ctrl-C sends `cancel`: the server ends the
// run and bills what it generated, nothing more.

export interface RunOptions {
  url?: string;
  agent?: string;
  yes?: boolean;
  allow?: string;
  json?: boolean;
  commandTimeout?: string;
  outputCap?: string;
}

interface Frame {
  type: string;
  [k: string]: unknown;
}

/** Frames that say nothing yet of the model's answer: the spinner goes on through them. */
const QUIET_FRAMES = new Set(['authenticated', 'run_started', 'pong']);

/** How long to wait for the server to confirm a cancel before closing anyway. */
const CANCEL_GRACE_MS = 5000;

export async function run(io: IO, task: string | undefined, opts: RunOptions): Promise<number> {
  const origin = serverOrigin(opts.url, io.env);
  if (!task?.trim())
    throw new CliError(EXIT.usage, 'No task given.', 'Run `svc run "what the agent should do"`.');
  if (opts.allow && opts.allow !== 'read') {
    throw new CliError(
      EXIT.usage,
      `--allow takes "read" (got "${opts.allow}").`,
      'Use --allow read, or --yes to approve everything.',
    );
  }
  const limits = {
    commandTimeoutSeconds: positive('--command-timeout', opts.commandTimeout ?? '60'),
    outputCapBytes: positive('--output-cap', opts.outputCap ?? String(64 * 1024)),
    signal: io.signal,
  };
  const agentName = opts.agent ?? 'default';
  const root = await realpath(process.cwd());
  let credential = await modelCredential(io, origin);

  // The catalog says which tools the agent has; a tool this client cannot run is refused before the run.
  const catalog = (await (
    await callWithCredential(io, origin, '/v1/agents', { method: 'GET' }, credential)
  ).json()) as { data: { name: string; tools: { name: string }[] }[] };
  const agent = catalog.data.find((a) => a.name === agentName);
  if (!agent) {
    throw new CliError(
      EXIT.usage,
      `No agent named "${inertLine(agentName)}".`,
      `Choose one of: ${catalog.data.map((a) => a.name).join(', ')}.`,
    );
  }
  credential = await modelCredential(io, origin); // refreshed by the call above if it had to be

  // What the person answered "always for this run" to: asked no more until the run ends. A read of a
  // likely secret is its own kind (`read_file:secret`), never covered by reads being free or by --yes.
  const alwaysAllowed = new Set<string>();
  const ask = async (name: string, view: CallView, secret?: string): Promise<boolean> => {
    const kind = secret ? `${name}:secret` : name;
    if (alwaysAllowed.has(kind)) return true;
    if (!secret && (opts.yes || READ_TOOLS.has(name))) return true;
    if (opts.allow === 'read' || !io.stdinIsTTY) return false;
    const answer = await expand(
      {
        message: secret
          ? `${view.question.slice(0, -1)}? It may hold secrets (${secret}); what it reads is sent to the model.`
          : view.question,
        default: 'n',
        expanded: true,
        choices: [
          { key: 'y', name: 'Yes, this once', value: 'yes' },
          { key: 'n', name: 'No', value: 'no' },
          {
            key: 'a',
            name: secret ? 'Always allow reading such files in this run' : `Always allow ${name} in this run`,
            value: 'always',
          },
        ],
      },
      { input: io.stdin, output: io.stderr, signal: io.signal },
    );
    if (answer === 'always') alwaysAllowed.add(kind);
    return answer !== 'no';
  };

  const c = io.color;
  const wsUrl = `${origin.replace(/^http/, 'ws')}/v1/runs/ws`;
  return new Promise<number>((resolve, reject) => {
    const ws = new WebSocket(wsUrl);
    let cancelling = false;
    let finished = false;
    // A spinner while the model thinks (after the start and after each tool result) and while a tool runs.
    let waiting: Spinning = { stop() {} };
    const waitFor = (text: string) => {
      waiting.stop();
      waiting = opts.json ? { stop() {} } : spin(io, text);
    };
    const send = (f: object) => {
      if (ws.readyState !== WebSocket.OPEN) return;
      ws.send(JSON.stringify(f));
      const type = (f as { type?: string }).type;
      if (type === 'start' || type === 'tool_result') waitFor('Waiting for the model…');
    };
    const finish = (fn: () => void) => {
      if (finished) return;
      finished = true;
      waiting.stop();
      io.signal.removeEventListener('abort', onAbort);
      ws.close();
      fn();
    };
    const onAbort = () => {
      if (cancelling) return;
      cancelling = true;
      waiting.stop();
      line(io.stderr, c.yellow('\nCancelling the run…'));
      send({ type: 'cancel' });
      setTimeout(() => finish(() => resolve(EXIT.interrupted)), CANCEL_GRACE_MS).unref();
    };
    io.signal.addEventListener('abort', onAbort, { once: true });

    ws.on('error', (err) =>
      finish(() =>
        reject((err as NodeJS.ErrnoException).code === 'ECONNREFUSED' ? unreachable(origin) : err),
      ),
    );
    ws.on('close', (code) => {
      if (finished) return;
      if (code === 4401) finish(() => reject(errorFor(origin, 401, {})));
      else
        finish(() =>
          reject(new CliError(EXIT.failure, 'The server closed the run’s connection.', 'Try again.')),
        );
    });
    const start = () =>
      send({ type: 'start', agent: agentName, messages: [{ role: 'user', content: task }] });
    let busyRetries = 0;
    ws.on('open', () => {
      send({
        type: 'auth',
        token: credential.token,
        ...(credential.org ? { organisation: credential.org } : {}),
      });
      start();
    });
    ws.on('message', (data) => {
      // ws's default binaryType hands a text frame over as one Buffer.
      const frame = JSON.parse((data as Buffer).toString('utf8')) as Frame;
      if (!QUIET_FRAMES.has(frame.type)) waiting.stop();
      if (opts.json) line(io.stdout, jsonText(frame));
      void handle(frame).catch((err: unknown) =>
        finish(() => reject(err instanceof Error ? err : new Error('the run failed', { cause: err }))),
      );
    });

    async function handle(frame: Frame) {
      switch (frame.type) {
        case 'assistant_message': {
          const content = (frame.message as { content?: string | null }).content;
          if (content && !opts.json) line(io.stdout, inert(content));
          return;
        }
        case 'tool_call':
          return answerToolCall(frame);
        case 'run_completed': {
          const outcome = await verifyOutcome(origin, String(frame.outcome), String(frame.run_id));
          if (!opts.json) {
            line(
              io.stderr,
              c.dim(
                `Run ${inertLine(frame.run_id)} finished (${inertLine(frame.stop_reason)}) in ${inertLine(frame.steps)} steps: ${debitText(outcome)}`,
              ),
            );
          }
          return finish(() => resolve(EXIT.ok));
        }
        case 'error': {
          // The run's lease is taken before anything runs, so a busy organization is refused before any
          // step: wait (svc's Retry-After for the cap is 1 s) and start again, a bounded number of times.
          if (frame.code === 'concurrency_limit' && busyRetries < MAX_BUSY_RETRIES && !cancelling) {
            busyRetries++;
            line(
              io.stderr,
              c.yellow(
                `Busy: too many calls in flight for this organization; retrying in 1 s (${busyRetries}/${MAX_BUSY_RETRIES})`,
              ),
            );
            setTimeout(start, 1000);
            return;
          }
          if (frame.code === 'cancelled') {
            line(io.stderr, 'Run cancelled. It is billed for what the model generated before the cancel.');
            return finish(() => resolve(EXIT.interrupted));
          }
          // Every 402 is exit 4 (docs/cli.md), said with what the account routes tell.
          if (PAYMENT_CODES.has(String(frame.code))) {
            const refused = await explainRefusal(io, origin, credential, { error: frame });
            return finish(() => reject(refused));
          }
          return finish(() => reject(runError(origin, frame)));
        }
        default:
          return;
      }
    }

    async function answerToolCall(frame: Frame) {
      const id = String(frame.tool_call_id);
      const name = String(frame.name);
      const raw = frame.arguments;
      let args: Record<string, unknown>;
      try {
        // The arguments as the model wrote them: JSON text (an already parsed object is taken as it is).
        args = raw
          ? (JSON.parse(typeof raw === 'string' ? raw : JSON.stringify(raw)) as Record<string, unknown>)
          : {};
      } catch {
        return send({
          type: 'tool_result',
          tool_call_id: id,
          status: 'error',
          result: 'arguments are not JSON',
        });
      }
      const view = await describeCall(root, name, args);
      if (!opts.json) {
        line(io.stderr, `${c.cyan('→')} ${view.heading}`);
        for (const l of view.block) line(io.stderr, c.dim(l));
      }
      if (!KNOWN_TOOLS.has(name) || !agent!.tools.some((t) => t.name === name)) {
        return send({
          type: 'tool_result',
          tool_call_id: id,
          status: 'error',
          result: `this client does not run the tool "${name}"`,
        });
      }
      const guard = await guardOf(root, name, args);
      if (guard.refused) {
        // Configuration that executes: refused without asking, --yes or not (src/cli/confine.ts).
        if (!opts.json) line(io.stderr, c.yellow(`  refused: ${inertLine(guard.refused)}`));
        return send({
          type: 'tool_result',
          tool_call_id: id,
          status: 'error',
          result: `refused: ${guard.refused}`,
        });
      }
      let allowed: boolean;
      try {
        allowed = await ask(name, view, guard.secret);
      } catch {
        // Ctrl-C at the prompt: the prompt holds the terminal in raw mode, so no SIGINT was raised; it
        // means the same, so cancel the run the same way.
        onAbort();
        return;
      }
      if (!allowed) {
        if (!opts.json)
          line(
            io.stderr,
            c.yellow(
              `  refused${
                io.stdinIsTTY || opts.allow
                  ? ''
                  : guard.secret
                    ? ' (it may hold secrets: only a person at a terminal can allow that)'
                    : ' (no terminal to ask; pass --yes to allow)'
              }`,
            ),
          );
        return send({
          type: 'tool_result',
          tool_call_id: id,
          status: 'error',
          result: 'the user did not allow this',
        });
      }
      try {
        waitFor(`Running ${inertLine(name)}…`);
        const result = await runTool(root, name, args, limits).finally(() => waiting.stop());
        if (!opts.json) line(io.stderr, c.dim(`  ${preview(result)}`));
        send({ type: 'tool_result', tool_call_id: id, status: 'ok', result });
      } catch (err) {
        const message = err instanceof ToolRefused ? `refused: ${err.message}` : (err as Error).message;
        if (!opts.json) line(io.stderr, c.yellow(`  ${inertLine(message)}`));
        send({ type: 'tool_result', tool_call_id: id, status: 'error', result: message });
      }
    }
  });
}

function positive(option: string, value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n <= 0) {
    throw new CliError(EXIT.usage, `${option} takes a positive whole number (got "${value}").`);
  }
  return n;
}

function preview(result: unknown): string {
  const text = typeof result === 'string' ? result : JSON.stringify(result);
  const first = text.split('\n')[0] ?? '';
  // A command's output or a file's text: whatever the tool produced, shown inert.
  const shown = inertLine(first);
  return shown.length > 100 ? `${shown.slice(0, 100)}…` : shown;
}

/** The codes of a 402 (CONTRACT §8: the allocation; docs/billing.md: a member's budget). */
const PAYMENT_CODES = new Set(['insufficient_credits', 'member_budget_exhausted']);

/** The run's error frame as a person-facing error, with the same wording as the HTTP answers. */
function runError(origin: string, frame: Frame): CliError {
  const code = String(frame.code);
  const status = PAYMENT_CODES.has(code)
    ? 402
    : code === 'viewer_cannot_spend' || code === 'not_a_member' || code === 'org_mismatch'
      ? 403
      : code === 'concurrency_limit' || code === 'rate_limit_exceeded'
        ? 429
        : code.endsWith('unavailable')
          ? 503
          : 500;
  if (status === 500)
    return new CliError(
      EXIT.failure,
      `The run ended with an error: ${String(frame.message)} (${code}).`,
      'Try again.',
      code,
    );
  return errorFor(origin, status, { error: { code, message: frame.message } });
}
