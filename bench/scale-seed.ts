import type pg from 'pg';

// Seeds a PostgreSQL database to a production's shape (per N "other" users): N users, default
// clients, owner memberships, `svc_` tokens and projects; 3N billing accounts (org, pool, sink); 8N ledger
// rows of theirs (a trial grant and its allocation, 6 `usage` rows each) and 2N `usage` rows of the
// measured client, with one settled hold and one usage record per `usage` row (8N). The measured client's
// rows come first, everyone else's after, as in a client that was busy and then quiet while the rest
// kept writing: the shape in which a list that walks the primary key reads every other client's rows.
//
// Rows are made by generate_series in chunks (one statement per chunk, not one insert per row), with
// balances written so that every ledger invariant holds (`npm run billing:reconcile` passes on it).
// The measured user and client exist already (registered through the API, so they can sign in).
//
// Used by the scale bench (bench/scale.ts) and the plan test (test/scale/scale-plans.test.ts).

export interface SeedOptions {
  /** N: other users (each with a client, token, project, 8 ledger rows). */
  users: number;
  measured: { userId: string; orgKey: string };
  /** Projects of the measured client (default N/20, at least 50). */
  measuredProjects?: number;
  /**
   * The measured client's own `usage` rows (default 2N). With N = 0, the client alone: its own rows and
   * no one else's (the scale bench's empty side, for what an offset costs an organization alone).
   */
  measuredRows?: number;
  /**
   * The measured client's own audit events (default 2N), after the events its registration wrote; the
   * others get AUDIT_PER_USER each.
   */
  measuredAuditEvents?: number;
  /** Rows per statement. */
  chunk?: number;
  progress?: (line: string) => void;
}

export interface SeedCounts {
  users: number;
  ledgerRows: number;
  measuredLedgerRows: number;
  holds: number;
  measuredProjects: number;
  auditEvents: number;
  measuredAuditEvents: number;
}

const USAGE_PER_USER = 6;
/** Audit events of each other client (a million at the default N of 100,000). */
const AUDIT_PER_USER = 10;
/** The actions the seeded events take in turn (a filter by one of them keeps a fifth of a chain). */
const SEED_ACTIONS = ['token.created', 'token.revoked', 'member.added', 'limits.set', 'budget.set'];
const TRIAL = 50_000;

async function chunked(
  c: pg.ClientBase,
  total: number,
  chunk: number,
  statement: string,
  params: (from: number, to: number) => unknown[],
) {
  for (let from = 1; from <= total; from += chunk) {
    const to = Math.min(total, from + chunk - 1);
    await c.query(statement, params(from, to));
  }
}

