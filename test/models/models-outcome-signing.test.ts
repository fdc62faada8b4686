import { describe, expect, it } from 'vitest';
import { compactVerify, generateKeyPair } from 'jose';
import { signJws, signJwsOffLoop } from '../../oauth/keys.js';
import { hashPassword, PASSWORD_HASHES_AT_ONCE } from '../../src/accounts/password.js';

// The outcome's signature is made on libuv's thread pool (oauth/keys.ts signJwsOffLoop, decision 0159),
// which password hashing shares: hashes are let through PASSWORD_HASHES_AT_ONCE at a time, so a burst of
// sign-ins never queues a model call's signature behind it.

const key = async () => {
  const { privateKey, publicKey } = await generateKeyPair('ES256', { extractable: true });
  return { signing: { kid: 'k1', privateKey }, publicKey };
};

describe('outcome signing off the event loop', () => {
  it('signs the same compact ES256 JWS as the synchronous signer, verifiable with the public key', async () => {
    const { signing, publicKey } = await key();
    const payload = {
      sub: 'usr_1',
      org: 'org_1',
      request_id: 'req_1',
      credits_debited: 3,
      balance_credits: 9,
    };
    for (const jws of [
      await signJwsOffLoop(signing, 'svc-outcome+jwt', payload),
      signJws(signing, 'svc-outcome+jwt', payload),
    ]) {
      const { payload: body, protectedHeader } = await compactVerify(jws, publicKey);
      expect(protectedHeader).toEqual({ alg: 'ES256', typ: 'svc-outcome+jwt', kid: 'k1' });
      expect(JSON.parse(new TextDecoder().decode(body))).toEqual(payload);
    }
  });

  it(`a signature asked for during a burst of password hashes is not queued behind them (${PASSWORD_HASHES_AT_ONCE} hash at once)`, async () => {
    const { signing } = await key();
    await signJwsOffLoop(signing, 't', {}); // the key object made once, as on a warm process
    let hashed = 0;
    const burst = Array.from({ length: 8 }, (_, i) => hashPassword(`burst-${i}-A1!`).then(() => hashed++));
    // One turn of the event loop: the hashes let through are on the pool's queue before the signature.
    await new Promise((resolve) => setImmediate(resolve));
    const signature = await signJwsOffLoop(signing, 't', { n: 1 });
    // libuv's four threads serve jobs in arrival order: were all eight hashes in its queue, the signature
    // would start only once four of them had finished. It finished before that.
    expect(signature.split('.')).toHaveLength(3);
    expect(hashed).toBeLessThan(4);
    await Promise.all(burst);
    expect(hashed).toBe(8);
  });
});
