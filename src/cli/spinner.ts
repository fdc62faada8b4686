import yoctoSpinner from 'yocto-spinner';
import type { IO } from './io.js';

// A spinner on stderr while svc waits for something it cannot show progress of — an approval, the model's
// first token, a tool — on a terminal only (stdout a TTY): in a pipe or a log it would be noise.

export interface Spinning {
  /** Stops it and clears its line; safe to call twice. */
  stop(): void;
}

export function spin(io: IO, text: string): Spinning {
  if (!io.isTTY) return { stop() {} };
  // handleSignals off: Ctrl-C is svc's own (it cancels a run), not the spinner's to exit on.
  const spinner = yoctoSpinner({ text, stream: io.stderr, handleSignals: false }).start();
  let stopped = false;
  return {
    stop() {
      if (stopped) return;
      stopped = true;
      spinner.stop();
    },
  };
}

/** `work` with a spinner beside it (on a terminal); the spinner stops whichever way the work ends. */
export async function withSpinner<T>(io: IO, text: string, work: () => Promise<T>): Promise<T> {
  const spinning = spin(io, text);
  try {
    return await work();
  } finally {
    spinning.stop();
  }
}
