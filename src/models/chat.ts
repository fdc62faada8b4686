import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Deps } from '../deps.js';
import { AppError } from '../http/errors.js';
import { renderError, sendJson } from '../http/error-middleware.js';
import type { Actor } from './actor.js';
import type { Lease } from './concurrency.js';
import { chatLease } from './lease.js';
import {
  balanceOf,
  prepareCall,
  settleOrKeep,
  completionTokensOf,
  countedUsage,
  StreamMeter,
  voidCall,
  type CallOutcome,
  type PreparedCall,
} from './metered.js';
import { OUTCOME_HEADER } from './outcome.js';
import type { ChatRequest } from './schema.js';
import type { ChatChunk } from './upstream/types.js';
import { recordFirstByte } from '../metrics/models.js';

// POST /v1/chat/completions (CONTRACT §9): lease → reserve → provider → settle → signed outcome.
//
// The outcome header of a stream: its debit is only known at the end, after the headers left. It goes
// (a) as an SSE comment line `: x-svc-outcome <jws>` just before `data: [DONE]` (comments are ignored by
// every SSE client, the OpenAI SDKs included), and (b) as the HTTP trailer `x-svc-outcome` (declared in
// `Trailer`), for clients that read trailers. JSON responses carry it as a header.

const REQUEST_ID_HEADER = 'x-svc-request-id';

/** Nobody reads it: it keeps a call the client left out of the error log (nginx's 499 convention). */
const clientClosed = () => new AppError(499, 'client_closed_request', 'the client closed the connection');

export async function signOutcome(
  deps: Deps,
  actor: Actor,
  o: { requestId: string; creditsDebited: number; balanceCredits: number },
) {
  return deps.models.outcome.sign({ userId: actor.userId, orgKey: actor.orgKey, ...o });
}

/**
 * A settled call's signed outcome, or null when it cannot be signed now: a process that has not read its
 * signing keys yet needs the database for them, and an outage may come between the settle and the
 * signature. The call was delivered and billed, so its answer still goes out (CONTRACT §8; issue 14,
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

/** `held`: the call's lease and hold, already taken with its caller's read (chat-admission.ts). */
export async function chatCompletion(
  deps: Deps,
  actor: Actor,
  request: ChatRequest,
  req: IncomingMessage,
  res: ServerResponse,
  held?: { lease: Lease; call: PreparedCall },
) {
  const stream = !!request.stream;
  // The slot first, then the hold (issue 14, item 9): a 429 writes nothing. The lease was started as
  // soon as the caller was known (src/models/lease.ts), so waiting for it here rarely costs a round trip.
  const lease = held?.lease ?? (await chatLease(deps, req, res, actor.orgKey));
  let call: PreparedCall;
  try {
    call = held?.call ?? (await prepareCall(deps, actor, request, stream));
  } catch (err) {
    await lease.release();
    throw err;
  }
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
  // The slot is free before the answer's last byte leaves: a client that has its whole answer may send its
  // next call at once and find the slot (release is idempotent; the finally covers the error paths).
  const freeSlot = () => lease.release();
  // Deleting the client ends the call (CONTRACT §8; src/billing/live-calls.ts): aborted with `client_deleted`.
  const deleted = deps.billing.liveCalls.watch(actor.orgKey);
  try {
    // Its lease taken back (self-fencing, src/models/liveness.ts) ends it the same way, with 503.
    const ended = AbortSignal.any([deleted.signal, lease.signal]);
    if (stream) await streamCall(deps, call, req, res, freeSlot, ended);
    else await jsonCall(deps, call, res, freeSlot, ended);
  } finally {
    deleted.done();
    await lease.release();
  }
}

async function withVoidOnError<T>(deps: Deps, call: PreparedCall, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    await voidCall(deps, call);
    if (err instanceof AppError) {
      const outcome = await outcomeAfterVoid(deps, call);
      if (outcome) err.extra.headers = { ...err.extra.headers, [OUTCOME_HEADER]: outcome };
    }
    throw err;
  }
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

async function jsonCall(
  deps: Deps,
  call: PreparedCall,
  res: ServerResponse,
  freeSlot: () => Promise<void>,
  deleted: AbortSignal,
) {
  const controller = new AbortController();
  const onClose = () => {
    if (!res.writableFinished) controller.abort(clientClosed());
  };
  res.on('close', onClose);
  // Ended by a deletion before its answer: nothing was delivered, so nothing is debited (its 403 is the answer).
  const completion = await withVoidOnError(deps, call, () =>
    deps.models.upstream.complete(call.body, AbortSignal.any([controller.signal, deleted])),
  );
  // A reply without usage is billed for what it delivered (CONTRACT §8), counted as the stream meter counts.
  const usage = completion.usage ?? countedUsage(call.promptEstimate(), completionTokensOf(completion));
  // The work was done: the answer goes out even when its settle must wait for the database (then
  // without the outcome header, whose debit is not known yet; docs/operations.md).
  const outcome = await settleOrKeep(
    deps,
    call,
    usage,
    completion.usage ? {} : { note: 'usage estimated', outcome: 'estimated' },
  );
  completion.model = deps.models.modelId;
  const jws = outcome && (await settledOutcome(deps, call, outcome));
  if (jws) res.setHeader(OUTCOME_HEADER, jws);
  await freeSlot();
  sendJson(res, 200, completion);
}

