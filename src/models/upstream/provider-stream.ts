import type { Dispatcher } from 'undici';
import type { IncomingHttpHeaders } from 'node:http';
import { SseDecoder } from './sse.js';

// One streamed provider call on undici's dispatch API, read as the caller pulls it.
//
// Why not `agent.request()`: its body is a Readable stream, which the proxy read through an async
// iterator, a text decoder and two async generators (SSE framing, then JSON), several promise hops for
// every chunk, the first one included, on the path of every first byte (docs/models.md, first byte).
// Here undici's parser callbacks only queue the body's bytes, and the caller's `next()` decodes them up
// to the next event, and parses that one alone: a provider's chunks that arrive together (one socket
// read often holds a whole short answer) cost nothing before the first of them is relayed. The provider
// is paused while many are queued (a slow client), and `return()` before the end aborts the request, as
// destroying the body did.

export interface ProviderStreamHooks<T> {
  /** One event's data as a chunk; throwing fails the stream. `[DONE]` ends it and never gets here. */
  parse(data: string): T;
  /** The error for a status of 300 or more, given the body text. */
  statusError(status: number, headers: IncomingHttpHeaders, text: string): Error;
  /** The error for any other failure (network, timeouts, the caller's abort). */
  networkError(err: unknown): Error;
}

/** What parse() threw, as the Error a stream fails with (a parse hook may throw anything). */
const asError = (err: unknown): Error =>
  err instanceof Error ? err : new Error('the provider stream could not be read', { cause: err });

/** Body pieces queued before the provider is paused, and the level at which it is resumed. */
const HIGH_WATER = 64;
const LOW_WATER = 16;
/** An error body is read for its message only. */
const ERROR_BODY_LIMIT = 64 * 1024;

const DONE = '[DONE]';

export function streamProvider<T>(
  agent: Dispatcher,
  options: Dispatcher.DispatchOptions,
  signal: AbortSignal,
  hooks: ProviderStreamHooks<T>,
): AsyncIterableIterator<T> {
  const stream = new ProviderStream(signal, hooks);
  try {
    agent.dispatch(options, stream);
  } catch (err) {
    stream.onResponseError(null, err as Error);
  }
  return stream;
}

class ProviderStream<T> implements Dispatcher.DispatchHandler, AsyncIterableIterator<T> {
  #controller: Dispatcher.DispatchController | null = null;
  /** Body pieces not decoded yet. */
  #raw: Buffer[] = [];
  #rawHead = 0;
  /** Event data decoded, not handed out yet (a piece can hold several events). */
  #events: string[] = [];
  #eventHead = 0;
  /** The body has ended (all of it is in #raw), and then the decoder too. */
  #bodyEnded = false;
  #decoderEnded = false;
  #waiter: { resolve: (r: IteratorResult<T>) => void; reject: (err: Error) => void } | null = null;
  #failure: Error | null = null;
  /** `[DONE]` or the end of the body: nothing more to hand out. */
  #finished = false;
  /** The request itself is over (ended or failed): nothing to abort. */
  #requestOver = false;
  /** The caller stopped pulling. */
  #closed = false;
  #error: { status: number; headers: IncomingHttpHeaders; body: Buffer[]; size: number } | null = null;
  readonly #decoder = new SseDecoder((data) => this.#events.push(data));
  readonly #onAbort = () => this.#controller?.abort(this.signal.reason as Error);

