import type { NextFunction, Request, Response } from 'express';
import type { Deps } from '../deps.js';
import { liveMemberships, type LiveOrg } from '../orgs/membership.js';
import { clientIdOf, parseOrgId } from '../ids.js';
import { html, type SafeHtml } from '../page-kit/template.js';

// The one header of the signed-in pages: an organization switcher and the links
// Overview, Usage, Billing, Members, Audit log (its owner only), Account. The organization is the one in the URL, else the person's
// default one. The switcher is a plain GET form (works without JavaScript) answered by /account/switch.

/** The sections of an organization a link or the switcher can lead to. */
export const ORG_SECTIONS = ['usage', 'billing', 'members'] as const;
export type OrgSection = (typeof ORG_SECTIONS)[number];

export const orgPath = (orgKey: string, section: OrgSection): string =>
  section === 'members'
    ? `/account/clients/${clientIdOf(orgKey)}`
    : `/account/clients/${clientIdOf(orgKey)}/${section}`;

const ORGS_LOCAL = 'portalOrgs';

/** Loads the signed-in person's organizations for the header (one read per page). */
export function loadNavOrgs(deps: Deps) {
  return async (req: Request, res: Response, next: NextFunction) => {
    const p = req.principal;
    if (p?.kind === 'session' && p.emailVerified) {
      res.locals[ORGS_LOCAL] = await liveMemberships(deps.db, p.userId).catch(() => null);
    }
    next();
  };
}

/** The header of a page that signed the person out (an account just deleted) shows no organization. */
export const forgetNavOrgs = (res: Response): void => {
  res.locals[ORGS_LOCAL] = null;
};

export const navOrgs = (res: Response): LiveOrg[] | null =>
  (res.locals[ORGS_LOCAL] as LiveOrg[] | undefined) ?? null;

/** Where the page is: the organization of the URL (else the default) and the link that is current. */
function currentOf(req: Request, orgs: LiveOrg[]): { org: LiveOrg | null; here: string } {
  const fromUrl = typeof req.params.clientId === 'string' ? parseOrgId(req.params.clientId) : null;
  const org = orgs.find((o) => o.orgKey === fromUrl) ?? orgs[0] ?? null;
  return { org, here: req.path };
}

export function navBar(req: Request, res: Response): SafeHtml {
  const orgs = navOrgs(res);
  if (!orgs || orgs.length === 0) return html``;
  const { org, here } = currentOf(req, orgs);
  const link = (href: string, label: string) =>
    html`<li><a href="${href}"${href === here ? html` aria-current="page"` : ''}>${label}</a></li>`;
  const section = ORG_SECTIONS.find((s) => org && here === orgPath(org.orgKey, s)) ?? 'members';
  // The switcher only on an organization's own pages: elsewhere (the device and consent pages) a form
  // of the page itself chooses an organization, and two such choices on one page would confuse.
  const onOrgPage = typeof req.params.clientId === 'string';
  const switcher =
    orgs.length > 1 && onOrgPage
      ? html`<form method="get" action="/account/switch" class="switch"><label for="org-switch" class="sr">Organization</label>
<select id="org-switch" name="client_id">${orgs.map(
          (o) =>
            html`<option value="${clientIdOf(o.orgKey)}"${o.orgKey === org?.orgKey ? html` selected` : ''}>${o.name}</option>`,
        )}</select><input type="hidden" name="to" value="${section}"><button type="submit" class="secondary">Switch</button></form>`
      : onOrgPage
        ? html`<span class="org-name">${org?.name ?? ''}</span>`
        : html``;
  return html`<nav class="site" aria-label="Main"><div class="bar">${switcher}<ul>
${link('/account', 'Overview')}${org ? html`${link(orgPath(org.orgKey, 'usage'), 'Usage')}${link(orgPath(org.orgKey, 'billing'), 'Billing')}${link(orgPath(org.orgKey, 'members'), 'Members')}` : ''}${org?.role === 'owner' ? link(`/account/clients/${clientIdOf(org.orgKey)}/audit-log`, 'Audit log') : ''}${link('/account/settings', 'Account')}
</ul></div></nav>`;
}

/** GET /account/switch?client_id=…&to=usage|billing|members: the chosen organization's section. */
export function switchOrg(req: Request, res: Response) {
  const orgs = navOrgs(res) ?? [];
  const orgKey = typeof req.query.client_id === 'string' ? parseOrgId(req.query.client_id) : null;
  const org = orgs.find((o) => o.orgKey === orgKey);
  const to = ORG_SECTIONS.find((s) => s === req.query.to) ?? 'members';
  res.redirect(303, org ? orgPath(org.orgKey, to) : '/account');
}
