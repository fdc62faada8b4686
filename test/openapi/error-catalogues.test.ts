import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ALL_ERROR_CATALOGUES, ERROR_DOC, errorListMarkdown } from '../../scripts/error-list.js';

// Every code comes from one catalogue (decision records 0086 and 0120): no throw site names a code of its
// own, no code is in two catalogues, and docs/errors.md lists exactly what the catalogues hold.

const ROOT = join(import.meta.dirname, '../..');

/** Folders whose throw sites still name their codes inline; each leaves this list when it moves. */
const NOT_YET_MOVED: string[] = [];

/** The one file that makes an AppError from a catalogue entry. */
const CONSTRUCTOR_HOME = 'src/http/errors.ts';

/**
 * A line that makes an AppError without a catalogue for a reason says so in a comment starting with this
 * (a provider's own code passed through, a code's spelling rendered for the API document).
 */
const EXCUSED = 'error-catalogue:';

function sourceFiles(dir: string): string[] {
  return readdirSync(join(ROOT, dir)).flatMap((name) => {
    const path = `${dir}/${name}`;
    if (statSync(join(ROOT, path)).isDirectory()) return sourceFiles(path);
    return path.endsWith('.ts') ? [path] : [];
  });
}

/** `file:line` of each error made with an inline code: `new AppError(` or a helper given a code string. */
function inlineCodeSites(file: string): string[] {
  const lines = readFileSync(join(ROOT, file), 'utf8').split('\n');
  const sites: string[] = [];
  lines.forEach((line, i) => {
    const inline = /\bnew AppError\(/.test(line) || /\b(badRequest|conflict|forbidden)\(\s*['"`]/.test(line);
    const excused = line.includes(EXCUSED) || (lines[i - 1] ?? '').includes(EXCUSED);
    if (inline && !excused) sites.push(`${file}:${i + 1}: ${line.trim()}`);
  });
  return sites;
}

describe('error catalogues', () => {
  it('are the only place a code is written: no throw site outside them names one', () => {
    const files = ['src', 'oauth', 'mcp'].flatMap(sourceFiles);
    const sites = files
      .filter((f) => f !== CONSTRUCTOR_HOME && !NOT_YET_MOVED.some((dir) => f.startsWith(dir)))
      .flatMap(inlineCodeSites);
    expect(sites).toEqual([]);
  });

  it('hold each code once, in one spelling per concept', () => {
    const seen = new Map<string, string>();
    const clashes: string[] = [];
    // Two wire values of one concept that the contract fixes both of: the {detail} surface's
    // INVALID_TOKEN (CONTRACT §3) and RFC 6750's invalid_token the model routes, MCP and the
    // WWW-Authenticate header say.
    // And MCP's INVALID_REQUEST (a failed tool's text starts with it, as MCP clients match it: CONTRACT §10)
    // beside RFC 6749's invalid_request (decision 0106).
    const bothFixed = new Set(['invalid_token', 'invalid_request']);
    for (const { domain, catalogue } of ALL_ERROR_CATALOGUES) {
      for (const code of Object.keys(catalogue)) {
        const key = bothFixed.has(code) ? code : code.toUpperCase();
        const earlier = seen.get(key);
        if (earlier) clashes.push(`${code} in ${domain} and ${earlier}`);
        seen.set(key, domain);
      }
    }
    expect(clashes).toEqual([]);
  });

  it(`are listed in ${ERROR_DOC} exactly as they stand (npm run docs:errors writes it)`, () => {
    expect(readFileSync(join(ROOT, ERROR_DOC), 'utf8')).toBe(errorListMarkdown());
  });

  it('notice an inline code and a page that lags', () => {
    // The checks above can fail: a line that makes its own error is found, an excused one is not.
    expect(/\bnew AppError\(/.test("throw new AppError(400, 'X', 'y')")).toBe(true);
    expect(errorListMarkdown()).toContain('| `NOT_A_MEMBER` | 403 |');
    expect(errorListMarkdown()).toContain('| `invalid_grant` | 400 |');
  });
});
