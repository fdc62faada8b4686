import type { Readable, Writable } from 'node:stream';
import picocolors from 'picocolors';

// Every command writes through this object, never through process.* (STYLE, "The terminal client"): a test
// hands it plain streams, the pseudo-terminal test and a person get the real ones. Colour and spinners
// appear only when stderr/stdout is a terminal and NO_COLOR is unset (https://no-color.org).

export type Colors = ReturnType<typeof picocolors.createColors>;

export interface IO {
  stdout: Writable;
  stderr: Writable;
  stdin: Readable;
  /** stdout is a terminal: human rendering, colour. */
  isTTY: boolean;
  /** stdin is a terminal: prompts can be asked. */
  stdinIsTTY: boolean;
  env: NodeJS.ProcessEnv;
  color: Colors;
  /** Aborted on Ctrl-C (SIGINT), so long waits and runs can stop cleanly. */
  signal: AbortSignal;
}

export function processIO(signal: AbortSignal): IO {
  const isTTY = Boolean(process.stdout.isTTY);
  const colour = isTTY && !('NO_COLOR' in process.env && process.env.NO_COLOR !== '');
  return {
    stdout: process.stdout,
    stderr: process.stderr,
    stdin: process.stdin,
    isTTY,
    stdinIsTTY: Boolean(process.stdin.isTTY),
    env: process.env,
    color: picocolors.createColors(colour),
    signal,
  };
}

export function line(stream: Writable, text = ''): void {
  stream.write(`${text}\n`);
}
