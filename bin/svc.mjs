#!/usr/bin/env node
// `svc`, the terminal client (docs/cli.md). In a checkout, `npx svc …` runs this file; `npm i -g` links it.
// It runs the compiled client in dist/, building first when dist/ is missing or older than the sources,
// exactly as `npm start` does (scripts/ensure-built.mjs), so it works on a fresh clone after `npm ci`.
import { ensureBuilt } from '../scripts/ensure-built.mjs';

await import(ensureBuilt('dist/src/cli/cli.js', process.stderr));
