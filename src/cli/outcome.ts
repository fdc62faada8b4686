import { compactVerify, createRemoteJWKSet } from 'jose';
import { CliError, EXIT } from './errors.js';
import { discover } from './server.js';
import { tokensAndMoney } from '../billing/par.js';

// The signed outcome of a call (docs/models.md, "The signed outcome"): a compact JWS (ES256, typ
// svc-outcome+jwt) over {sub, org, request_id, credits_debited, balance_credits, iat}, verified against
// the server's JWKS before a number from it is shown — the debit a person sees is the one the server signed.

export interface Outcome {
  sub: string;
  org: string;
  request_id: string;
  credits_debited: number;
  balance_credits: number;
  iat: number;
}

const keySets = new Map<string, ReturnType<typeof createRemoteJWKSet>>();

export async function verifyOutcome(
  origin: string,
  jws: string,
  requestId?: string | null,
): Promise<Outcome> {
  const as = await discover(origin);
  const jwksUri = as.jwks_uri ?? `${origin}/.well-known/jwks.json`;
  let keys = keySets.get(jwksUri);
  if (!keys) keySets.set(jwksUri, (keys = createRemoteJWKSet(new URL(jwksUri))));
  try {
    const { payload, protectedHeader } = await compactVerify(jws, keys, { algorithms: ['ES256'] });
    if (protectedHeader.typ !== 'svc-outcome+jwt') throw new Error('not an outcome');
    const outcome = JSON.parse(new TextDecoder().decode(payload)) as Outcome;
    if (requestId && outcome.request_id !== requestId) throw new Error('outcome of another call');
    return outcome;
  } catch (err) {
    throw new CliError(
      EXIT.untrusted,
      `The call's signed outcome did not verify (${(err as Error).message}); its debit is not shown.`,
      'Check the balance (`svc balance`), and tell the server’s operator.',
      'outcome_unverified',
    );
  }
}

/**
 * "920 tokens · $0.92 debited · balance 9,080 tokens · $9.08": svc tokens with their money at par, the
 * words the pages and mails use (docs/portal.md "Tokens and money").
 */
export function debitText(o: Outcome): string {
  return `${tokensAndMoney(o.credits_debited)} debited · balance ${tokensAndMoney(o.balance_credits)}`;
}
