import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Deps } from '../deps.js';
import type { Auth } from '../auth/principal.js';
import { AppError, errorOf, COMMON_ERRORS } from '../http/errors.js';
import { MODEL_ERRORS } from './errors.js';
import { sendJson } from '../http/error-middleware.js';
import { actorOf, type Actor } from './admission/actor.js';
import type { Admission, ModelHttpRequest } from './admission/admission.js';
import { admitChat, type Intake } from './admission/chat-admission.js';
import type { Lease } from './slot/concurrency.js';
import { prepareCall, type PreparedCall } from './metering/metered.js';
import { rateLimitHeaders, refusalOf } from '../ratelimit/model-limits.js';
import { OUTCOME_HEADER } from './metering/outcome.js';
import type { ChatRequest } from './schema.js';
import { balanceOf, settleOrKeep, signOutcome, voidCall, type CallOutcome } from './metering/settle.js';
import { countedUsage, deliveredTextOf, StreamMeter } from './metering/stream-meter.js';
import type { ChatChunk, ChatCompletion, ProviderLeg, Usage } from './upstream/types.js';
import { recordFirstByte } from '../metrics/models.js';
import { tracedProvider } from './upstream/call-trace.js';

// The one model call behind every front-end: POST /v1/chat/completions (front-ends/chat.ts),
// POST /v1/responses (front-ends/responses/) and POST /v1/messages (front-ends/messages/) each turn their
// body into a chat completions request (their Intake) and the provider's answer into their own wire
// format (their CallWriter). Everything else happens here, once, in this order (CONTRACT §8–§9), each
// stage in its own folder:
//
//   entry.ts, routes.ts (the node-level fast entry and Express's mounting, from one route table) →
//   admission/ (who acts) → slot/ (the concurrency lease) → metering/ (the hold, then the settle) →
//   upstream/ (the provider, or the front-end's own leg: FrontEnd.provider) → the signed outcome
//   (metering/outcome.ts).
//
// The outcome of a stream: its debit is only known at the end, after the headers left. It goes (a) as an
// SSE comment line `: x-svc-outcome <jws>` just before the stream's last event (comments are ignored by
// every SSE client, the OpenAI and Anthropic SDKs included), and (b) as the HTTP trailer `x-svc-outcome`
// (declared in `Trailer`), for clients that read trailers. JSON answers carry it as a header.

const REQUEST_ID_HEADER = 'x-svc-request-id';

/** A front-end's wire format: what the call hands it, and what it gives back to send. */
export interface CallWriter {
  /** The JSON answer's body, from the provider's answer (model forced) and the usage it was billed for. */
  json(completion: ChatCompletion, usage: Usage): unknown;
  /** Text that opens a stream, sent with its first chunk ('' for none). */
  open(): string;
  /** One provider chunk (model forced, already counted) as the text to send ('' for nothing). */
  chunk(chunk: ChatChunk): string;
  /** The last text of a stream that ended, once settled (after the outcome comment, when there is one). */
  end(usage: Usage): string | Promise<string>;
  /** The last text of a stream that failed. */
  fail(err: AppError): string;
}

export interface FrontEnd {
  intake: Intake;
  /**
   * Who answers the call, given the body it prepared (model forced, output capped to the hold):
   * the configured provider's chat completions unless the front-end passes through to another API of it
   * (POST /v1/responses with MODEL_UPSTREAM_API=responses), answering in the same chat view.
   */
  provider?: ProviderLeg;
  /** The writer for this request, once it is admitted. */
  writer(request: ChatRequest, call: PreparedCall): CallWriter;
}

/** A 429 rate_limit_exceeded carries the refused window's headers in the front-end's vendor names. */
function withRateHeaders(res: ServerResponse, err: unknown, style: 'openai' | 'anthropic'): unknown {
  const refusal = refusalOf(err);
  if (refusal && !res.headersSent) {
    for (const [k, v] of Object.entries(rateLimitHeaders(refusal.others, style))) res.setHeader(k, v);
  }
  return err;
}

/** Nobody reads it: it keeps a call the client left out of the error log (nginx's 499 convention). */
const clientClosed = () => errorOf(MODEL_ERRORS, 'CLIENT_CLOSED_REQUEST');

