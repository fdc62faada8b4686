import { KeyObject, sign as signBytes } from 'node:crypto';
import { SIGNING_ALG, type SigningKeys } from '../../oauth/keys.js';
import { orgIdOf } from '../ids.js';

// The signed outcome of a model call (CONTRACT §9): a compact JWS, ES256 with the authorization server's
// signing keys (so it verifies against the same /.well-known/jwks.json), over
// {sub, org, request_id, credits_debited, balance_credits, iat}. Interface document, Authentication 7:
// "Signed outcome headers carry the acting user".

export const OUTCOME_HEADER = 'x-svc-outcome';
export const OUTCOME_TYP = 'svc-outcome+jwt';

export interface Outcome {
  userId: string;
  orgKey: string;
  requestId: string;
  creditsDebited: number;
  balanceCredits: number;
}

export interface OutcomeSigner {
  sign(outcome: Outcome): Promise<string>;
}

const b64 = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');
const keyObjects = new WeakMap<object, KeyObject>();

export function createOutcomeSigner(signing: SigningKeys): OutcomeSigner {
  return {
    async sign(o) {
      const { kid, privateKey } = await signing.current();
      // RFC 7515 §7.1 compact serialization, signed synchronously with node:crypto (RFC 7518 §3.4:
      // ES256 signatures are the raw r||s, `ieee-p1363`); WebCrypto's async signing costs a thread-pool
      // round trip on every response.
      let key = keyObjects.get(privateKey);
      if (!key) keyObjects.set(privateKey, (key = KeyObject.from(privateKey)));
      const header = b64({ alg: SIGNING_ALG, kid, typ: OUTCOME_TYP });
      const payload = b64({
        sub: o.userId,
        org: orgIdOf(o.orgKey),
        request_id: o.requestId,
        credits_debited: o.creditsDebited,
        balance_credits: o.balanceCredits,
        iat: Math.floor(Date.now() / 1000),
      });
      const signature = signBytes('sha256', Buffer.from(`${header}.${payload}`), {
        key,
        dsaEncoding: 'ieee-p1363',
      });
      return `${header}.${payload}.${signature.toString('base64url')}`;
    },
  };
}
