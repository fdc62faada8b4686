// The MCP conformance tool's server scenarios against /mcp/platform, for both revisions svc serves
// (CONTRACT §10 "Protocol revisions"), run by .ci/extra.d/mcp-conformance.sh on Node 22.
//
// The tool sends no credential, so it talks to a loopback pass-through that adds a real platform access
// token to each request and forwards it unchanged otherwise (Host and Origin included, so svc's own
// DNS-rebinding checks are what the dns-rebinding scenario sees). svc's V2 origin is that pass-through's
// address, as a deployment behind a proxy names its public origin.
//
// Every scenario a revision requires must pass, except the ones listed in NOT_APPLICABLE below with
// the reason: they call the conformance suite's own fixture tools, prompts or resources (test_simple_text,
// test_image_content, …), which a server that is not the suite's reference fixture does not have. A
// listed scenario is still run and reported; one that starts passing is reported so the list shrinks.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createServer, request as httpRequest } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startTestServer } from '../../test/helpers/server.js';
import { createUser } from '../../test/helpers/fixtures.js';
import { issueTestGrants } from '../../test/helpers/oauth.js';

const NODE22 = process.env.NODE22 ?? '.ci/node22/bin/node';
const TOOL =
  process.env.CONFORMANCE_BIN ??
  '.ci/node22/conformance/node_modules/@modelcontextprotocol/conformance/dist/index.js';
const REVISIONS = ['2025-11-25', '2026-07-28'] as const;

const FIXTURE = "needs the conformance suite's own fixture";
/** Scenarios that exercise the suite's reference fixture, not the protocol: not applicable to svc. */
const NOT_APPLICABLE: Record<string, string> = {
  'tools-call-simple-text': `${FIXTURE} tool test_simple_text`,
  'tools-call-image': `${FIXTURE} tool test_image_content`,
  'tools-call-audio': `${FIXTURE} tool test_audio_content`,
  'tools-call-embedded-resource': `${FIXTURE} tool test_embedded_resource`,
  'tools-call-mixed-content': `${FIXTURE} tool test_multiple_content_types`,
  'tools-call-with-logging': `${FIXTURE} tool test_tool_with_logging`,
  'tools-call-error': `${FIXTURE} tool test_error_handling`,
  'tools-call-with-progress': `${FIXTURE} tool test_tool_with_progress`,
  'tools-call-sampling': `${FIXTURE} tool test_sampling (svc never asks the client to sample)`,
  'tools-call-elicitation': `${FIXTURE} tool test_elicitation (svc never elicits)`,
  'elicitation-sep1034-defaults': `${FIXTURE} tool test_elicitation_sep1034_defaults`,
  'elicitation-sep1330-enums': `${FIXTURE} tool test_elicitation_sep1330_enums`,
  'resources-read-text': `${FIXTURE} resource test://static-text`,
  'resources-read-binary': `${FIXTURE} resource test://static-binary`,
  'resources-templates-read': `${FIXTURE} template test://template/{id}/data`,
  'resources-subscribe': `${FIXTURE} resources and the subscribe capability, which svc does not offer`,
  'resources-unsubscribe': `${FIXTURE} resources and the subscribe capability, which svc does not offer`,
  'prompts-get-simple': `${FIXTURE} prompt test_simple_prompt`,
  'prompts-get-with-args': `${FIXTURE} prompt test_prompt_with_arguments`,
  'prompts-get-embedded-resource': `${FIXTURE} prompt test_prompt_with_embedded_resource`,
  'prompts-get-with-image': `${FIXTURE} prompt test_prompt_with_image`,
  'completion-complete': `${FIXTURE} prompt arguments to complete; svc offers no completions`,
  'logging-set-level': `${FIXTURE} logging capability; svc sends no log messages to clients`,
  'json-schema-2020-12': `${FIXTURE} tool json_schema_2020_12_tool`,
  'http-custom-header-server-validation': `${FIXTURE} tools annotated with x-mcp-header; svc's tools have none`,
  'input-required-result-basic-elicitation': `${FIXTURE} tool test_input_required_result_elicitation`,
  'input-required-result-basic-sampling': `${FIXTURE} tool test_input_required_result_sampling`,
  'input-required-result-basic-list-roots': `${FIXTURE} tool test_input_required_result_list_roots`,
  'input-required-result-request-state': `${FIXTURE} tool test_input_required_result_request_state`,
  'input-required-result-multiple-input-requests': `${FIXTURE} tool test_input_required_result_multiple_inputs`,
  'input-required-result-multi-round': `${FIXTURE} multi-round tool`,
  'input-required-result-non-tool-request': `${FIXTURE} prompt that asks for input`,
  'input-required-result-result-type': `${FIXTURE} tool test_input_required_result_elicitation`,
  'input-required-result-tampered-state': `${FIXTURE} tool that returns a requestState`,
  'input-required-result-capability-check': `${FIXTURE} tool test_input_required_result_capabilities`,
  'tasks-lifecycle': `${FIXTURE} task tools (greet, slow_compute); tasks is an extension svc does not offer`,
  'tasks-capability-negotiation': `${FIXTURE} task tool slow_compute; tasks is an extension svc does not offer`,
  'tasks-dispatch-and-envelope': `${FIXTURE} task tools; tasks is an extension svc does not offer`,
  'tasks-mrtr-composition': `${FIXTURE} tool test_tool_with_task; tasks is an extension svc does not offer`,
  'tasks-mrtr-input': `${FIXTURE} tools confirm_delete, multi_input; tasks is an extension svc does not offer`,
  'tasks-request-headers': `${FIXTURE} task tools; tasks is an extension svc does not offer`,
  'tasks-request-state-removal': `${FIXTURE} task tool slow_compute; tasks is an extension svc does not offer`,
  'tasks-required-task-error': `${FIXTURE} tool failing_job; tasks is an extension svc does not offer`,
  'tasks-wire-fields': `${FIXTURE} task tool slow_compute; tasks is an extension svc does not offer`,
};