/** One model call, from its admission to its last byte. Errors before the answer starts are thrown. */
export async function modelCall(
  deps: Deps,
  auth: Auth,
  admission: Admission,
  req: ModelHttpRequest,
  res: ServerResponse,
  frontEnd: FrontEnd,
): Promise<void> {
  const path = (req as { originalUrl?: string }).originalUrl ?? req.url ?? '';
  const rateStyle = path.startsWith('/v1/messages') ? 'anthropic' : 'openai';
  const { actor, request, held } = await admit(deps, auth, admission, req, frontEnd.intake).catch(
    (err: unknown) => {
      throw withRateHeaders(res, err, rateStyle);
    },
  );
  const stream = !!request.stream;
  // The slot first, then the hold: a 429 writes nothing. The lease was started as
  // soon as the caller was known (src/models/admission/admission.ts), so waiting for it here rarely costs a round trip.
  const lease = held?.lease ?? (await admission.lease(actor.orgKey));
  let call: PreparedCall;
  try {
    call = held?.call ?? (await prepareCall(deps, actor, request, stream));
  } catch (err) {
    await lease.release();
    throw withRateHeaders(res, err, rateStyle);
  }
  if (call.rate)
    for (const [k, v] of Object.entries(rateLimitHeaders(call.rate, rateStyle))) res.setHeader(k, v);
  // A client that left while its call was admitted: its 'close' has come and gone, so the steps below
  // would never hear of it (a stream would wait on a dead socket, a JSON call run unseen). Nothing was
  // sent and nothing is owed: the hold is voided, the slot given back.
  if (res.closed) {
    await voidCall(deps, call);
    await lease.release();
    return;
  }
  // The call's id, the outcome's request_id, on every answer from here on (JSON, stream or error).
  res.setHeader(REQUEST_ID_HEADER, call.requestId);
  const writer = frontEnd.writer(request, call);
  // The slot is free before the answer's last byte leaves: a client that has its whole answer may send its
  // next call at once and find the slot (release is idempotent; the finally covers the error paths).
  const freeSlot = () => lease.release();
  // Deleting the client ends the call (CONTRACT §8; src/billing/live-calls.ts): aborted with `client_deleted`.
  // Its lease taken back (self-fencing, src/models/slot/liveness.ts) ends it the same way, with 503.
  const watched = deps.billing.liveCalls.watch(actor.orgKey, lease.signal);
  try {
    const ended = watched.signal;
    const provider = tracedProvider(deps, call, frontEnd.provider ?? deps.models.upstream);
    if (stream) await streamCall(deps, provider, call, req, res, writer, freeSlot, ended);
    else await jsonCall(deps, provider, call, res, writer, freeSlot, ended);
  } finally {
    watched.done();
    await lease.release();
  }
}

/**
 * Who acts, and the internal request. An `svc_` token alone: its read and the call's hold in one
 * statement, or the spare claimed as it arrived (chat-admission.ts). The general way: the caller was read
 * before the body (admission.ts), then the body is taken in.
 */
async function admit(
  deps: Deps,
  auth: Auth,
  admission: Admission,
  req: ModelHttpRequest,
  intake: Intake,
): Promise<{ actor: Actor; request: ChatRequest; held?: { lease: Lease; call: PreparedCall } }> {
  const admitted = await admitChat(deps, admission, req, intake);
  if (admitted) return { actor: admitted.actor, request: admitted.request, held: admitted };
  const actor = admission.caller ?? (await actorOf(deps, auth, req, { spend: true }));
  return { actor, request: await intake.full(req.body, actor) };
}

/** A call that failed before delivering anything: its hold voided, the error thrown with a 0-debit outcome. */
async function voidAndThrow(deps: Deps, call: PreparedCall, err: unknown): Promise<never> {
  await voidCall(deps, call);
  if (err instanceof AppError) {
    const outcome = await outcomeAfterVoid(deps, call);
    if (outcome) err.extra.headers = { ...err.extra.headers, [OUTCOME_HEADER]: outcome };
  }
  throw err;
}

async function outcomeAfterVoid(deps: Deps, call: PreparedCall): Promise<string | null> {
  try {
    const balance = await balanceOf(deps, call.actor.orgKey);
    return await signOutcome(deps, call.actor, {
      requestId: call.requestId,
      creditsDebited: 0,
      balanceCredits: balance,
    });
  } catch {
    return null;
  }
}

