import { sql } from 'drizzle-orm';
import type { Request } from 'express';
import type { Deps } from '../deps.js';
import { queryRows } from '../db/client.js';
import { requestOrigin } from '../http/origin.js';
import { clientIdOf } from '../ids.js';
import { html, type SafeHtml } from '../page-kit/template.js';

// The "Get started" card of /account, shown until the person's first model call: the terminal
// (install, `svc login`), a first call with curl against this very server with the two ways the
// interface document gives to get a credential (the device flow, or POST /v1/tokens with a session from
// POST /v1/login), and where to go next (the API reference, buying tokens, usage).

/** Whether this person has made a model call in any of their organizations. */
async function hasCalled(deps: Deps, userId: string, orgKeys: string[]): Promise<boolean> {
  if (orgKeys.length === 0) return false;
  const [row] = await queryRows<{ one: number }>(
    deps.db,
    sql`select 1 as one from usage_records
        where org_key in (${sql.join(
          orgKeys.map((k) => sql`${k}`),
          sql`, `,
        )}) and user_id = ${userId} limit 1`,
  );
  return row !== undefined;
}

export async function getStartedCard(
  deps: Deps,
  req: Request,
  who: { userId: string; email: string },
  orgs: { orgKey: string; isDefault: boolean; ownerId: string }[],
): Promise<SafeHtml | null> {
  if (
    await hasCalled(
      deps,
      who.userId,
      orgs.map((o) => o.orgKey),
    )
  )
    return null;
  const origin = requestOrigin(req, deps.config);
  const home = orgs.find((o) => o.isDefault && o.ownerId === who.userId) ?? orgs[0];
  const clientId = home ? clientIdOf(home.orgKey) : null;
  const credential = `# A session (add "code" for two-factor sign-in: POST /v1/2fa/login), then an API token, shown once:
curl -s ${origin}/v1/login -H 'Content-Type: application/json' \\
  -d '{"email":"${who.email}","password":"…"}'
curl -s ${origin}/v1/tokens -H "Authorization: Bearer $SESSION_TOKEN" \\
  -H 'Content-Type: application/json' -d '{"token_name":"laptop"}'`;
  const call = `curl ${origin}/v1/chat/completions -H "Authorization: Bearer $SVC_TOKEN" \\
  -H 'Content-Type: application/json' \\
  -d '{"model":"anything","messages":[{"role":"user","content":"Hello"}]}'`;
  return html`<section class="card" aria-labelledby="h-start"><h2 id="h-start">Get started</h2>
<ol class="steps">
<li><strong>Install and sign in from a terminal.</strong> Install the <code>svc</code> package (or use <code>npx svc</code> in a checkout), then run <code>svc login --url ${origin}</code>: it shows a code to approve on <a href="/account/device">the device page</a>. <code>svc login --api-key</code> gives a script an <code>svc_</code> key the same way (the device flow).</li>
<li><strong>Or get an API token over HTTP</strong> (<code>POST /v1/tokens</code> with a session):
<pre class="copy" tabindex="0" aria-label="Commands to get an API token"><code>${credential}</code></pre></li>
<li><strong>Make a first call</strong> with that token as <code>SVC_TOKEN</code>:
<pre class="copy" tabindex="0" aria-label="A first chat completion with curl"><code>${call}</code></pre></li>
</ol>
<p>Next: <a href="/docs">the API reference</a>${clientId ? html` · <a href="/account/clients/${clientId}/billing#buy">buy tokens</a> · <a href="/account/clients/${clientId}/usage">see your usage</a>` : ''}.</p></section>`;
}
