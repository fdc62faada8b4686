import { readFile, stat } from 'node:fs/promises';
import { inert, inertLine } from './inert.js';
import { confinedPath } from './tools.js';

// What `svc run` shows before a tool runs, and the question it asks (docs/cli.md, "Approvals"). Every
// string in it came from the model, so it goes through `inert`: a command is shown byte for byte, escape
// sequences as visible text, and a command of several lines as a quoted block with its line count, so
// nothing the model wrote can draw a different command over the one that will run.

export interface CallView {
  /** One line after `→ `: the tool and what it acts on. */
  heading: string;
  /** Lines shown under the heading (a multi-line command, a file's content or diff), already inert. */
  block: string[];
  /** The approval question. */
  question: string;
}

/** Lines of a file's content or diff shown before a write; the rest is counted, not shown. */
const PREVIEW_LINES = 20;
/** Longest line of a preview; longer ones are cut with `…`. */
const PREVIEW_WIDTH = 160;
/** A file larger than this is not read for a diff (its size is still shown). */
const DIFF_MAX_BYTES = 256 * 1024;

const QUOTE = '  │ ';

const plural = (n: number, word: string) => `${n.toLocaleString('en')} ${word}${n === 1 ? '' : 's'}`;

/** Splits text into lines for display: a final newline ends the last line, it does not start another. */
function linesOf(text: string): string[] {
  const lines = text.split('\n');
  if (lines.length > 1 && lines.at(-1) === '') lines.pop();
  return lines;
}

function previewLine(prefix: string, text: string): string {
  const shown = inert(text, { sequences: 'show', multiline: false });
  return `${prefix}${shown.length > PREVIEW_WIDTH ? `${shown.slice(0, PREVIEW_WIDTH)}…` : shown}`;
}

function truncated(lines: string[]): string[] {
  if (lines.length <= PREVIEW_LINES) return lines;
  return [...lines.slice(0, PREVIEW_LINES), `${QUOTE}… ${plural(lines.length - PREVIEW_LINES, 'more line')}`];
}

/**
 * A small line diff: the lines both versions share at the start and the end are left out, what lies
 * between is shown as removed (-) and added (+). Enough to see what a write changes; not a minimal diff.
 */
export function lineDiff(before: string, after: string): string[] {
  const a = linesOf(before);
  const b = linesOf(after);
  let start = 0;
  while (start < a.length && start < b.length && a[start] === b[start]) start++;
  let endA = a.length;
  let endB = b.length;
  while (endA > start && endB > start && a[endA - 1] === b[endB - 1]) {
    endA--;
    endB--;
  }
  const out: string[] = [];
  if (start > 0) out.push(`${QUOTE}  (${plural(start, 'line')} unchanged)`);
  for (const l of a.slice(start, endA)) out.push(previewLine(`${QUOTE}- `, l));
  for (const l of b.slice(start, endB)) out.push(previewLine(`${QUOTE}+ `, l));
  if (endA < a.length) out.push(`${QUOTE}  (${plural(a.length - endA, 'line')} unchanged)`);
  if (start === a.length && start === b.length) out.push(`${QUOTE}  (no change)`);
  return out;
}

async function writeView(root: string, args: Record<string, unknown>): Promise<CallView> {
  const path = inertLine(args.path);
  const content = typeof args.content === 'string' ? args.content : '';
  const size = plural(Buffer.byteLength(content), 'byte');
  let existing: { size: number; text?: string } | undefined;
  try {
    const target = await confinedPath(root, args.path);
    const s = await stat(target);
    if (s.isFile()) {
      existing = { size: s.size };
      if (s.size <= DIFF_MAX_BYTES) existing.text = await readFile(target, 'utf8');
    }
  } catch {
    // Not there yet, or refused: the tool itself says why when it runs.
  }
  if (!existing) {
    return {
      heading: `write_file ${path}: creates it (${size}, ${plural(linesOf(content).length, 'line')})`,
      block: truncated(linesOf(content).map((l) => previewLine(QUOTE, l))),
      question: `Allow write_file ${path}?`,
    };
  }
  return {
    heading: `write_file ${path}: overwrites it (${plural(existing.size, 'byte')} now, ${size} after)`,
    block:
      existing.text === undefined
        ? [
            `${QUOTE}(the file is too large to compare; its new content starts:)`,
            ...truncated(linesOf(content).map((l) => previewLine(QUOTE, l))),
          ]
        : truncated(lineDiff(existing.text, content)),
    question: `Allow write_file ${path} (overwrite)?`,
  };
}

/** What the person is shown for one tool call, and asked. */
export async function describeCall(
  root: string,
  name: string,
  args: Record<string, unknown>,
): Promise<CallView> {
  if (name === 'run_command') {
    const command = typeof args.command === 'string' ? args.command : String(args.command);
    const lines = linesOf(command);
    if (lines.length === 1) {
      const shown = inertLine(command);
      return { heading: `run_command: ${shown}`, block: [], question: `Allow run_command: ${shown}?` };
    }
    // Several lines: each shown on its own quoted line, so none can pass for a line of svc's own.
    return {
      heading: `run_command: a ${lines.length}-line command:`,
      block: lines.map((l) => `${QUOTE}${inert(l, { sequences: 'show', multiline: false })}`),
      question: `Allow run_command: the ${lines.length}-line command above?`,
    };
  }
  if (name === 'write_file') return writeView(root, args);
  if ('path' in args) {
    const shown = `${inertLine(name)} ${inertLine(args.path)}`;
    return { heading: shown, block: [], question: `Allow ${shown}?` };
  }
  return { heading: inertLine(name), block: [], question: `Allow ${inertLine(name)}?` };
}
