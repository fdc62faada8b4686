import type { Actor } from '../models/admission/actor.js';

// How many authenticated run sockets one organization and one user may hold open (200
// idle sockets per organization were held with no run). A socket counts from its `auth` to its close;
// over either cap the `auth` is refused (error frame `too_many_sockets`, close 4429).
// RUN_SOCKETS_PER_ORG and RUN_SOCKETS_PER_USER (docs/limits.md). One process counts its own sockets;
// under WEB_CONCURRENCY the cluster's primary keeps the one count for every worker
// (cluster-socket-caps.ts), so the caps hold for the whole server, not per worker.

export const CLOSE_TOO_MANY_SOCKETS = 4429;

export type SocketCapHolder = Pick<Actor, 'orgKey' | 'userId'>;

export interface SocketCapLimits {
  perOrg: number;
  perUser: number;
}

/** Counts a socket in, or returns null when its org or user already holds its cap. */
export type TakeSocketCap = (holder: SocketCapHolder) => (() => void) | null;

export interface SocketCaps {
  /** Resolves to the socket's release, or null when its org or user already holds its cap. */
  take(holder: SocketCapHolder): Promise<(() => void) | null>;
}

/** The count itself: kept by a lone process for its sockets, and by a cluster's primary for all. */
export function createSocketCounter(limits: SocketCapLimits): TakeSocketCap {
  const byOrg = new Map<string, number>();
  const byUser = new Map<string, number>();
  const add = (map: Map<string, number>, key: string, n: number) => {
    const next = (map.get(key) ?? 0) + n;
    if (next === 0) map.delete(key);
    else map.set(key, next);
  };
  return ({ orgKey, userId }) => {
    if ((byOrg.get(orgKey) ?? 0) >= limits.perOrg || (byUser.get(userId) ?? 0) >= limits.perUser) return null;
    add(byOrg, orgKey, 1);
    add(byUser, userId, 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      add(byOrg, orgKey, -1);
      add(byUser, userId, -1);
    };
  };
}

/** The caps of a process that serves alone. */
export function localSocketCaps(limits: SocketCapLimits): SocketCaps {
  const take = createSocketCounter(limits);
  return { take: (holder) => Promise.resolve(take(holder)) };
}
