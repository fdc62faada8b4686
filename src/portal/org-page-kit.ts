import type { Request, Response } from 'express';
import type { Deps } from '../deps.js';
import { principalOf } from '../auth/principal.js';
import { parseOrgId } from '../ids.js';
import { AppError } from '../http/errors.js';
import { requireOrgRole, type OrgRow } from '../orgs/service.js';
import type { Role } from '../db/schema.js';
import { html, verifyCsrfField } from '../page-kit/html.js';
import { applyErrorHeaders, clientError, errorText, show, type Notice } from './components.js';

// What the organization pages share (members, settings, invitations): the org of the
// URL with the caller's role, the 404 page for one that is not theirs (another tenant's organization
// answers like one that does not exist: STYLE), and the shape of every form POST (CSRF first, then the
// work; a person's mistake re-renders the page with it, anything else goes to the page error handler).

/** The org of the URL and the caller's role, or null when it is not one of theirs (or no such org). */
export async function orgOfPage(
  deps: Deps,
  req: Request,
  minRole: Role = 'viewer',
): Promise<{ org: OrgRow; role: Role } | null> {
  const orgKey = parseOrgId(String(req.params.clientId));
  if (!orgKey) return null;
  try {
    return await requireOrgRole(deps.db, principalOf(req).userId, orgKey, minRole);
  } catch (err) {
    if (err instanceof AppError && (err.status === 403 || err.status === 404)) return null;
    throw err;
  }
}

export function notFoundPage(req: Request, res: Response): void {
  show(req, res, {
    title: 'Not found',
    status: 404,
    narrow: true,
    body: html`<div class="card"><h1>Not found</h1><p>There is no such organization among yours.</p><p><a href="/account">Back to your account</a></p></div>`,
  });
}

/** A narrow confirmation card: what will happen, the button that does it, and a way back. */
export function confirmPage(
  req: Request,
  res: Response,
  opts: { title: string; what: ReturnType<typeof html>; form: ReturnType<typeof html>; back: string },
): void {
  show(req, res, {
    title: opts.title,
    narrow: true,
    body: html`<div class="card"><h1>${opts.title}</h1>${opts.what}${opts.form}<p><a href="${opts.back}">Cancel</a></p></div>`,
  });
}

export type Rerender = (req: Request, res: Response, notice: Notice, status: number) => Promise<void>;

/**
 * A form POST handler: the CSRF field is checked before anything else (CONTRACT §4: every form carries
 * one), then `act`; a client error (4xx AppError) is shown on the page `rerender` draws.
 */
export function formAction(act: (req: Request, res: Response) => Promise<void>, rerender: Rerender) {
  return async (req: Request, res: Response) => {
    try {
      verifyCsrfField(req);
      await act(req, res);
    } catch (caught) {
      const err = clientError(caught);
      applyErrorHeaders(res, err);
      await rerender(req, res, { kind: 'error', text: errorText(err) }, err.status);
    }
  };
}