  constructor(
    private readonly signal: AbortSignal,
    private readonly hooks: ProviderStreamHooks<T>,
  ) {
    signal.addEventListener('abort', this.#onAbort, { once: true });
  }

  // ---- the dispatch handler (undici's parser calls these) ----

  onRequestStart(controller: Dispatcher.DispatchController) {
    this.#controller = controller;
    if (this.signal.aborted) controller.abort(this.signal.reason as Error);
  }

  onResponseStart(_controller: Dispatcher.DispatchController, status: number, headers: IncomingHttpHeaders) {
    if (status >= 300) this.#error = { status, headers, body: [], size: 0 };
  }

  onResponseData(_controller: Dispatcher.DispatchController, chunk: Buffer) {
    const error = this.#error;
    if (error) {
      if (error.size < ERROR_BODY_LIMIT) {
        error.body.push(chunk);
        error.size += chunk.length;
      }
    } else if (!this.#finished && !this.#closed) {
      this.#raw.push(chunk);
      if (this.#raw.length - this.#rawHead >= HIGH_WATER) this.#controller?.pause();
      this.#wake();
    }
  }

  onResponseEnd() {
    this.#over();
    const error = this.#error;
    if (error) {
      const text = Buffer.concat(error.body).toString('utf8');
      this.#fail(this.hooks.statusError(error.status, error.headers, text));
      return;
    }
    this.#bodyEnded = true;
    this.#wake();
  }

  onResponseError(_controller: Dispatcher.DispatchController | null, err: Error) {
    this.#over();
    // After [DONE] the answer is complete: a connection that breaks while its end is read changes nothing.
    if (!this.#finished) this.#fail(this.hooks.networkError(err));
  }

  // ---- the caller's side ----

  [Symbol.asyncIterator]() {
    return this;
  }

  next(): Promise<IteratorResult<T>> {
    if (this.#closed) return Promise.resolve({ value: undefined, done: true });
    let result: IteratorResult<T> | null;
    try {
      result = this.#take();
    } catch (err) {
      return Promise.reject(asError(err));
    }
    if (result) return Promise.resolve(result);
    if (this.#failure) return Promise.reject(this.#failure);
    return new Promise((resolve, reject) => {
      this.#waiter = { resolve, reject };
    });
  }

  /** The caller stopped: an answer not finished is aborted (its connection closed); a finished one ends by itself. */
  return(): Promise<IteratorResult<T>> {
    this.#closed = true;
    this.#raw = [];
    this.#events = [];
    if (!this.#finished && !this.#requestOver)
      this.#controller?.abort(new Error('the proxy stopped reading the provider stream'));
    return Promise.resolve({ value: undefined, done: true });
  }

  // ---- inside ----

  /**
   * The next chunk, decoding queued bytes as far as the next event; `done` once [DONE] or the end of the
   * body is reached; null when more bytes must arrive first. Throws when the event does not parse.
   */
  #take(): IteratorResult<T> | null {
    for (;;) {
      if (this.#finished) return { value: undefined, done: true };
      if (this.#eventHead < this.#events.length) {
        const data = this.#events[this.#eventHead++]!;
        if (this.#eventHead === this.#events.length) {
          this.#events = [];
          this.#eventHead = 0;
        }
        if (data === DONE) {
          this.#finished = true;
          continue;
        }
        try {
          return { value: this.hooks.parse(data), done: false };
        } catch (err) {
          const failure = asError(err);
          this.#failure = failure;
          this.#finished = true;
          if (!this.#requestOver) this.#controller?.abort(failure);
          throw failure;
        }
      }
      if (this.#rawHead < this.#raw.length) {
        this.#decoder.push(this.#raw[this.#rawHead++]!);
        if (this.#rawHead === this.#raw.length) {
          this.#raw = [];
          this.#rawHead = 0;
        }
        if (this.#controller?.paused && this.#raw.length - this.#rawHead <= LOW_WATER)
          this.#controller.resume();
        continue;
      }
      if (!this.#bodyEnded) return null;
      if (this.#decoderEnded) {
        this.#finished = true;
        continue;
      }
      this.#decoderEnded = true;
      this.#decoder.end();
    }
  }

  /** Hands what arrived to a caller waiting in next(). */
  #wake() {
    const waiter = this.#waiter;
    if (!waiter) return;
    let result: IteratorResult<T> | null;
    try {
      result = this.#take();
    } catch (err) {
      this.#waiter = null;
      waiter.reject(asError(err));
      return;
    }
    if (!result) return;
    this.#waiter = null;
    waiter.resolve(result);
  }

  #fail(err: Error) {
    if (this.#failure || this.#finished) return;
    this.#failure = err;
    const waiter = this.#waiter;
    this.#waiter = null;
    waiter?.reject(err);
  }

  #over() {
    this.#requestOver = true;
    this.signal.removeEventListener('abort', this.#onAbort);
  }
}