/** Seeds `c`'s database (run once per database; ids are fixed). */
export async function seedScale(c: pg.ClientBase, o: SeedOptions): Promise<SeedCounts> {
  const n = o.users;
  const chunk = o.chunk ?? 200_000;
  const say = o.progress ?? (() => {});
  const mOrg = o.measured.orgKey;
  const mUser = o.measured.userId;
  const mRows = o.measuredRows ?? 2 * n;
  const mProjects = o.measuredProjects ?? Math.max(50, Math.floor(n / 20));
  const grant = mRows + 1_000;
  // Timestamps spread over the last ~10 days in id order (newest last), inside the usage API's default period.
  const span = mRows + n * (2 + USAGE_PER_USER);
  const stepMs = Math.max(1, Math.floor((10 * 86_400_000) / span));
  await c.query('set synchronous_commit = off');

  say(`seed: the measured client ${mOrg}: a grant of ${grant} and ${mRows} usage rows`);
  await c.query(
    `insert into billing_accounts (id, kind) values ('src:purchases', 'source'), ('src:trial', 'source')
     on conflict (id) do nothing`,
  );
  await c.query(
    `insert into billing_entries (key, from_account, to_account, amount, type, org_key, org_amount, org_balance_after, description, created_at)
     values ($1, 'src:purchases', $2, $4, 'topup', null, null, null, 'seed', now() - interval '11 days'),
            ($1 || ':allocate', $2, $3, $4, 'topup', $5, $4, null, 'seed', now() - interval '11 days')`,
    [`seed:grant:${mOrg}`, `pool:${mUser}`, `org:${mOrg}`, grant, mOrg],
  );
  // The measured client's row g; `$span` names the parameter that carries `span`.
  const mAt = (spanParam: string) => `now() - (${spanParam}::bigint - g) * interval '${stepMs} milliseconds'`;
  await chunked(
    c,
    mRows,
    chunk,
    `insert into billing_entries (key, from_account, to_account, amount, type, org_key, org_amount, org_balance_after, description, created_at)
     select 'usage:req_m' || g, $1, $2, 1, 'usage', $3, -1, null, 'seed call', ${mAt('$4')}
     from generate_series($5::bigint, $6::bigint) g`,
    (from, to) => [`org:${mOrg}`, `sink:${mOrg}`, mOrg, span, from, to],
  );
  await c.query(
    `update billing_accounts set balance = balance + $2, allocation = allocation + $3 where id = $1`,
    [`org:${mOrg}`, grant - mRows, grant],
  );
  await c.query(`update billing_accounts set balance = balance + $2 where id = $1`, [`sink:${mOrg}`, mRows]);
  await c.query(`update billing_accounts set balance = balance - $1 where id = 'src:purchases'`, [grant]);

  say(`seed: ${mProjects} projects of the measured client`);
  await chunked(
    c,
    mProjects,
    chunk,
    `insert into projects (id, org_id, name, created_by, created_at)
     select 'prj_m' || g, $1, 'project ' || g, $2, now() - interval '11 days' + g * interval '1 millisecond'
     from generate_series($3::bigint, $4::bigint) g`,
    (from, to) => [mOrg, mUser, from, to],
  );

  say(`seed: ${n} users, clients, memberships, tokens, projects, accounts`);
  const each = (body: string) => chunked(c, n, chunk, body, (from, to) => [from, to]);
  await each(
    `insert into users (id, email, name, password_hash, email_verified_at)
     select 'usr_s' || g, 's' || g || '@seed.test', 'seed ' || g, 'x', now() from generate_series($1::bigint, $2::bigint) g`,
  );
  await each(
    `insert into orgs (id, name, owner_id, is_default)
     select 's' || g, 'seed ' || g, 'usr_s' || g, true from generate_series($1::bigint, $2::bigint) g`,
  );
  await each(
    `insert into memberships (org_id, user_id, role)
     select 's' || g, 'usr_s' || g, 'owner' from generate_series($1::bigint, $2::bigint) g`,
  );
  await each(
    `insert into api_tokens (user_id, org_id, token_name, token_hash, token_prefix)
     select 'usr_s' || g, 's' || g, 'seed', md5('seed token ' || g), 'svc_seed' from generate_series($1::bigint, $2::bigint) g`,
  );
  await each(
    `insert into projects (id, org_id, name, created_by)
     select 'prj_s' || g, 's' || g, 'project', 'usr_s' || g from generate_series($1::bigint, $2::bigint) g`,
  );
  const balance = TRIAL - USAGE_PER_USER;
  await each(
    `insert into billing_accounts (id, kind, user_id, org_key, balance, allocation)
     select 'org:s' || g, 'org', 'usr_s' || g, 's' || g, ${balance}, ${TRIAL} from generate_series($1::bigint, $2::bigint) g
     union all select 'pool:usr_s' || g, 'pool', 'usr_s' || g, null, 0, 0 from generate_series($1::bigint, $2::bigint) g
     union all select 'sink:s' || g, 'sink', 'usr_s' || g, 's' || g, ${USAGE_PER_USER}, 0 from generate_series($1::bigint, $2::bigint) g`,
  );
  await c.query(`update billing_accounts set balance = balance - $1 where id = 'src:trial'`, [TRIAL * n]);

  say(`seed: ${n * (2 + USAGE_PER_USER)} ledger rows of the others`);
  // Row r of the others' ledger: user (r-1)/8+1; its first two rows are the trial and its allocation.
  const per = 2 + USAGE_PER_USER;
  const at = `now() - ($3::bigint - ${mRows} - r) * interval '${stepMs} milliseconds'`;
  await chunked(
    c,
    n * per,
    chunk,
    `insert into billing_entries (key, from_account, to_account, amount, type, org_key, org_amount, org_balance_after, description, created_at)
     select case k when 0 then 'trial:usr_s' || u when 1 then 'trial:usr_s' || u || ':allocate' else 'usage:req_s' || u || '_' || k end,
            case k when 0 then 'src:trial' when 1 then 'pool:usr_s' || u else 'org:s' || u end,
            case k when 0 then 'pool:usr_s' || u when 1 then 'org:s' || u else 'sink:s' || u end,
            case when k < 2 then ${TRIAL} else 1 end,
            case when k < 2 then 'trial' else 'usage' end,
            case when k = 0 then null else 's' || u end,
            case k when 0 then null when 1 then ${TRIAL} else -1 end,
            case k when 0 then null when 1 then ${TRIAL} else ${TRIAL} - (k - 1) end,
            'seed', ${at}
     from (select r, (r - 1) / ${per} + 1 as u, (r - 1) % ${per} as k from generate_series($1::bigint, $2::bigint) r) s`,
    (from, to) => [from, to, span],
  );

  const holds = mRows + n * USAGE_PER_USER;
  say(`seed: ${holds} settled holds and usage records`);
  await chunked(
    c,
    mRows,
    chunk,
    `insert into billing_holds (request_id, account_id, org_key, user_id, amount, status, debited, created_at, expires_at, closed_at)
     select 'req_m' || g, $1, $2, $3, 1, 'settled', 1, ${mAt('$4')}, now(), ${mAt('$4')} from generate_series($5::bigint, $6::bigint) g`,
    (from, to) => [`org:${mOrg}`, mOrg, mUser, span, from, to],
  );
  await chunked(
    c,
    mRows,
    chunk,
    `insert into usage_records (request_id, org_key, user_id, oauth_grant_id, source, model, prompt_tokens, completion_tokens,
                                cost_cents, credits_debited, duration_ms, outcome, created_at)
     select 'req_m' || g, $1, $2, 'grant_seed', 'chat', 'svc-local', 5, 5, 0.1, 1, 10, 'completed', ${mAt('$3')}
     from generate_series($4::bigint, $5::bigint) g`,
    (from, to) => [mOrg, mUser, span, from, to],
  );
  const others = `from (select r, (r - 1) / ${USAGE_PER_USER} + 1 as u, (r - 1) % ${USAGE_PER_USER} + 2 as k
                        from generate_series($1::bigint, $2::bigint) r) s`;
  const othersAt = `now() - ($3::bigint - ${mRows} - ((u - 1) * ${per} + k + 1)) * interval '${stepMs} milliseconds'`;
  await chunked(
    c,
    n * USAGE_PER_USER,
    chunk,
    `insert into billing_holds (request_id, account_id, org_key, user_id, amount, status, debited, created_at, expires_at, closed_at)
     select 'req_s' || u || '_' || k, 'org:s' || u, 's' || u, 'usr_s' || u, 1, 'settled', 1, ${othersAt}, now(), ${othersAt} ${others}`,
    (from, to) => [from, to, span],
  );
  await chunked(
    c,
    n * USAGE_PER_USER,
    chunk,
    `insert into usage_records (request_id, org_key, user_id, oauth_grant_id, source, model, prompt_tokens, completion_tokens,
                                cost_cents, credits_debited, duration_ms, outcome, created_at)
     select 'req_s' || u || '_' || k, 's' || u, 'usr_s' || u, 'grant_seed', 'chat', 'svc-local', 5, 5, 0.1, 1, 10, 'completed', ${othersAt}
     ${others}`,
    (from, to) => [from, to, span],
  );

  say('seed: the hourly usage rollup of those records');
  // What svc_record_usage keeps with each settle (src/db/custom/usage-records.sql), summed once here.
  await c.query(
    `insert into usage_rollup (org_key, hour, user_id, credential, model, api_token_id, oauth_client_id, calls,
                               prompt_tokens, completion_tokens, cached_prompt_tokens, credits_debited, cost_cents)
     select org_key, date_trunc('hour', created_at, 'UTC'), user_id,
            case when api_token_id is not null then 'token:' || api_token_id else 'grant:' || coalesce(oauth_grant_id, '') end,
            model, max(api_token_id), max(oauth_client_id), count(*), sum(prompt_tokens), sum(completion_tokens),
            sum(cached_prompt_tokens), sum(credits_debited), sum(cost_cents)
     from usage_records where oauth_grant_id = 'grant_seed'
     group by 1, 2, 3, 4, 5
     on conflict (org_key, hour, user_id, credential, model) do update set
       calls = usage_rollup.calls + excluded.calls, prompt_tokens = usage_rollup.prompt_tokens + excluded.prompt_tokens,
       completion_tokens = usage_rollup.completion_tokens + excluded.completion_tokens,
       cached_prompt_tokens = usage_rollup.cached_prompt_tokens + excluded.cached_prompt_tokens,
       credits_debited = usage_rollup.credits_debited + excluded.credits_debited,
       cost_cents = usage_rollup.cost_cents + excluded.cost_cents`,
  );

  const mAudit = o.measuredAuditEvents ?? 2 * n;
  await seedAuditEvents(c, { n, chunk, mOrg, mUser, mAudit, say });

  say('seed: vacuum analyze');
  for (const t of [
    'users',
    'orgs',
    'memberships',
    'api_tokens',
    'projects',
    'billing_accounts',
    'billing_entries',
    'billing_holds',
    'usage_records',
    'usage_rollup',
    'audit_events',
  ])
    await c.query(`vacuum analyze ${t}`);
  return {
    users: n,
    ledgerRows: mRows + 2 + n * per,
    measuredLedgerRows: mRows + 1,
    holds,
    measuredProjects: mProjects,
    auditEvents: n * AUDIT_PER_USER + mAudit,
    measuredAuditEvents: mAudit,
  };
}

