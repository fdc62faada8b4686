import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { isBuilt } from '../../scripts/ensure-built.mjs';

// How a test starts one of svc's own entry points (src/main.ts, src/cli/cli.ts) as a child process.
// `npm run build` (which .ci/run runs before the tests) leaves the compiled files in dist/; when they are
// newer than every source (scripts/ensure-built.mjs's isBuilt, the check `npm start` makes), the child runs
// them with plain node, as `npm start` and bin/svc.mjs do. Otherwise — no build yet, or a source edited
// since — it runs the source through tsx, so a test never runs code older than the checkout. tsx
// compiles at every spawn: about 2 CPU-seconds more per svc process, 0.6 per CLI process.

const ROOT = join(import.meta.dirname, '../..');
/** tsx's loader by absolute URL: a child may run in another working directory (svc run's tools do). */
const TSX_LOADER = pathToFileURL(join(ROOT, 'node_modules/tsx/dist/loader.mjs')).href;

/**
 * The node arguments that run `source` (relative to the repository, `src/main.ts`): its dist/ file when
 * the build is up to date, else the source with tsx's loader.
 */
export function nodeEntry(source: string): string[] {
  const built = join('dist', source.replace(/\.ts$/, '.js'));
  if (isBuilt(built)) return [join(ROOT, built)];
  return ['--import', TSX_LOADER, join(ROOT, source)];
}
