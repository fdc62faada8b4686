import type { ServerResponse } from 'node:http';

// The fake provider's stream faults, shared by its two APIs (chat completions: fake-upstream.ts;
// Responses: fake-upstream-responses.ts): a delay before each content chunk, the connection broken
// after N chunks, or silence after N chunks until the caller gives up.

export interface StreamFaultKnobs {
  chunkDelayMs: number;
  breakAfterChunks: number | null;
  stallAfterChunks: number | null;
  /** Streams that were cut by the client before the end. */
  abortedStreams: number;
}

export const sleep = (ms: number) => (ms > 0 ? new Promise((r) => setTimeout(r, ms)) : Promise.resolve());

/**
 * Before the content chunk numbered `sent` (from 0): waits the chunk delay, then says whether it goes.
 * False: the stream ends here (the client left, the connection was broken, or it stalled until the
 * client left); the caller writes nothing more.
 */
export async function contentChunkGoes(
  knobs: StreamFaultKnobs,
  res: ServerResponse,
  sent: number,
): Promise<boolean> {
  await sleep(knobs.chunkDelayMs); // the scenario knob: a provider slow between chunks
  if (res.destroyed) {
    knobs.abortedStreams++;
    return false;
  }
  if (knobs.breakAfterChunks !== null && sent >= knobs.breakAfterChunks) {
    res.socket?.destroy();
    return false;
  }
  if (knobs.stallAfterChunks !== null && sent >= knobs.stallAfterChunks) {
    await new Promise((r) => res.once('close', r)); // silent until the caller gives up
    knobs.abortedStreams++;
    return false;
  }
  return true;
}
