import QRCode from 'qrcode';
import { setTimeout as sleep } from 'node:timers/promises';
import { line, type IO } from './io.js';
import { inertLine } from './inert.js';
import { canOpenBrowser, openable, openOnEnter } from './browser.js';
import { spin } from './spinner.js';

// What both device logins share: showing the code to the person, and the polling rhythm of RFC 8628 §3.5.

export interface ShownCode {
  verification_uri: string;
  user_code: string;
  verification_uri_complete?: string;
  expires_in: number;
}

/**
 * Tells the person where to approve. On a terminal: the QR code (of verification_uri_complete), "Press
 * Enter to open the browser", and a spinner while waiting. Answers a function that stops both.
 */
export async function showCode(io: IO, code: ShownCode): Promise<() => void> {
  const out = io.stderr;
  const c = io.color;
  line(out, `To sign in, open ${c.bold(c.cyan(inertLine(code.verification_uri)))}`);
  line(
    out,
    `and enter the code ${c.bold(inertLine(code.user_code))}  (it expires in ${Math.round(Number(code.expires_in) / 60)} minutes).`,
  );
  if (code.verification_uri_complete) {
    line(out, `Or open ${inertLine(code.verification_uri_complete)}`);
    if (io.isTTY) {
      line(out, 'or scan this with your phone:');
      out.write(await QRCode.toString(code.verification_uri_complete, { type: 'terminal', small: true }));
    }
  }
  const page = openable(String(code.verification_uri_complete ?? code.verification_uri));
  const stopListening = page && canOpenBrowser(io) ? openOnEnter(io, page.toString()) : () => {};
  if (page && canOpenBrowser(io)) line(out, 'Press Enter to open the browser.');
  if (!io.isTTY) line(out, c.dim('Waiting for the approval… (Ctrl-C to stop)'));
  const waiting = spin(io, 'Waiting for the approval… (Ctrl-C to stop)');
  return () => {
    waiting.stop();
    stopListening();
  };
}

/** RFC 8628 §3.5: on slow_down the interval grows by 5 seconds for this and every later poll. */
export const SLOW_DOWN_STEP_SECONDS = 5;

/**
 * Polls until `poll` returns a value. It is asked at once, then every `interval` seconds; it answers
 * 'pending' or 'slow_down' (the interval grows, or becomes the server's new one when it says).
 */
export async function pollUntilDone<T>(
  io: IO,
  intervalSeconds: number,
  poll: () => Promise<T | 'pending' | { slowDown: number | undefined }>,
  /** Called when polling ends, whichever way (showCode's stop). */
  done: () => void = () => {},
): Promise<T> {
  try {
    return await pollEvery(io, intervalSeconds, poll);
  } finally {
    done();
  }
}

async function pollEvery<T>(
  io: IO,
  intervalSeconds: number,
  poll: () => Promise<T | 'pending' | { slowDown: number | undefined }>,
): Promise<T> {
  let interval = intervalSeconds;
  for (;;) {
    const result = await poll();
    if (result === 'pending') {
      // fall through to the wait
    } else if (typeof result === 'object' && result !== null && 'slowDown' in result) {
      interval = result.slowDown ?? interval + SLOW_DOWN_STEP_SECONDS;
    } else {
      return result;
    }
    await sleep(interval * 1000, undefined, { signal: io.signal });
  }
}
