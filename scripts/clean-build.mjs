#!/usr/bin/env node
// `npm pack` / `npm publish` (the prepack script): a clean build, so the package ships exactly the
// compiled output of today's sources — never a file left in dist/ by a source since deleted. The package
// ships dist/src/cli/ and no TypeScript (package.json `files`; docs/cli.md, Install).
import { spawnSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
rmSync(join(root, 'dist'), { recursive: true, force: true });
const tsc = join(root, 'node_modules/typescript/bin/tsc');
const result = spawnSync(process.execPath, [tsc, '-p', join(root, 'tsconfig.build.json')], {
  stdio: 'inherit',
});
process.exit(result.status ?? 1);
