import { describe, expect, it } from 'vitest';
import { compactVerify, generateKeyPair } from 'jose';
import { signJws } from '../../oauth/keys.js';

// The outcome's signature (CONTRACT §9): a compact ES256 JWS made with node:crypto on the event loop
// (oauth/keys.ts signJws, decision 0167), verifiable with the public key the JWKS publishes.

describe('outcome signing', () => {
  it('signs a compact ES256 JWS with the key id, verifiable with the public key', async () => {
    const { privateKey, publicKey } = await generateKeyPair('ES256', { extractable: true });
    const payload = {
      sub: 'usr_1',
      org: 'org_1',
      request_id: 'req_1',
      credits_debited: 3,
      balance_credits: 9,
    };
    const jws = signJws({ kid: 'k1', privateKey }, 'svc-outcome+jwt', payload);
    const { payload: body, protectedHeader } = await compactVerify(jws, publicKey);
    expect(protectedHeader).toEqual({ alg: 'ES256', typ: 'svc-outcome+jwt', kid: 'k1' });
    expect(JSON.parse(new TextDecoder().decode(body))).toEqual(payload);
  });
});
