import type { Request, Response } from 'express';
import { desc, eq } from 'drizzle-orm';
import type { Deps } from '../deps.js';
import { mailOutbox } from '../db/schema.js';
import { html, renderPage, sendPage, type SafeHtml } from '../page-kit/html.js';
import { z } from 'zod';

// The dev mail outbox as a page (DEV_MODE only): an address form, then that address's
// mail, newest first, as text with its links made clickable. The mail's own HTML is not rendered: a page
// of ours never shows markup it did not write.

/** GET /dev/mail?to=… (CONTRACT §4). */
export const mailQuery = z.object({ to: z.string().trim().toLowerCase().min(1) });

const LINK = /https?:\/\/[^\s<>"')]+/g;

/** The text with each http(s) URL as a link (everything escaped by the template). */
function linkify(text: string): SafeHtml {
  const parts: (string | SafeHtml)[] = [];
  let last = 0;
  for (const m of text.matchAll(LINK)) {
    parts.push(text.slice(last, m.index));
    parts.push(html`<a href="${m[0]}">${m[0]}</a>`);
    last = m.index + m[0].length;
  }
  parts.push(text.slice(last));
  return html`${parts}`;
}

export async function mailInboxPage(deps: Deps, req: Request, res: Response): Promise<void> {
  const parsed = mailQuery.safeParse(req.query);
  const to = parsed.success ? parsed.data.to : '';
  const rows = to
    ? await deps.db
        .select()
        .from(mailOutbox)
        .where(eq(mailOutbox.to, to))
        .orderBy(desc(mailOutbox.createdAt), desc(mailOutbox.id))
        .limit(100)
    : [];
  const body = html`<h1>Dev mail</h1>
<p class="alert info">Development mode: mail is kept here instead of being sent. <code>Accept: application/json</code> gives the same list as JSON.</p>
<form method="get" action="/dev/mail" class="actions"><label for="f-to">Address</label>
<input id="f-to" name="to" type="email" value="${to}" required autocomplete="email"><button type="submit" class="secondary">Show mail</button></form>
${
  !to
    ? ''
    : rows.length === 0
      ? html`<p class="muted">No mail for ${to}.</p>`
      : rows.map(
          (
            m,
          ) => html`<article class="card"><h2>${m.subject}</h2><p class="sub">${m.createdAt.toISOString().slice(0, 16).replace('T', ' ')} UTC · to ${m.to}</p>
<div class="mail">${linkify(m.text)}</div></article>`,
        )
}`;
  sendPage(res, renderPage({ title: 'Dev mail', body }));
}
