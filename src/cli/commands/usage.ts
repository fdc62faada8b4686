import { tokensAndMoney } from '../../billing/par.js';
import { EXIT } from '../errors.js';
import { line, type IO } from '../io.js';
import { withSpinner } from '../spinner.js';
import { inertLine, jsonText } from '../inert.js';
import { serverOrigin } from '../server.js';
import { callWithCredential, requireAccountCredential } from '../api.js';
import { actingOrg, signedInEntry } from '../session.js';
import { columns } from '../table.js';
import { bareOrg, memberships } from './whoami.js';

// `svc usage`: the acting organization's tokens debited today and this month (UTC), by model — two reads
// of GET /v1/clients/{id}/usage?group_by=model (docs/usage.md), which an OAuth grant with scope `account`
// may make (CONTRACT §7), so the sign-in of `svc login` is enough. Viewers read these totals too.

interface Row {
  key: string;
  label: string;
  calls: number;
  credits_debited: number;
}
interface Summary {
  from: number;
  to: number;
  data: Row[];
  totals: Omit<Row, 'key' | 'label'>;
}

const DAY_MS = 86_400_000;

/** The starts of this UTC day and this UTC month, in Unix seconds. */
export function periodStarts(now = new Date()): { today: number; month: number } {
  const day = Math.floor(now.getTime() / DAY_MS) * DAY_MS;
  const month = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1);
  return { today: day / 1000, month: month / 1000 };
}

export async function usage(io: IO, opts: { url?: string; json?: boolean }): Promise<number> {
  const origin = serverOrigin(opts.url, io.env);
  const entry = await signedInEntry(io, origin);
  const credential = await requireAccountCredential(io, origin, 'usage');
  const org = `client_${bareOrg(actingOrg(entry))}`;
  const nowSeconds = Math.ceil(Date.now() / 1000);
  const starts = periodStarts();
  const read = async (from: number) =>
    (await (
      await callWithCredential(
        io,
        origin,
        `/v1/clients/${encodeURIComponent(org)}/usage?group_by=model&from=${from}&to=${nowSeconds + 1}`,
        { method: 'GET' },
        credential,
      )
    ).json()) as Summary;
  const [today, month, orgs] = await withSpinner(io, 'Reading usage…', () =>
    Promise.all([read(starts.today), read(starts.month), memberships(io, origin)]),
  );
  const name = orgs?.find((m) => bareOrg(m.id) === bareOrg(org))?.name;
  if (opts.json) {
    line(io.stdout, jsonText({ org, org_name: name, today, month }));
    return EXIT.ok;
  }
  const c = io.color;
  line(io.stdout, `Tokens debited in ${name ? `${inertLine(name)} (${org})` : org}, UTC:`);
  const models = [...new Set([...month.data, ...today.data].map((r) => r.key))];
  const cell = (r: Omit<Row, 'key' | 'label'> | undefined) =>
    r
      ? `${tokensAndMoney(r.credits_debited)} (${r.calls.toLocaleString('en')} call${r.calls === 1 ? '' : 's'})`
      : tokensAndMoney(0);
  const rows = models.map((key) => [
    inertLine(
      month.data.find((r) => r.key === key)?.label ?? today.data.find((r) => r.key === key)?.label ?? key,
    ),
    cell(today.data.find((r) => r.key === key)),
    cell(month.data.find((r) => r.key === key)),
  ]);
  const table = [
    [c.bold('Model'), c.bold('Today'), c.bold('This month')],
    ...rows,
    [c.bold('Total'), cell(today.totals), cell(month.totals)],
  ];
  for (const l of columns(table, ['left', 'right', 'right'])) line(io.stdout, l);
  return EXIT.ok;
}
