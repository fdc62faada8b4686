#!/usr/bin/env node
// `npm run lint`'s diary-words check: docs and code comments say what is and why, never when or by whom
// it was found (docs/README.md, "How these pages are written"). History is git's. Refused, case-insensitive:
//
//   session N          "session 11", "sessions 1–2"        a work session of the past
//   issue N            "issue 22", "issues 18", "issue #7"  a tracker a reader of the repository lacks
//   main at <hash>     "main at 9d306c4" (7+ hex digits)    a commit named as the state of the code
//   load average       "load average 13–17"                 the machine's state during a measurement
//
// Where: every Markdown file under docs/, the comments of every .ts, .mjs, .js and .sql file under
// src/, oauth/, mcp/, test/, bench/ and scripts/ (`//` and `/* … */`; `--` in SQL), and of the CI's
// scripts under .ci/ (`#` in shell). Cite the contract section ("CONTRACT §9") or
// a decision record (docs/decisions/NNNN-title.md) instead. Exit status 1 with file:line for each finding.
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';

const root = join(import.meta.dirname, '..');
export const PATTERNS = [
  { name: 'session N', re: /\bsessions? \d+/i },
  { name: 'issue N', re: /\bissues? #?\d+/i },
  { name: 'main at <hash>', re: /\bmain at [0-9a-f]{7,}\b/i },
  { name: 'load average', re: /\bload average\b/i },
];

function* files(dir, exts) {
  for (const name of readdirSync(dir)) {
    if (name === 'node_modules' || name.startsWith('.')) continue;
    const path = join(dir, name);
    if (statSync(path).isDirectory()) yield* files(path, exts);
    else if (exts.some((e) => name.endsWith(e))) yield path;
  }
}

/** The comment text of a source file, line by line (code blanked, so line numbers hold). */
function commentLines(text, sql) {
  const lines = text.split('\n').map(() => '');
  const comment = sql ? /--[^\n]*|\/\*[\s\S]*?\*\// : /\/\/[^\n]*|\/\*[\s\S]*?\*\//;
  const all = new RegExp(comment.source, 'g');
  for (const m of text.matchAll(all)) {
    const first = text.slice(0, m.index).split('\n').length - 1;
    m[0].split('\n').forEach((part, i) => (lines[first + i] += ` ${part}`));
  }
  return lines;
}

/** The `#` comments of a shell script, line by line (the rest blanked). */
function shellCommentLines(text) {
  return text.split('\n').map((line) => /(?:^|\s)(#.*)$/.exec(line)?.[1] ?? '');
}

const findings = [];
function check(path, lines) {
  lines.forEach((line, i) => {
    for (const p of PATTERNS) {
      const m = p.re.exec(line);
      if (m) findings.push(`${relative(root, path)}:${i + 1}: "${m[0]}" (${p.name})`);
    }
  });
}

for (const path of files(join(root, 'docs'), ['.md'])) check(path, readFileSync(path, 'utf8').split('\n'));
for (const dir of ['src', 'oauth', 'mcp', 'test', 'bench', 'scripts', '.ci/extra.d'])
  for (const path of files(join(root, dir), ['.ts', '.mjs', '.js', '.sql']))
    // This file names the patterns it refuses.
    if (path !== import.meta.filename)
      check(path, commentLines(readFileSync(path, 'utf8'), path.endsWith('.sql')));
for (const path of [
  ...files(join(root, '.ci/extra.d'), ['.sh']),
  ...['run', 'prepare', 'extra'].map((f) => join(root, '.ci', f)),
])
  check(path, shellCommentLines(readFileSync(path, 'utf8')));

if (findings.length) {
  process.stderr.write(
    `${findings.join('\n')}\n${findings.length} diary word(s): cite the CONTRACT section or a decision record ` +
      `instead (scripts/check-diary-words.mjs)\n`,
  );
  process.exit(1);
}
