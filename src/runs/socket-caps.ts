import type { Actor } from '../models/actor.js';

// How many authenticated run sockets one organization and one user may hold open in this process
// (issue 22 item 5: 200 idle sockets per organization were held with no run). A socket counts from its
// `auth` to its close; over either cap the `auth` is refused (error frame `too_many_sockets`, close
// 4429). RUN_SOCKETS_PER_ORG and RUN_SOCKETS_PER_USER (docs/limits.md). Counted per process, as the
// sockets themselves are: behind several processes each holds its own count.

export const CLOSE_TOO_MANY_SOCKETS = 4429;

export interface SocketCaps {
  /** Counts the socket in, or returns null when its org or user already holds its cap. */
  take(actor: Pick<Actor, 'orgKey' | 'userId'>): (() => void) | null;
}

export function createSocketCaps(limits: { perOrg: number; perUser: number }): SocketCaps {
  const byOrg = new Map<string, number>();
  const byUser = new Map<string, number>();
  const add = (map: Map<string, number>, key: string, n: number) => {
    const next = (map.get(key) ?? 0) + n;
    if (next === 0) map.delete(key);
    else map.set(key, next);
  };
  return {
    take({ orgKey, userId }) {
      if ((byOrg.get(orgKey) ?? 0) >= limits.perOrg || (byUser.get(userId) ?? 0) >= limits.perUser)
        return null;
      add(byOrg, orgKey, 1);
      add(byUser, userId, 1);
      let released = false;
      return () => {
        if (released) return;
        released = true;
        add(byOrg, orgKey, -1);
        add(byUser, userId, -1);
      };
    },
  };
}
