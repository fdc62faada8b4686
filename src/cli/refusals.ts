import { CliError, EXIT } from './errors.js';
import { inertLine } from './inert.js';

// A 402 said as what happened and what to do (docs/cli.md, "When a call is refused"). The error names
// only its code and, for the organization's own refusal, `needed_credits`; the rest is read from the
// account routes with the same sign-in (CONTRACT §7 scope `account`): the organization's name, what it
// has left, and the caller's own budget (GET /v1/clients/{id}/budget). A read that fails leaves its part
// out; the code, the exit status 4 and the next step stay.

/** GET a /v1 path with the caller's credential, answering its JSON (or throwing). */
export type Read = (path: string) => Promise<unknown>;

interface Budget {
  token_id: number | null;
  period: 'day' | 'week' | 'month';
  budget_credits: number;
  remaining_credits: number;
  period_end: number;
}

const ADJECTIVE = { day: 'daily', week: 'weekly', month: 'monthly' } as const;

const tokens = (n: number) => `${n.toLocaleString('en')} token${n === 1 ? '' : 's'}`;

/** When a budget resets: the time alone when it is within a day, else the date and time (UTC). */
export function resetTime(periodEnd: number, now = Date.now()): string {
  const iso = new Date(periodEnd * 1000).toISOString();
  const time = `${iso.slice(11, 16)} UTC`;
  return periodEnd * 1000 - now <= 86_400_000 ? time : `${iso.slice(0, 10)} ${time}`;
}

async function attempt<T>(read: () => Promise<T>): Promise<T | undefined> {
  try {
    return await read();
  } catch {
    return undefined;
  }
}

async function orgName(read: Read, org: string): Promise<string | undefined> {
  const bare = org.replace(/^(client|org)_/, '');
  const list = await attempt(
    async () => (await read('/v1/clients?limit=100')) as { data: { id: string; name: string }[] },
  );
  const name = list?.data.find((c) => c.id.replace(/^(client|org)_/, '') === bare)?.name;
  return name === undefined ? undefined : inertLine(name);
}

/** The person-facing error for a 402 from a model call or a run, for the organization `org`. */
export async function paymentRefused(
  origin: string,
  org: string | undefined,
  error: { code: string; needed_credits?: unknown },
  read: Read,
): Promise<CliError> {
  const clientId = org ? `client_${org.replace(/^(client|org)_/, '')}` : undefined;
  const name = clientId ? await orgName(read, clientId) : undefined;
  const where = name ?? (clientId ? inertLine(clientId) : 'this organization');

  if (error.code === 'member_budget_exhausted') {
    const mine =
      clientId &&
      (await attempt(
        async () =>
          (await read(`/v1/clients/${clientId}/budget`)) as {
            budget: Budget | null;
            token_budgets: Budget[];
          },
      ));
    // The budget that stopped the call: of those set, the one with the least left.
    const budget = mine
      ? [mine.budget, ...mine.token_budgets]
          .filter((b): b is Budget => Boolean(b))
          .sort((a, b) => a.remaining_credits - b.remaining_credits)[0]
      : undefined;
    const whose = budget?.token_id != null ? 'This API key’s' : 'Your';
    return new CliError(
      EXIT.denied,
      budget
        ? `${whose} ${ADJECTIVE[budget.period]} budget of ${tokens(budget.budget_credits)} in ${where} is used (resets ${resetTime(budget.period_end)}); ask the owner.`
        : `Your token budget in ${where} for this period is used; ask the owner.`,
      'The owner can raise it on the organization’s billing page; it also resets at the start of the next period.',
      'member_budget_exhausted',
    );
  }

  const needed = typeof error.needed_credits === 'number' ? error.needed_credits : undefined;
  const balance = clientId
    ? await attempt(
        async () => (await read(`/v1/clients/${clientId}/credits/balance`)) as { balance_credits: number },
      )
    : undefined;
  const left = typeof balance?.balance_credits === 'number' ? balance.balance_credits : undefined;
  const facts = [
    left === undefined ? undefined : `${where} has ${tokens(left)} left`,
    needed === undefined ? undefined : `this call needed at least ${tokens(needed)}`,
  ].filter(Boolean);
  const billing = clientId ? `${origin}/account/clients/${clientId}/billing` : `${origin}/account`;
  return new CliError(
    EXIT.denied,
    facts.length
      ? `${sentence(facts.join('; '))}.`
      : `${sentence(where)} has not enough tokens left for this call.`,
    `Top up on ${billing} (the owner), or ask its owner to allocate more; \`svc balance\` shows what is left.`,
    'insufficient_credits',
  );
}

/** Starts a sentence: our own words are capitalized, an organization's name is left as it was given. */
const sentence = (s: string) => (s.startsWith('this ') ? `T${s.slice(1)}` : s);
