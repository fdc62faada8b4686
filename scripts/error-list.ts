import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { ErrorCatalogue } from '../src/http/errors.js';
import { ERROR_CATALOGUES } from '../src/openapi/error-codes.js';

// docs/errors.md, written from the error catalogues (decision records 0086 and 0120): every code svc
// answers with, its status and what it means, one table per domain. `npm run docs:errors` writes the page;
// test/openapi/error-catalogues.test.ts fails when the page and the catalogues differ.
//
//   node --import tsx scripts/error-list.ts           write docs/errors.md
//   node --import tsx scripts/error-list.ts --check   exit 1 when docs/errors.md is out of date

/** Every catalogue, in the order the page lists them, with the file that holds it. */
export const ALL_ERROR_CATALOGUES: readonly { domain: string; file: string; catalogue: ErrorCatalogue }[] = [
  { domain: 'common', file: 'src/http/errors.ts' },
  { domain: 'accounts', file: 'src/accounts/errors.ts' },
  { domain: 'orgs', file: 'src/orgs/errors.ts' },
  { domain: 'device', file: 'src/device/errors.ts' },
  { domain: 'events', file: 'src/events/errors.ts' },
  { domain: 'metrics', file: 'src/metrics/errors.ts' },
  { domain: 'projects', file: 'src/projects/errors.ts' },
  { domain: 'ratelimit', file: 'src/ratelimit/errors.ts' },
  { domain: 'models', file: 'src/models/errors.ts' },
  { domain: 'billing', file: 'src/billing/errors.ts' },
  { domain: 'runs', file: 'src/runs/errors.ts' },
  { domain: 'oauth', file: 'oauth/errors.ts' },
  { domain: 'mcp', file: 'mcp/errors.ts' },
].map((d) => ({ ...d, catalogue: ERROR_CATALOGUES[d.domain]! }));

const TITLES: Record<string, string> = {
  common: 'Common (every surface)',
  accounts: 'Accounts: sign-up, sign-in, two-factor, reset, deletion',
  orgs: 'Clients, members and invitations',
  device: 'Device flow',
  events: 'Webhook endpoints',
  metrics: 'Metrics endpoint',
  projects: 'Projects, files and shares',
  ratelimit: 'Model rate limits',
  models: 'Model calls, stored responses and the model provider',
  billing: 'Billing: allocations, spending, payments, budgets',
  runs: 'Run sockets',
  oauth: 'OAuth authorization server',
};

export const ERROR_DOC = 'docs/errors.md';

const cell = (text: string) => text.replaceAll('|', '\\|');

/** The page: a preface on how each surface spells a code, then one table per catalogue. */
export function errorListMarkdown(): string {
  const out = [
    '# Error codes',
    '',
    '<!-- Written by `npm run docs:errors` from the error catalogues; edit those, not this page. -->',
    '',
    'Every error svc answers with carries a code from one of the catalogues below (each domain keeps its',
    'own in its `errors.ts`; decision records 0086 and 0120). The same code is spelled by the surface the',
    'request arrived on (CONTRACT §3):',
    '',
    '- `/v1` account, client, billing and project routes: `{detail: {code, message}}`, the code as listed.',
    '- Model routes (`/v1/chat/completions`, `/v1/responses`, `/v1/models`, run sockets): the OpenAI error',
    '  object `{error: {message, type, code, param}}` and run `error` frames, the code in lower case',
    '  (`NOT_A_MEMBER` is `not_a_member` there).',
    '- `/v1/messages`: the Anthropic error object, whose `type` follows the status.',
    '- `/oauth/*`: RFC 6749 `{error, error_description}`; svc’s own input codes (`VALIDATION_ERROR` and the',
    '  like) are `invalid_request`, a 503 is `temporarily_unavailable`, any other code in lower case.',
    '- `/mcp/platform`: a failed tool’s message starts with the code as listed (CONTRACT §10).',
    '',
    'Codes are UPPER_SNAKE; a code a standard or the contract spells in lower case keeps that spelling and',
    'names its source. The OpenAPI document (`/openapi.json`) lists, for each status of a route, the codes',
    'of its domain and the common ones.',
  ];
  for (const { domain, file, catalogue } of ALL_ERROR_CATALOGUES) {
    out.push('', `## ${TITLES[domain] ?? domain}`, '', `\`${file}\``, '');
    out.push('| Code | Status | Meaning |', '|---|---|---|');
    for (const [code, entry] of Object.entries(catalogue)) {
      const status = entry.alsoStatus ? `${entry.status}, ${entry.alsoStatus}` : String(entry.status);
      const source = entry.spelledBy ? ` (spelled by ${entry.spelledBy})` : '';
      out.push(`| \`${code}\` | ${status} | ${cell(entry.message)}${cell(source)} |`);
    }
  }
  return out.join('\n') + '\n';
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const page = errorListMarkdown();
  if (process.argv.includes('--check')) {
    const current = readFileSync(ERROR_DOC, 'utf8');
    if (current !== page) {
      console.error(`${ERROR_DOC} is out of date: run npm run docs:errors`);
      process.exit(1);
    }
  } else writeFileSync(ERROR_DOC, page);
}
