import type { Request, Response } from 'express';
import type { DeletionPreview } from '../accounts/account-deletion.js';
import { clientIdOf } from '../ids.js';
import { html, type SafeHtml } from '../page-kit/html.js';
import { field, postForm, show } from './components.js';
import { forgetNavOrgs } from './nav.js';
import { tokensAndMoney } from './money.js';

// The "Delete account" card of /account/settings and the page shown after. The card
// states the rule before anything is asked (docs/accounts.md "Deleting an account"): what stops the
// deletion now, with a link to where each is fixed; else what goes with the account, tokens counted.

export interface DeleteErrors {
  confirm_password?: string;
  code?: string;
}

export function deleteAccountCard(
  req: Request,
  res: Response,
  view: {
    preview: DeletionPreview;
    twoFactor: boolean;
    errors: DeleteErrors;
    focus?: keyof DeleteErrors;
  },
): SafeHtml {
  const { preview, errors } = view;
  const heading = html`<h2 id="h-delete">Delete account</h2>`;
  if (preview.blockers.length > 0) {
    return html`<section class="card" aria-labelledby="h-delete">${heading}
<p>Your account cannot be deleted yet:</p>
<ul>${preview.blockers.map((b) => {
      const where =
        b.code === 'OWNS_SHARED_ORGANIZATION'
          ? html` <a href="/account/clients/${b.client_id}">Members</a>`
          : b.code === 'ACTIVE_SUBSCRIPTION'
            ? html` <a href="/account/clients/${b.client_id}/billing">Billing</a>`
            : '';
      return html`<li>${sentence(b.message)}${where}</li>`;
    })}</ul></section>`;
  }
  const owned = preview.ownedOrganizations;
  return html`<section class="card" aria-labelledby="h-delete">${heading}
<p>Deleting your account cannot be undone. It:</p>
<ul>
<li>deletes ${owned.length === 1 ? 'the organization' : `the ${owned.length} organizations`} you own: ${owned.map(
    (o, i) =>
      html`${i > 0 ? ', ' : ''}<a href="/account/clients/${clientIdOf(o.orgKey)}">${o.name}</a>${o.isDefault ? ' (personal)' : ''}`,
  )}, with their projects;</li>
${preview.otherMemberships > 0 ? html`<li>ends your membership of ${preview.otherMemberships} other organization(s);</li>` : ''}
<li>forfeits your unspent tokens: ${tokensAndMoney(preview.forfeitedCredits)};</li>
<li>signs out every session and revokes every connected app and API token.</li>
</ul>
<p class="muted">Your past transactions stay in the organizations’ records under “Deleted account”. Your e-mail address is freed, but the free trial is once per address: a new account with it starts without trial tokens (it can buy tokens).</p>
${postForm(
  req,
  res,
  '/account/settings/delete',
  html`${field({ label: 'Your password', name: 'confirm_password', type: 'password', autocomplete: 'current-password', required: true, error: errors.confirm_password, autofocus: view.focus === 'confirm_password' })}
${view.twoFactor ? field({ label: 'Code from your authenticator app or a recovery code', name: 'code', autocomplete: 'one-time-code', required: true, className: 'code', error: errors.code, autofocus: view.focus === 'code' }) : ''}
<div class="actions"><button type="submit" class="danger">Delete my account</button></div>`,
)}</section>`;
}

/** After the deletion: the browser is signed out; the page says what happened. */
export function showDeleted(req: Request, res: Response, forfeited: number, organizations: number): void {
  req.principal = undefined;
  forgetNavOrgs(res);
  show(req, res, {
    title: 'Account deleted',
    narrow: true,
    body: html`<div class="card"><h1>Account deleted</h1>
<p role="status">Your account and the ${organizations} organization(s) you owned were deleted; your unspent tokens (${tokensAndMoney(forfeited)}) were forfeited. Every session, app connection and API token was revoked.</p>
<p>A new account with the same e-mail address starts without the free trial; it can buy tokens.</p>
<p><a href="/account/register">Create a new account</a></p></div>`,
  });
}

const sentence = (s: string): string => s[0]!.toUpperCase() + s.slice(1) + '.';
