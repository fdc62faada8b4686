import { describe, expect, it } from 'vitest';
import { inert, inertLine, InertStream, jsonText } from '../../src/cli/inert.js';
import { describeCall, lineDiff } from '../../src/cli/approval.js';

// Text from the server or a model reaches the terminal inert (src/cli/inert.ts), checked byte by byte:
// no ESC, CR, C1 or bidi override survives, and what was there is shown as a visible escape.

const ESC = '\u001b';
/** Every character below U+0020, DEL, C1, and the bidi controls: none may reach a terminal as itself. */
// eslint-disable-next-line no-control-regex -- the point is to find control characters
const RAW_CONTROL = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/;

describe('inert', () => {
  it('removes ANSI and OSC sequences from prose and keeps newline and tab', () => {
    const text =
      `red ${ESC}[31mtext${ESC}[0m\tend\n` +
      `${ESC}]52;c;aGk=${ESC}\\clip ${ESC}]8;;https://evil.example/${ESC}\\link${ESC}]8;;${ESC}\\ ` +
      `${ESC}]0;owned title\u0007done`;
    const out = inert(text);
    expect(out).not.toMatch(RAW_CONTROL);
    expect(out).toBe('red text\tend\nclip link done');
  });

  it('shows every other C0, DEL and C1 control as a visible escape', () => {
    expect(inert('a\rb\u0000c\u0007d\u007fef\u0085g')).toBe('a\\rb\\x00c\\x07d\\x7fef\\u0085g');
    // C1 CSI (U+009B) starts a sequence: removed whole from prose, shown where the bytes matter.
    expect(inert('e\u009b2Kf')).toBe('ef');
    expect(inertLine('e\u009b2Kf')).toBe('e\\u009b2Kf');
    // A lone ESC that starts no sequence strip-ansi knows is still shown, never passed.
    const lone = inert(`x${ESC}${ESC}[`);
    expect(lone).toBe('x\\x1b\\x1b[');
    expect([...Buffer.from(lone)]).not.toContain(0x1b);
  });

  it('shows bidi overrides (Trojan Source) and separators', () => {
    expect(inert('ls \u202e#\u2066 x\u2028y')).toBe('ls \\u202e#\\u2066 x\\u2028y');
  });

  it("keeps a command's escape sequences as text where the bytes matter (sequences: 'show')", () => {
    const cmd = `touch /tmp/x; #${ESC}[2K${ESC}[1A\r`;
    const out = inert(cmd, { sequences: 'show' });
    expect(out).toBe('touch /tmp/x; #\\x1b[2K\\x1b[1A\\r');
    expect([...Buffer.from(out)].filter((b) => b < 0x20)).toEqual([]);
    expect(inertLine('a\nb\tc')).toBe('a\\nb\\tc');
  });

  it('holds a sequence split across streamed pieces and removes it whole', () => {
    const s = new InertStream();
    const out = [s.push(`Hello ${ESC}`), s.push(']0;title'), s.push('\u0007 world'), s.end()].join('');
    expect(out).toBe('Hello  world');
    const t = new InertStream();
    expect(t.push(`tail ${ESC}`)).toBe('tail ');
    expect(t.end()).toBe('\\x1b');
  });

  it('keeps --json output parseable to the same value, with C1 and bidi escaped', () => {
    const value = { m: `a${ESC}[2Kb\u009bc\u202ed` };
    const text = jsonText(value);
    expect(text).not.toMatch(RAW_CONTROL);
    expect(JSON.parse(text)).toEqual(value);
  });
});

describe('the approval view', () => {
  it('shows a multi-line command as a quoted block with its line count', async () => {
    const command = `touch /tmp/pwned; #${ESC}[2K${ESC}[1A\n${ESC}[36m→${ESC}[39m run_command: ls -la`;
    const view = await describeCall('/nonexistent', 'run_command', { command });
    expect(view.heading).toBe('run_command: a 2-line command:');
    expect(view.block).toEqual([
      '  │ touch /tmp/pwned; #\\x1b[2K\\x1b[1A',
      '  │ \\x1b[36m→\\x1b[39m run_command: ls -la',
    ]);
    expect(view.question).toBe('Allow run_command: the 2-line command above?');
    for (const l of [view.heading, ...view.block, view.question]) expect(l).not.toMatch(RAW_CONTROL);
  });

  it('a line diff shows what a write changes', () => {
    expect(lineDiff('a\nb\nc\n', 'a\nB\nc\n')).toEqual([
      '  │   (1 line unchanged)',
      '  │ - b',
      '  │ + B',
      '  │   (1 line unchanged)',
    ]);
  });
});
