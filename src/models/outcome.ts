import { SignJWT } from 'jose';
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

export function createOutcomeSigner(signing: SigningKeys): OutcomeSigner {
  return {
    async sign(o) {
      const { kid, privateKey } = await signing.current();
      return new SignJWT({
        org: orgIdOf(o.orgKey),
        request_id: o.requestId,
        credits_debited: o.creditsDebited,
        balance_credits: o.balanceCredits,
      })
        .setProtectedHeader({ alg: SIGNING_ALG, kid, typ: OUTCOME_TYP })
        .setSubject(o.userId)
        .setIssuedAt()
        .sign(privateKey);
    },
  };
}