/**
 * Audit events in bulk: `mAudit` on the measured client's chain after the events svc wrote for it, and
 * AUDIT_PER_USER on each other client's. They have the shape of real events but not their hashes (each
 * `hash` is a stand-in, each `prev_hash` the one before): listing never reads the chain, so a page costs
 * what it would on a real log; GET …/audit-events/verify on a seeded chain reports it invalid.
 */
async function seedAuditEvents(
  c: pg.ClientBase,
  o: { n: number; chunk: number; mOrg: string; mUser: string; mAudit: number; say: (line: string) => void },
) {
  const fakeHash = (x: string) => `md5(${x}) || md5('h' || ${x})`;
  const action = (g: string) => `($1::text[])[(${g} % ${SEED_ACTIONS.length}) + 1]`;
  o.say(`seed: ${o.mAudit} audit events of the measured client`);
  // After svc's own events: seq and time go on from its head (times are monotonic along a chain).
  const head = await c.query<{ seq: string; at: Date }>(
    `select coalesce(max(seq), 0) as seq, coalesce(max(created_at), now()) as at from audit_events where chain = $1`,
    [o.mOrg],
  );
  const base = Number(head.rows[0]!.seq);
  const at = head.rows[0]!.at;
  await chunked(
    c,
    o.mAudit,
    o.chunk,
    `insert into audit_events (id, chain, seq, created_at, action, actor_type, actor_id, target_type, target_id,
                               details, prev_hash, hash)
     select 'ae_m' || g, $2, $3::bigint + g, $4::timestamptz + g * interval '1 microsecond', ${action('g')},
            'user', $5, 'token', g::text, '{"seeded":true}'::jsonb,
            case when g = 1 then repeat('0', 64) else ${fakeHash("'m' || (g - 1)")} end, ${fakeHash("'m' || g")}
     from generate_series($6::bigint, $7::bigint) g`,
    (from, to) => [SEED_ACTIONS, o.mOrg, base, at, o.mUser, from, to],
  );
  o.say(`seed: ${o.n * AUDIT_PER_USER} audit events of the others`);
  await chunked(
    c,
    o.n * AUDIT_PER_USER,
    o.chunk,
    `insert into audit_events (id, chain, seq, created_at, action, actor_type, actor_id, target_type, target_id,
                               details, prev_hash, hash)
     select 'ae_s' || g, 's' || u, k, now() - interval '10 days' + g * interval '1 millisecond', ${action('g')},
            'user', 'usr_s' || u, 'token', k::text, '{"seeded":true}'::jsonb,
            case when k = 1 then repeat('0', 64) else ${fakeHash("'s' || (g - 1)")} end, ${fakeHash("'s' || g")}
     from generate_series($2::bigint, $3::bigint) g,
          lateral (select (g - 1) / ${AUDIT_PER_USER} + 1 as u, (g - 1) % ${AUDIT_PER_USER} + 1 as k) p`,
    (from, to) => [SEED_ACTIONS, from, to],
  );
}

