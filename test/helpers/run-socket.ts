import WebSocket from 'ws';
import { parseAs } from './json.js';
import { eventually } from './eventually.js';
import type { ServerFrame } from '../../src/runs/frames.js';

/** A run socket (`/v1/runs/ws`) on a connection of its own, with its frames queued for `frame()`. */
export async function openRunSocket(baseUrl: string) {
  const ws = new WebSocket(`${baseUrl.replace('http', 'ws')}/v1/runs/ws`);
  const frames: ServerFrame[] = [];
  let pongs = 0;
  ws.on('message', (d) => frames.push(parseAs<ServerFrame>((d as Buffer).toString())));
  ws.on('pong', () => pongs++);
  const closed = new Promise<number>((resolve) => ws.on('close', (code) => resolve(code)));
  await new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve());
    ws.once('error', reject);
  });
  /** The next frame, once one has come (fails after `ms`). */
  const frame = async (ms = 15_000) => {
    await eventually(() => frames.length > 0, ms, 'a frame from the run socket', 5);
    return frames.shift()!;
  };
  return { ws, frame, closed, pongs: () => pongs };
}

/** A run socket that has sent its `auth` frame, with the server's first answer. */
export async function authenticateRunSocket(baseUrl: string, token: string) {
  const s = await openRunSocket(baseUrl);
  s.ws.send(JSON.stringify({ type: 'auth', token }));
  return { ...s, answer: await s.frame() };
}
