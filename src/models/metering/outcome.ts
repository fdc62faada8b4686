import { signJws, type SigningKeys } from '../../../oauth/keys.js';
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
    // Signed with node:crypto on the event loop (oauth/keys.ts signJws): a hop to the thread pool cost
    // more CPU per call than the signature itself (decision 0167).
    async sign(o) {
      return signJws(await signing.current(), OUTCOME_TYP, {
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