async function streamCall(
  deps: Deps,
  call: PreparedCall,
  req: IncomingMessage,
  res: ServerResponse,
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
  const iterator = deps.models.upstream.stream(call.body, controller.signal)[Symbol.asyncIterator]();

  // The first chunk decides between an HTTP error (nothing sent yet) and a 200 stream.
  const first = await withVoidOnError(deps, call, () => iterator.next());
  res.statusCode = 200;
  res.setHeader('content-type', 'text/event-stream; charset=utf-8');
  res.setHeader('cache-control', 'no-cache');
  res.setHeader('x-accel-buffering', 'no');
  res.setHeader('trailer', OUTCOME_HEADER);
  // The headers leave with the first chunk, in one write (Node sends a response's header with its first
  // body write): the client then reads one packet instead of two before its first byte.

  const write = async (chunk: ChatChunk) => {
    const out = meter.observe(chunk, call.clientWantsUsage);
    if (!out || clientGone) return;
    if (!res.write(`data: ${JSON.stringify(out)}\n\n`)) {
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

  let failure: unknown = null;
  try {
    if (!first.done) {
      await write(first.value);
      // Node holds a response's writes until the next tick (each write corks the socket), and that tick
      // comes only once every chunk the provider already sent has been relayed: the first one leaves now.
      res.uncork();
      // After the byte left: measuring it never delays it.
      recordFirstByte(performance.now() - call.startedAt);
    }
    while (!clientGone) {
      const next = await iterator.next();
      if (next.done) break;
      await write(next.value);
    }
  } catch (err) {
    if (!clientGone) failure = err;
  }
  deleted.removeEventListener('abort', endOnDelete);
  // A deleted client's call ends as a provider failing mid-stream does (an upstream may end its stream
  // quietly on abort): billed for what it delivered, an error event, no [DONE].
  if (deleted.aborted && !clientGone) failure = deleted.reason;
  if (clientGone) {
    // Billed for what was generated (CONTRACT §8): the provider was aborted; settle what streamed.
    await iterator.return?.(undefined).catch(() => {});
    const { usage } = meter.finalUsage(call.promptEstimate);
    await settleOrKeep(deps, call, usage, { note: 'client disconnected', outcome: 'aborted' }).catch(
      (err: unknown) => deps.log.error({ err }, 'settle after disconnect refused'),
    );
    return;
  }
  if (failure) {
    // A provider failing mid-stream: the client gets an OpenAI error event and no [DONE], and is billed
    // for the output it was delivered (CONTRACT §8), counted by the meter; nothing delivered, nothing debited.
    if (meter.generated > 0) {
      const { usage } = meter.finalUsage(call.promptEstimate);
      await settleOrKeep(deps, call, usage, { note: 'provider failed mid-stream', outcome: 'aborted' }).catch(
        (err: unknown) =>
          deps.log.error({ err, requestId: call.requestId }, 'settle after a provider failure refused'),
      );
    } else await voidCall(deps, call);
    const appErr =
      failure instanceof AppError
        ? failure
        : new AppError(502, 'upstream_error', 'the model provider failed mid-stream');
    if (!(failure instanceof AppError)) deps.log.error({ err: failure }, 'stream failed');
    await freeSlot();
    res.end(`data: ${JSON.stringify(renderError(appErr, 'openai'))}\n\n`);
    return;
  }
  const { usage, estimated } = meter.finalUsage(call.promptEstimate);
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
    res.end(
      `data: ${JSON.stringify(renderError(new AppError(500, 'internal', `internal error (request ${String(req.id)})`), 'openai'))}\n\n`,
    );
    return;
  }
  // A settle kept for later (the database did not answer): the stream was delivered whole and ends as
  // one, without the outcome, whose debit is not known yet.
  const jws = outcome && (await settledOutcome(deps, call, outcome));
  if (jws) {
    res.write(`: ${OUTCOME_HEADER} ${jws}\n\n`);
    res.addTrailers({ [OUTCOME_HEADER]: jws });
  }
  await freeSlot();
  res.end('data: [DONE]\n\n');
}