/**
 * `count` new settled calls of the seeded users (one each, from user `first` on, wrapping around), as
 * the settle writes them: a `usage` ledger row, a settled hold, a usage record and its rollup hour, the
 * client's and sink's balances moved. Used to measure reconciliation's incremental run after that many
 * new rows (bench/scale.ts `--new-rows`). `tag` keeps request ids apart between runs.
 */
export async function seedNewCalls(
  c: pg.ClientBase,
  o: { users: number; count: number; tag: string; chunk?: number },
): Promise<void> {
  const chunk = o.chunk ?? 50_000;
  if (o.count > o.users) throw new Error('at most one new call per seeded user');
  const first = (Number.parseInt(o.tag, 36) % o.users) + 1;
  const user = `((($4::bigint + r - 2) % ${o.users}) + 1)`;
  const req = `'req_n' || $3 || '_' || r`;
  await c.query('set synchronous_commit = off');
  const before = await c.query<{ id: string | null }>('select max(id) as id from usage_records');
  for (let from = 1; from <= o.count; from += chunk) {
    const to = Math.min(o.count, from + chunk - 1);
    const params = [from, to, o.tag, first];
    const rows = `from (select r, ${user} as u from generate_series($1::bigint, $2::bigint) r) s`;
    await c.query('begin');
    await c.query(
      `insert into billing_holds (request_id, account_id, org_key, user_id, amount, status, debited, created_at, expires_at, closed_at)
       select ${req}, 'org:s' || u, 's' || u, 'usr_s' || u, 1, 'settled', 1, now(), now(), now() ${rows}`,
      params,
    );
    await c.query(
      `insert into billing_entries (key, from_account, to_account, amount, type, org_key, org_amount, description)
       select 'usage:' || ${req}, 'org:s' || u, 'sink:s' || u, 1, 'usage', 's' || u, -1, 'seed call' ${rows}`,
      params,
    );
    await c.query(
      `insert into usage_records (request_id, org_key, user_id, oauth_grant_id, source, model, prompt_tokens,
                                  completion_tokens, cost_cents, credits_debited, duration_ms, outcome)
       select ${req}, 's' || u, 'usr_s' || u, 'grant_seed', 'chat', 'svc-local', 5, 5, 0.1, 1, 10, 'completed' ${rows}`,
      params,
    );
    // One call per user, so each account moves by one; pk lookups in id order.
    await c.query(
      `update billing_accounts a set balance = a.balance + x.d
       from (select 'org:s' || u as id, -1 as d ${rows} union all select 'sink:s' || u, 1 ${rows}) x
       where a.id = x.id and $3::text is not null`,
      params,
    );
    await c.query('commit');
  }
  await c.query(
    `insert into usage_rollup (org_key, hour, user_id, credential, model, api_token_id, oauth_client_id, calls,
                               prompt_tokens, completion_tokens, cached_prompt_tokens, credits_debited, cost_cents)
     select org_key, date_trunc('hour', created_at, 'UTC'), user_id, 'grant:' || coalesce(oauth_grant_id, ''),
            model, null, null, count(*), sum(prompt_tokens), sum(completion_tokens), sum(cached_prompt_tokens),
            sum(credits_debited), sum(cost_cents)
     from usage_records where id > $1
     group by 1, 2, 3, 4, 5
     on conflict (org_key, hour, user_id, credential, model) do update set
       calls = usage_rollup.calls + excluded.calls, prompt_tokens = usage_rollup.prompt_tokens + excluded.prompt_tokens,
       completion_tokens = usage_rollup.completion_tokens + excluded.completion_tokens,
       cached_prompt_tokens = usage_rollup.cached_prompt_tokens + excluded.cached_prompt_tokens,
       credits_debited = usage_rollup.credits_debited + excluded.credits_debited,
       cost_cents = usage_rollup.cost_cents + excluded.cost_cents`,
    [before.rows[0]?.id ?? 0],
  );
}