/**
 * A settled call's signed outcome, or null when it cannot be signed now: a process that has not read its
 * signing keys yet needs the database for them, and an outage may come between the settle and the
 * signature. The call was delivered and billed, so its answer still goes out (CONTRACT §8,
 * item 3), without the outcome, as when its settle is pending. Seen in faults-database: a JSON call
 * billed while its client got 503.
 */
async function settledOutcome(deps: Deps, call: PreparedCall, outcome: CallOutcome): Promise<string | null> {
  try {
    return await signOutcome(deps, call.actor, outcome);
  } catch (err) {
    deps.log.warn({ err, requestId: call.requestId }, 'outcome not signed; answered without it');
    return null;
  }
}

/**
 * A call the caller or svc ended after its request went to the provider, before any usage came back
 * (CONTRACT §9): the provider read the prompt, so it is billed — the prompt and whatever output was
 * delivered, counted with the tokenizer. Never throws (the caller is gone, or already answered).
 */
async function settleEnded(deps: Deps, call: PreparedCall, usage: Usage, note: string): Promise<void> {
  await settleOrKeep(deps, call, usage, { note, outcome: 'aborted' }).catch((err: unknown) =>
    deps.log.error({ err, requestId: call.requestId }, `settle refused (${note})`),
  );
}

async function jsonCall(
  deps: Deps,
  provider: ProviderLeg,
  call: PreparedCall,
  res: ServerResponse,
  writer: CallWriter,
  freeSlot: () => Promise<void>,
  ended: AbortSignal,
) {
  // A caller who leaves does not end the call (CONTRACT §9; docs/decisions, "JSON calls are completed
  // after the caller leaves"): the provider does the work either way, so its answer is awaited (within
  // the provider timeouts) and settled at its real usage, the slot held until then. Only a deletion of
  // the client or the slot taken back ends it early.
  let completion: ChatCompletion;
  try {
    completion = await provider.complete(call.body, ended);
  } catch (err) {
    if (!ended.aborted) return voidAndThrow(deps, call, err);
    // Ended by svc after the request went out: the prompt is owed (its 403 or 503 is the answer).
    await settleEnded(deps, call, await countedUsage(call, ''), 'ended before its answer');
    throw err;
  }
  // A reply without usage is billed for what it delivered (CONTRACT §8), counted as the stream meter counts.
  const usage = completion.usage ?? (await countedUsage(call, deliveredTextOf(completion)));
  // The work was done: the answer goes out even when its settle must wait for the database (then
  // without the outcome header, whose debit is not known yet; docs/operations.md).
  const outcome = await settleOrKeep(
    deps,
    call,
    usage,
    completion.usage ? {} : { note: 'usage estimated', outcome: 'estimated' },
  );
  if (res.closed) {
    // Nobody to answer: the call is settled, the slot given back.
    await freeSlot();
    return;
  }
  completion.model = deps.models.modelId;
  const jws = outcome && (await settledOutcome(deps, call, outcome));
  if (jws) res.setHeader(OUTCOME_HEADER, jws);
  const body = await writer.json(completion, usage);
  await freeSlot();
  sendJson(res, 200, body);
}

