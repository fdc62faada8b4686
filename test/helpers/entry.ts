import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

// How a test starts one of svc's own entry points (src/main.ts, src/cli/cli.ts) as a child process.
// `npm run build` (which .ci/run runs before the tests) leaves the compiled files in dist/; when they are
// newer than every source (the check scripts/ensure-built.mjs makes for `npm start`), the child runs
// them with plain node, as `npm start` and bin/svc.mjs do. Otherwise — no build yet, or a source edited
// since — it runs the source through tsx, so a test never runs code older than the checkout. tsx
// compiles at every spawn: about 2 CPU-seconds more per svc process, 0.6 per CLI process.

const ROOT = join(import.meta.dirname, '../..');
/** The folders tsconfig.build.json compiles into dist/. */
const SOURCES = ['src', 'oauth', 'mcp'];
/** tsx's loader by absolute URL: a child may run in another working directory (svc run's tools do). */
const TSX_LOADER = pathToFileURL(join(ROOT, 'node_modules/tsx/dist/loader.mjs')).href;

function newestMtime(dir: string): number {
  let newest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) newest = Math.max(newest, newestMtime(path));
    else if (entry.name.endsWith('.ts')) newest = Math.max(newest, statSync(path).mtimeMs);
  }
  return newest;
}

let newestSource: number | undefined;

/**
 * The node arguments that run `source` (relative to the repository, `src/main.ts`): its dist/ file when
 * the build is up to date, else the source with tsx's loader.
 */
export function nodeEntry(source: string): string[] {
  const built = join(ROOT, 'dist', source.replace(/\.ts$/, '.js'));
  newestSource ??= Math.max(...SOURCES.map((d) => newestMtime(join(ROOT, d))));
  if (existsSync(built) && statSync(built).mtimeMs >= newestSource) return [built];
  return ['--import', TSX_LOADER, join(ROOT, source)];
}
