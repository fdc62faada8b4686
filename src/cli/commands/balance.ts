import { CliError, EXIT } from '../errors.js';
import { line, type IO } from '../io.js';
import { jsonText } from '../inert.js';
import { serverOrigin } from '../server.js';
import { apiKey, getWithKey } from '../api.js';
import { signedInEntry } from '../session.js';
import { memberships } from './whoami.js';

// `svc balance`: the acting organization's token balance and, when you own it, your pool
// (GET /v1/clients/{id}/credits/balance and GET /v1/owner/balance, docs/billing.md).

export async function balance(io: IO, opts: { url?: string; json?: boolean }): Promise<number> {
  const origin = serverOrigin(opts.url, io.env);
  const entry = await signedInEntry(io, origin);
  const key = await apiKey(io, origin);
  if (!key) {
    throw new CliError(
      EXIT.auth,
      'Reading balances needs an API key: the billing routes do not take OAuth grants.',
      'Run `svc login --api-key` (each chat shows the balance left after it, too).',
    );
  }
  const org = entry.api_key!.org;
  const role = (await memberships(io, origin))?.find(
    (m) => m.id.replace(/^\w+_/, '') === org.replace(/^\w+_/, ''),
  )?.role;
  const client = await getWithKey<Record<string, unknown>>(
    io,
    origin,
    `/v1/clients/${org}/credits/balance`,
    key,
  );
  const owner =
    role === 'owner'
      ? await getWithKey<Record<string, unknown>>(io, origin, '/v1/owner/balance', key)
      : undefined;
  if (opts.json) {
    line(io.stdout, jsonText({ org, role, balance: client, ...(owner ? { owner } : {}) }));
    return EXIT.ok;
  }
  line(io.stdout, `${org}: ${fmt(client.balance_credits)} tokens`);
  if (owner) line(io.stdout, `Your pool (unallocated): ${fmt(owner.unallocated_credits)} tokens`);
  return EXIT.ok;
}

const fmt = (n: unknown) => (typeof n === 'number' ? n.toLocaleString('en') : String(n));
