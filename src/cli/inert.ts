import stripAnsi from 'strip-ansi';

// Text from the server or a model is data, never terminal control (STYLE, "Pages"; docs/cli.md,
// "What reaches your terminal"). A model's answer, a tool's arguments, a server's error message or an
// organization's name could otherwise move the cursor, erase lines, change the title, write the
// clipboard (OSC 52) or plant links (OSC 8) — enough to draw a fake approval prompt over the real one.
// `inert` is the one function every such string goes through before it is printed:
//   1. ANSI/OSC escape sequences are removed (strip-ansi) — or, where the exact bytes matter (a command
//      about to run, a path), kept and shown as text, so the person sees what will actually run;
//   2. every C0 control but newline and tab (and, on one line, those too), DEL, every C1 control, and the
//      Unicode bidirectional overrides that reorder what is shown (Trojan Source) become visible escapes
//      such as `\x1b`, `\r`, `\u009b`, `\u202e`.

export interface InertOptions {
  /**
   * 'strip' (prose: an answer, a message) removes escape sequences; 'show' keeps their bytes as visible
   * escapes (a command, a path, an argument: what will be run or touched, byte for byte).
   */
  sequences?: 'strip' | 'show';
  /** false: the text must stay on one line, so newline and tab are shown as `\n` and `\t` too. */
  multiline?: boolean;
}

// C0 (U+0000–U+001F), DEL, C1 (U+0080–U+009F), line/paragraph separators, bidi embeddings, overrides
// and isolates (U+202A–U+202E, U+2066–U+2069), and the byte-order mark / zero-width no-break space.
// eslint-disable-next-line no-control-regex -- matching control characters is this pattern's purpose
const CONTROL = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]/g;

const NAMED: Record<string, string> = { '\r': '\\r', '\n': '\\n', '\t': '\\t' };

function visible(ch: string, multiline: boolean): string {
  if (multiline && (ch === '\n' || ch === '\t')) return ch;
  const named = NAMED[ch];
  if (named) return named;
  const code = ch.charCodeAt(0);
  return code < 0x80
    ? `\\x${code.toString(16).padStart(2, '0')}`
    : `\\u${code.toString(16).padStart(4, '0')}`;
}

/** The text, safe to print on a terminal (see above). */
export function inert(text: unknown, opts: InertOptions = {}): string {
  const s = typeof text === 'string' ? text : String(text);
  const multiline = opts.multiline ?? true;
  const stripped = opts.sequences === 'show' ? s : stripAnsi(s);
  return stripped.replace(CONTROL, (ch) => visible(ch, multiline));
}

/** A one-line rendering (newlines shown as `\n`), escape sequences shown: for paths, names, arguments. */
export const inertLine = (text: unknown): string => inert(text, { sequences: 'show', multiline: false });

/** Longest an unfinished escape sequence may be held back while streaming before it is shown anyway. */
const HOLD_MAX = 256;

/**
 * `inert` for text that arrives in pieces (a streamed answer): an escape sequence split across two
 * pieces is held back until it is complete, so it is removed whole rather than half shown. Whatever is
 * held is at most HOLD_MAX characters and comes out (inert) at `end()`.
 */
export class InertStream {
  private held = '';

  push(piece: string): string {
    // Complete sequences go first; an escape left in what remains may be the start of one still coming.
    let text = stripAnsi(this.held + piece);
    this.held = '';
    const esc = Math.max(text.lastIndexOf('\u001b'), text.lastIndexOf('\u009b'));
    if (esc >= 0 && text.length - esc < HOLD_MAX) {
      this.held = text.slice(esc);
      text = text.slice(0, esc);
    }
    return inert(text);
  }

  end(): string {
    const rest = this.held;
    this.held = '';
    return inert(rest);
  }
}

// Characters JSON.stringify leaves raw that a terminal may still act on (C1, separators, bidi).
const JSON_RAW_CONTROL = /[\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]/g;

/**
 * JSON for `--json` output: JSON.stringify already escapes C0 controls (ESC is `\u001b`); the characters
 * it leaves raw that a terminal may act on are escaped too. The value parses back unchanged.
 */
export function jsonText(value: unknown, space?: number): string {
  return JSON.stringify(value, null, space).replace(
    JSON_RAW_CONTROL,
    (ch) => `\\u${ch.charCodeAt(0).toString(16).padStart(4, '0')}`,
  );
}