async function streamCall(
  deps: Deps,
  provider: ProviderLeg,
  call: PreparedCall,
  req: IncomingMessage,
  res: ServerResponse,
  writer: CallWriter,
  freeSlot: () => Promise<void>,
  deleted: AbortSignal,
) {
  const controller = new AbortController();
  let clientGone = false;
  res.on('close', () => {
    if (!res.writableFinished) {
      clientGone = true;
      controller.abort(clientClosed());
    }
  });
  const endOnDelete = () => controller.abort(deleted.reason);
  deleted.addEventListener('abort', endOnDelete, { once: true });
  const meter = new StreamMeter(deps.models.modelId);
  const iterator = provider.stream(call.body, controller.signal)[Symbol.asyncIterator]();

  // The first chunk decides between an HTTP error (nothing sent yet) and a 200 stream. A caller who left
  // (or a deletion) before it came ended a request the provider had: its prompt is owed (CONTRACT §9).
  let first: IteratorResult<ChatChunk>;
  try {
    first = await iterator.next();
  } catch (err) {
    if (!controller.signal.aborted) return voidAndThrow(deps, call, err);
    deleted.removeEventListener('abort', endOnDelete);
    await settleEnded(deps, call, await countedUsage(call, ''), clientGone ? 'client disconnected' : 'ended');
    if (clientGone) return;
    throw err;
  }
  res.statusCode = 200;
  res.setHeader('content-type', 'text/event-stream; charset=utf-8');
  res.setHeader('cache-control', 'no-cache');
  res.setHeader('x-accel-buffering', 'no');
  res.setHeader('trailer', OUTCOME_HEADER);
  // The headers leave with the first chunk, in one write (Node sends a response's header with its first
  // body write): the client then reads one packet instead of two before its first byte.

  const write = async (text: string) => {
    if (!text || clientGone) return;
    if (!res.write(text)) {
      await new Promise<void>((resolve) => {
        // A client that stops reading holds its slot and hold no longer than STREAM_STALL_TIMEOUT_MS: its
        // connection is closed, and the call is settled as one the client left (billed for what it got).
        const stalled = setTimeout(() => res.destroy(), deps.config.reliability.streamStallMs);
        const done = () => {
          clearTimeout(stalled);
          res.off('drain', done);
          res.off('close', done);
          resolve();
        };
        res.on('drain', done);
        res.on('close', done);
      });
    }
  };
  // Every chunk is counted (and its model forced) whether or not its text is sent.
  const relay = (chunk: ChatChunk) => writer.chunk(meter.observe(chunk, true)!);

  let failure: unknown = null;
  try {
    const opening = writer.open();
    if (!first.done) {
      await write(opening + relay(first.value));
      // Node holds a response's writes until the next tick (each write corks the socket), and that tick
      // comes only once every chunk the provider already sent has been relayed: the first one leaves now.
      res.uncork();
      // After the byte left: measuring it never delays it.
      recordFirstByte(performance.now() - call.startedAt);
    } else await write(opening);
    while (!clientGone) {
      const next = await iterator.next();
      if (next.done) break;
      await write(relay(next.value));
    }
  } catch (err) {
    if (!clientGone) failure = err;
  }
  deleted.removeEventListener('abort', endOnDelete);
  // A deleted client's call ends as a provider failing mid-stream does (an upstream may end its stream
  // quietly on abort): billed for what it delivered, an error event, no [DONE].
  if (deleted.aborted && !clientGone) failure = deleted.reason;
  if (clientGone) {
    // Ended at the provider, billed for the prompt and what was delivered (CONTRACT §9), as the
    // provider's usage when it came, else counted with the tokenizer.
    await iterator.return?.(undefined).catch(() => {});
    await settleEnded(deps, call, (await meter.finalUsage(call)).usage, 'client disconnected');
    return;
  }
  if (failure) {
    // A provider failing mid-stream, or a deletion: the client gets its surface's error event (and, on
    // chat, no [DONE]), and is billed for the prompt and the output it was delivered (CONTRACT §8–§9);
    // a provider failure that delivered nothing debits nothing.
    if (meter.delivered || deleted.aborted)
      await settleEnded(
        deps,
        call,
        (await meter.finalUsage(call)).usage,
        deleted.aborted ? 'ended mid-stream' : 'provider failed mid-stream',
      );
    else await voidCall(deps, call);
    const appErr =
      failure instanceof AppError
        ? failure
        : errorOf(MODEL_ERRORS, 'UPSTREAM_ERROR', 'the model provider failed mid-stream');
    if (!(failure instanceof AppError)) deps.log.error({ err: failure }, 'stream failed');
    await freeSlot();
    res.end(writer.fail(appErr));
    return;
  }
  const { usage, estimated } = await meter.finalUsage(call);
  let outcome: CallOutcome | null;
  try {
    outcome = await settleOrKeep(
      deps,
      call,
      usage,
      estimated ? { note: 'usage estimated', outcome: 'estimated' } : {},
    );
  } catch (err) {
    deps.log.error({ err }, 'settle refused');
    // As on every other way out: the slot is free before the last byte leaves.
    await freeSlot();
    res.end(writer.fail(errorOf(COMMON_ERRORS, 'INTERNAL', `internal error (request ${String(req.id)})`)));
    return;
  }
  // A settle kept for later (the database did not answer): the stream was delivered whole and ends as
  // one, without the outcome, whose debit is not known yet.
  const jws = outcome && (await settledOutcome(deps, call, outcome));
  if (jws) {
    res.write(`: ${OUTCOME_HEADER} ${jws}\n\n`);
    res.addTrailers({ [OUTCOME_HEADER]: jws });
  }
  const last = await writer.end(usage);
  await freeSlot();
  res.end(last);
}
