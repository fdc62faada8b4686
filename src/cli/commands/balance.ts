import { tokensAndMoney } from '../../billing/par.js';
import { EXIT } from '../errors.js';
import { line, type IO } from '../io.js';
import { withSpinner } from '../spinner.js';
import { inertLine, jsonText } from '../inert.js';
import { serverOrigin } from '../server.js';
import { callWithCredential, requireAccountCredential } from '../api.js';
import { actingOrg, signedInEntry } from '../session.js';
import { bareOrg, memberships } from './whoami.js';

// `svc balance`: the acting organization's token balance and, when you own it, your pool
// (GET /v1/clients/{id}/credits/balance and GET /v1/owner/balance, docs/billing.md).

export async function balance(io: IO, opts: { url?: string; json?: boolean }): Promise<number> {
  const origin = serverOrigin(opts.url, io.env);
  const entry = await signedInEntry(io, origin);
  const credential = await requireAccountCredential(io, origin, 'balances');
  const org = `client_${bareOrg(actingOrg(entry))}`;
  const membership = (await withSpinner(io, 'Reading the balance…', () => memberships(io, origin)))?.find(
    (m) => bareOrg(m.id) === bareOrg(org),
  );
  const role = membership?.role;
  const get = async (path: string) =>
    (await (await callWithCredential(io, origin, path, { method: 'GET' }, credential)).json()) as Record<
      string,
      unknown
    >;
  const client = await get(`/v1/clients/${org}/credits/balance`);
  const owner = role === 'owner' ? await get('/v1/owner/balance') : undefined;
  if (opts.json) {
    line(io.stdout, jsonText({ org, role, balance: client, ...(owner ? { owner } : {}) }));
    return EXIT.ok;
  }
  const name = membership ? `${inertLine(membership.name)} (${inertLine(org)})` : inertLine(org);
  line(io.stdout, `${name}: ${fmt(client.balance_credits)}`);
  if (owner) line(io.stdout, `Your pool (unallocated): ${fmt(owner.unallocated_credits)}`);
  return EXIT.ok;
}

/** "7,000 tokens · $7.00": svc tokens with their money at par. */
const fmt = (n: unknown) => (typeof n === 'number' ? tokensAndMoney(n) : inertLine(n));
