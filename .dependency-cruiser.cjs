// The architecture as rules (docs/architecture.md says the same in words): which part of svc may import
// which. `npm run lint` checks them (`npm run lint:deps`); `npm run lint:graph` redraws
// docs/architecture.svg from the same cruise. Tests and benches exercise any module they need: the
// rules about who may import what bind the service's own code (src/, oauth/, mcp/).

/** The ground: configuration, logging, ids, HTTP helpers, database, crypto primitives, the metric counters, traces,
 *  and the page kit (layout, escaping, style, CSRF: every page stands on it, the portal's and the few served elsewhere). */
const GROUND =
  '^src/(config|production|log|ids)[.]ts$|^src/(http|db|crypto|telemetry|page-kit)/|^src/metrics/(registry|http|models)[.]ts$';
/** Domains: every other folder of src/ (accounts, billing, models, portal…, and any new one), plus the OAuth and MCP faces. */
const DOMAINS = '^src/[^/]+/|^oauth/|^mcp/';
/** The entry points and the composition root: they see everything, nothing in the service sees them. */
const ROOTS = '^src/(app|server|main|serve|create-deps)[.]ts$';
/** What of oauth/ the rest may build on: verifying tokens (and the keys and resource names that takes), and
 *  the error catalogue the API document lists (oauth/errors.ts: constants only). */
const TOKEN_VERIFICATION = '^oauth/(verify|keys|resources|errors)[.]ts$';
/** Code that ships. */
const SERVICE_CODE = '^(src|oauth|mcp)/';
const TOOLING = '^(test|bench|scripts|[.]ci)/';

module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      severity: 'error',
      comment:
        'Files that import each other, type-only imports included. Move the shared piece lower, into a file of its own.',
      from: {},
      to: { circular: true },
    },
    {
      name: 'ground-imports-no-domain',
      severity: 'error',
      comment:
        'The ground (config, log, ids, http helpers, db, crypto, telemetry) is what domains stand on; it imports none of them. ' +
        'src/deps.ts (the Deps type) is allowed: it is types only.',
      from: { path: GROUND },
      to: { path: `${DOMAINS}|${ROOTS}`, pathNot: GROUND },
    },
    {
      name: 'routes-only-from-the-app',
      severity: 'error',
      comment:
        "A domain's routes are mounted by the app (src/app.ts) alone, and described by the app's API document " +
        "(src/openapi/, which reads the routes' request schemas); other code calls the domain's services. " +
        'Within its own folder a domain may compose its routers (billing/routes.ts mounts dev-routes.ts).',
      from: { path: '^(src/[^/]+|oauth|mcp)/', pathNot: '^src/app[.]ts$|^src/openapi/' },
      to: { path: '^(src/[^/]+|oauth|mcp)/[^/]*routes[.]ts$', pathNot: '^$1/' },
    },
    {
      name: 'oauth-not-on-mcp',
      severity: 'error',
      comment: 'oauth/ sits on src/ services, never on mcp/.',
      from: { path: '^oauth/' },
      to: { path: '^mcp/' },
    },
    {
      name: 'oauth-only-for-token-verification',
      severity: 'error',
      comment:
        'mcp/ and src/ domains use oauth/ only to verify tokens (oauth/verify, keys, resources); ' +
        'the composition root and the app wire the rest.',
      from: { path: SERVICE_CODE, pathNot: `^oauth/|${ROOTS}` },
      to: { path: '^oauth/', pathNot: TOKEN_VERIFICATION },
    },
    {
      name: 'mcp-only-from-the-app',
      severity: 'error',
      comment:
        'mcp/ is a face: only the app mounts it, and the API document lists its error codes (mcp/errors.ts: data).',
      from: { path: SERVICE_CODE, pathNot: '^mcp/|^src/app[.]ts$|^src/openapi/error-codes[.]ts$' },
      to: { path: '^mcp/' },
    },
    {
      name: 'portal-pages-only-from-the-portal',
      severity: 'error',
      comment:
        "Nothing imports the portal's pages but the portal (and the app, which mounts its routes and error page). " +
        'A page served elsewhere stands on the page kit (src/page-kit/, the ground), not on the portal.',
      from: { path: SERVICE_CODE, pathNot: '^src/portal/|^src/app[.]ts$' },
      to: { path: '^src/portal/' },
    },
    {
      name: 'the-model-call-not-on-runs',
      severity: 'error',
      comment:
        'A run (src/runs/) is a loop of model calls: it builds on src/models/, never the other way. ' +
        'A path both name is in src/http/paths.ts.',
      from: { path: '^src/models/' },
      to: { path: '^src/runs/' },
    },
    {
      name: 'nothing-imports-the-roots',
      severity: 'error',
      comment: 'The entry points and the composition root are imported by no service code.',
      from: { path: SERVICE_CODE, pathNot: ROOTS },
      to: { path: ROOTS },
    },
    {
      name: 'service-not-on-tooling',
      severity: 'error',
      comment: 'The service never imports tests, benches or scripts.',
      from: { path: SERVICE_CODE },
      to: { path: TOOLING },
    },
    {
      name: 'not-to-unresolvable',
      severity: 'error',
      comment: 'An import that resolves to no file (or a package that is not installed).',
      from: {},
      to: { couldNotResolve: true },
    },
    {
      name: 'service-not-on-dev-dependencies',
      severity: 'error',
      comment:
        'Code that ships imports only dependencies (npm ci --omit=dev must run it); type-only imports aside.',
      from: { path: SERVICE_CODE },
      to: { dependencyTypes: ['npm-dev'], dependencyTypesNot: ['type-only'] },
    },
    {
      name: 'no-non-package-json',
      severity: 'error',
      comment: 'A package that package.json does not name: add it there.',
      from: {},
      to: { dependencyTypes: ['npm-no-pkg', 'npm-unknown'] },
    },
  ],
  options: {
    // Type-only imports count: a circle through types is still a circle (issue 23).
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    includeOnly: '^(src|oauth|mcp|test|bench|scripts|[.]ci/extra[.]d)/|^node_modules/',
    doNotFollow: { path: 'node_modules' },
    exclude: { path: '^(dist|data|coverage|migrations)/' },
    enhancedResolveOptions: {
      exportsFields: ['exports'],
      conditionNames: ['import', 'require', 'node', 'default', 'types'],
      extensions: ['.ts', '.js', '.mjs', '.cjs', '.d.ts'],
    },
    skipAnalysisNotInRules: true,
    reporterOptions: {
      dot: {
        // The picture in docs/architecture.md: one box per folder (src/<domain>, oauth, mcp) or ground file.
        collapsePattern: '^(src/[^/]+/|oauth/|mcp/|test/|bench/|scripts/)',
        theme: {
          graph: { rankdir: 'LR', splines: 'true', fontname: 'Helvetica' },
          node: { fontname: 'Helvetica' },
          modules: [
            { criteria: { source: GROUND }, attributes: { fillcolor: '#e8eef7' } },
            { criteria: { source: '^oauth/|^mcp/' }, attributes: { fillcolor: '#f3eadb' } },
            { criteria: { source: ROOTS }, attributes: { fillcolor: '#e4f1e4' } },
          ],
        },
      },
    },
  },
};
