import { main } from './main.js';
import { processIO } from './io.js';

// The process entry of `svc` (bin/svc.mjs runs the compiled form). Ctrl-C aborts the command's signal
// instead of killing the process at once, so a run can send `cancel` and a login stop its listener;
// a second Ctrl-C exits.

// A reader that goes away (`svc run --help | head -1`) ends the output, not the process with a stack trace:
// the command stops there, as a shell tool stops at a closed pipe, with the exit status it had so far.
for (const stream of [process.stdout, process.stderr]) {
  stream.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code !== 'EPIPE') throw err;
    process.exit(typeof process.exitCode === 'number' ? process.exitCode : 0);
  });
}

const controller = new AbortController();
process.once('SIGINT', () => {
  controller.abort();
  process.once('SIGINT', () => process.exit(130));
});
const code = await main(process.argv.slice(2), processIO(controller.signal));
process.exitCode = code;
// Nothing should be left running, but an idle keep-alive socket must not hold the terminal.
setTimeout(() => process.exit(code), 100).unref();
