// Builds (tsc -p tsconfig.build.json) when `entry` is missing or older than the newest source, then
// answers the entry's absolute URL. Shared by `npm start` (scripts/start.mjs) and the `svc` bin.
// An installed package (`npm i -g`, docs/cli.md) ships the compiled client and no sources and no
// TypeScript: there is nothing to build, so the shipped entry runs as it is.
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

function newestMtime(dir) {
  let newest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) newest = Math.max(newest, newestMtime(path));
    else if (entry.name.endsWith('.ts')) newest = Math.max(newest, statSync(path).mtimeMs);
  }
  return newest;
}

/**
 * Whether `entry` (a compiled file, relative to the repository) is at least as new as every source; always
 * in an installed package, which has no sources. Also asked by the tests before they start svc's entry
 * points from dist/ (test/helpers/entry.ts).
 */
export function isBuilt(entry) {
  if (!existsSync(join(root, 'src'))) return true;
  const path = join(root, entry);
  const sources = Math.max(...['src', 'oauth', 'mcp'].map((d) => newestMtime(join(root, d))));
  return existsSync(path) && statSync(path).mtimeMs >= sources;
}

/** `log` gets the "building" notice: stdout for the server, stderr for the CLI (its stdout may be JSON). */
export function ensureBuilt(entry, log = process.stdout) {
  const path = join(root, entry);
  if (!isBuilt(entry)) {
    log.write('svc: building…\n');
    const tsc = join(root, 'node_modules/typescript/bin/tsc');
    const result = spawnSync(process.execPath, [tsc, '-p', join(root, 'tsconfig.build.json')], {
      stdio: ['ignore', log === process.stderr ? 2 : 1, 2],
    });
    if (result.status !== 0) process.exit(result.status ?? 1);
  }
  return pathToFileURL(path).href;
}
