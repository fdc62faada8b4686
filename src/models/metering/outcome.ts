import { signJwsOffLoop, type SigningKeys } from '../../../oauth/keys.js';
import { orgIdOf } from '../../ids.js';

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
    // Signed with node:crypto on the thread pool (oauth/keys.ts signJwsOffLoop): the event loop that
    // serves every call spends nothing on the signature (decision 0159).
    async sign(o) {
      return signJwsOffLoop(await signing.current(), OUTCOME_TYP, {
        sub: o.userId,
        org: orgIdOf(o.orgKey),
        request_id: o.requestId,
        credits_debited: o.creditsDebited,
        balance_credits: o.balanceCredits,
        iat: Math.floor(Date.now() / 1000),
      });
    },
  };
}
