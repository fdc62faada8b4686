// A minimal server-sent-events reader for upstream streams (WHATWG HTML §9.2 "event stream
// interpretation"): events are separated by a blank line, `data:` lines of one event are joined by "\n",
// comment lines start with ":". Only `data` matters for chat completions.
//
// It reads the provider's bytes as they arrive and decodes only the lines it keeps: a line ends at a
// "\n" byte, which never occurs inside a multi-byte UTF-8 sequence, so each line is decoded whole and no
// text decoder has to carry a split character from one chunk to the next.

const LF = 0x0a;
const CR = 0x0d;
const SPACE = 0x20;
const DATA = Buffer.from('data:');

export class SseDecoder {
  /** An unterminated line from the previous chunk (a copy: the chunk's memory is not ours to keep). */
  #rest: Buffer | null = null;
  #data: string[] = [];

  constructor(private readonly onEvent: (data: string) => void) {}

  /** Reads one chunk of the body; calls onEvent for each event the chunk completes. */
  push(chunk: Buffer): void {
    const buf = this.#rest ? Buffer.concat([this.#rest, chunk]) : chunk;
    this.#rest = null;
    let start = 0;
    let nl: number;
    while ((nl = buf.indexOf(LF, start)) !== -1) {
      const end = nl > start && buf[nl - 1] === CR ? nl - 1 : nl;
      if (end === start) this.#dispatch();
      else if (
        end - start >= DATA.length &&
        buf.compare(DATA, 0, DATA.length, start, start + DATA.length) === 0
      ) {
        const from = start + DATA.length;
        this.#data.push(buf.toString('utf8', buf[from] === SPACE ? from + 1 : from, end));
      }
      start = nl + 1;
    }
    if (start < buf.length) this.#rest = Buffer.from(buf.subarray(start));
  }

  /** The body ended: an event still open counts (a provider that omits the last blank line). */
  end(): void {
    this.#dispatch();
  }

  #dispatch() {
    if (this.#data.length === 0) return;
    const data = this.#data.length === 1 ? this.#data[0]! : this.#data.join('\n');
    this.#data = [];
    this.onEvent(data);
  }
}