/** Checks inside a protocol scenario that need the fixture's diagnostic tools (the rest must pass). */
const NOT_APPLICABLE_CHECKS: Record<string, string> = {
  'sep-2575-server-rejects-undeclared-capability': `${FIXTURE} diagnostic tool test_missing_capability`,
  'sep-2575-missing-capability-http-400': `${FIXTURE} diagnostic tool test_missing_capability`,
  'sep-2575-http-server-no-independent-requests-on-stream': `${FIXTURE} diagnostic tool test_streaming_elicitation`,
  'sep-2575-server-no-log-without-loglevel': `${FIXTURE} diagnostic tool test_logging_tool`,
};

for (const [what, path] of [
  ['Node 22', NODE22],
  ['conformance tool', TOOL],
] as const) {
  if (!existsSync(path)) {
    console.error(
      `mcp-conformance: ${what} not found at ${path} (.ci/prepare and the .sh script install them)`,
    );
    process.exit(2);
  }
}

interface Check {
  status: string;
  id?: string;
  errorMessage?: string;
}

/** Each scenario's outcome from the tool's result directory: passed, or the failed checks. */
function outcomes(dir: string): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const entry of readdirSync(dir)) {
    const file = join(dir, entry, 'checks.json');
    if (!existsSync(file)) continue;
    const scenario = entry.replace(/^server-/, '').replace(/-\d{4}-\d{2}-\d{2}T.*$/, '');
    const checks = JSON.parse(readFileSync(file, 'utf8')) as Check[];
    const failed = checks
      .filter((c) => c.status === 'FAILURE')
      .map((c) => {
        const reason = NOT_APPLICABLE_CHECKS[c.id ?? ''];
        if (reason) console.log(`  check n/a ${c.id}: ${reason}`);
        return reason ? null : `${c.id ?? '?'}: ${(c.errorMessage ?? '').slice(0, 200)}`;
      })
      .filter((f): f is string => f !== null);
    out.set(scenario, [...(out.get(scenario) ?? []), ...failed]);
  }
  return out;
}

// svc's V2 origin is the pass-through's address, so the pass-through listens first; it learns svc's
// port and the token once svc has started.
let target = 0;
let token = '';
const front = createServer((req, res) => {
  const headers = { ...req.headers };
  if (!headers.authorization) headers.authorization = `Bearer ${token}`;
  const upstream = httpRequest(
    // A connection of its own per request: svc closes the one a refused Host arrived on.
    { host: '127.0.0.1', port: target, method: req.method, path: req.url, headers, agent: false },
    (answer) => {
      // Hop-by-hop headers are the pass-through's own connection's business (RFC 9110 §7.6.1).
      const { connection: _c, 'keep-alive': _k, 'transfer-encoding': _t, ...rest } = answer.headers;
      res.writeHead(answer.statusCode ?? 502, rest);
      answer.pipe(res);
    },
  );
  upstream.on('error', (err) => {
    console.error(`mcp-conformance: the pass-through could not reach svc: ${err.message}`);
    res.destroy();
  });
  req.pipe(upstream);
});
await new Promise<void>((resolve) => front.listen(0, '127.0.0.1', resolve));
const origin = `http://127.0.0.1:${(front.address() as { port: number }).port}`;
const svc = await startTestServer({ env: { V2_URL: origin } });
target = svc.port;
const user = await createUser(svc);
token = (await issueTestGrants(svc, user, { orgKey: user.orgKey, resources: ['platform'] })).platform!;
const url = `${origin}/mcp/platform`;

let failed = 0;
const summary: string[] = [];
for (const revision of REVISIONS) {
  const out = mkdtempSync(join(tmpdir(), `mcp-conformance-${revision}-`));
  const args = [TOOL, 'server', '--url', url, '--requirements', revision, '-o', out];
  console.log(`mcp-conformance: ${NODE22} ${args.join(' ')}`);
  await new Promise<number>((resolve) => {
    const child = spawn(NODE22, args, { stdio: ['ignore', 'ignore', 'inherit'] });
    child.on('exit', (code) => resolve(code ?? 1));
  });
  const results = outcomes(out);
  rmSync(out, { recursive: true, force: true });
  let passed = 0;
  let notApplicable = 0;
  for (const [scenario, failures] of [...results].sort(([a], [b]) => a.localeCompare(b))) {
    const reason = NOT_APPLICABLE[scenario];
    if (failures.length === 0) {
      passed++;
      console.log(
        `  ${revision} PASS ${scenario}${reason ? ' (listed as not applicable, passes anyway)' : ''}`,
      );
    } else if (reason) {
      notApplicable++;
      console.log(`  ${revision} n/a  ${scenario}: ${reason}`);
    } else {
      failed++;
      console.log(`  ${revision} FAIL ${scenario}`);
      for (const f of failures) console.log(`         ${f}`);
    }
  }
  const line = `${revision}: ${passed} passed, ${notApplicable} not applicable, ${results.size - passed - notApplicable} failed, of ${results.size} scenarios run`;
  summary.push(line);
  if (results.size === 0) {
    failed++;
    summary.push(`${revision}: the tool produced no results`);
  }
}
front.close();
await svc.close();
for (const line of summary) console.log(`mcp-conformance: ${line}`);
process.exit(failed === 0 ? 0 : 1);
