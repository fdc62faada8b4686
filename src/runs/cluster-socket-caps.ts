import cluster, { type Worker } from 'node:cluster';
import { randomUUID } from 'node:crypto';
import {
  createSocketCounter,
  type SocketCapHolder,
  type SocketCapLimits,
  type SocketCaps,
} from './socket-caps.js';

// The run-socket caps under WEB_CONCURRENCY > 1 (src/cluster.ts). A socket lives in one worker, but the
// caps are for the server: counted per worker, N workers would let an organization hold N × its cap. So
// the primary keeps the one count (socket-caps.ts's counter) and workers ask it over the cluster's IPC
// channel, once when a socket authenticates and once when it closes. A worker that dies loses its sockets
// with it, so the primary releases everything that worker held.

const TAKE = 'svc:socket-cap-take';
const GRANT = 'svc:socket-cap-grant';
const RELEASE = 'svc:socket-cap-release';
/** The primary answers from memory; a worker that hears nothing in this long refuses the socket. */
const GRANT_WAIT_MS = 2_000;

interface Take extends SocketCapHolder {
  type: typeof TAKE;
  id: string;
}
interface Grant {
  type: typeof GRANT;
  id: string;
  granted: boolean;
}
interface Release {
  type: typeof RELEASE;
  id: string;
}

const isMessage = <T extends { type: string }>(msg: unknown, type: T['type']): msg is T =>
  !!msg && typeof msg === 'object' && (msg as { type?: unknown }).type === type;

/** In the primary: keep the cluster's count of run sockets and answer the workers' takes and releases. */
export function serveClusterSocketCaps(limits: SocketCapLimits): void {
  const take = createSocketCounter(limits);
  const held = new Map<Worker, Map<string, () => void>>();
  cluster.on('message', (worker, msg: unknown) => {
    if (isMessage<Take>(msg, TAKE)) {
      const release = take(msg);
      if (release) {
        if (!held.has(worker)) held.set(worker, new Map());
        held.get(worker)!.set(msg.id, release);
      }
      worker.send({ type: GRANT, id: msg.id, granted: release !== null } satisfies Grant);
    } else if (isMessage<Release>(msg, RELEASE)) {
      const mine = held.get(worker);
      mine?.get(msg.id)?.();
      mine?.delete(msg.id);
    }
  });
  cluster.on('exit', (worker) => {
    for (const release of held.get(worker)?.values() ?? []) release();
    held.delete(worker);
  });
}

/** In a worker: the caps, asked of the primary. No answer in time refuses the socket (fail closed). */
export function clusterSocketCaps(): SocketCaps {
  return {
    take: (holder) =>
      new Promise((resolve) => {
        const id = randomUUID();
        const timer = setTimeout(() => {
          process.off('message', onMessage);
          // A late grant would count a socket that never opened: give it back.
          process.send?.({ type: RELEASE, id } satisfies Release);
          resolve(null);
        }, GRANT_WAIT_MS);
        function onMessage(msg: unknown) {
          if (!isMessage<Grant>(msg, GRANT) || msg.id !== id) return;
          clearTimeout(timer);
          process.off('message', onMessage);
          if (!msg.granted) return resolve(null);
          let released = false;
          resolve(() => {
            if (released) return;
            released = true;
            process.send?.({ type: RELEASE, id } satisfies Release);
          });
        }
        process.on('message', onMessage);
        process.send!({
          type: TAKE,
          id,
          orgKey: holder.orgKey,
          userId: holder.userId,
        } satisfies Take);
      }),
  };
}
