/**
 * Waits until `check` holds, asking again every `intervalMs`, or fails after `ms` naming `what`.
 * The one way a test waits for something that happens on its own time (a worker's pass, a row, a
 * delivery, a socket closing): a positive signal, never a fixed sleep (STYLE "Tests").
 */
export async function eventually(
  check: () => boolean | Promise<boolean>,
  ms = 15_000,
  what = 'condition',
  intervalMs = 25,
): Promise<void> {
  const until = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > until) throw new Error(`${what} not met within ${ms} ms`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

/** Like `eventually`, for a value: polls `read` until `done(value)` holds and returns that value. */
export async function eventuallyValue<T>(
  read: () => T | Promise<T>,
  done: (value: T) => boolean,
  ms = 15_000,
  what = 'condition',
  intervalMs = 25,
): Promise<T> {
  let value = await read();
  const until = Date.now() + ms;
  while (!done(value)) {
    if (Date.now() > until) throw new Error(`${what} not met within ${ms} ms`);
    await new Promise((r) => setTimeout(r, intervalMs));
    value = await read();
  }
  return value;
}
