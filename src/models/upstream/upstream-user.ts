import { createHmac } from 'node:crypto';

// The `user` a provider sees (CONTRACT §8; OpenAI's end-user id for abuse monitoring): svc's own opaque,
// stable id of the acting user, never the caller's value and never an e-mail or an internal id. An HMAC
// under the server's key, so nobody without the key can link it to an account, and the operator can
// (by computing it for a user the provider names).

const MEMO_LIMIT = 10_000;

export function createUpstreamUserIds(hmacKey: Buffer | string): (userId: string) => string {
  const memo = new Map<string, string>();
  return (userId) => {
    let id = memo.get(userId);
    if (id === undefined) {
      id = `svcu_${createHmac('sha256', hmacKey).update(`upstream user:${userId}`).digest('base64url').slice(0, 22)}`;
      // Bounded: a process serving very many users starts over rather than grow without end.
      if (memo.size >= MEMO_LIMIT) memo.clear();
      memo.set(userId, id);
    }
    return id;
  };
}
