#!/usr/bin/env node
// `npm start`: builds first when the compiled output is missing or older than the sources
// (CONTRACT §1: npm start works right after npm ci), then runs the server.
import { ensureBuilt } from './ensure-built.mjs';

await import(ensureBuilt('dist/src/main.js'));
