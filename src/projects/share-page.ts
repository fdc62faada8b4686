import { Router } from 'express';
import MarkdownIt from 'markdown-it';
import { asc, eq } from 'drizzle-orm';
import type { Deps } from '../deps.js';
import { projectReports } from '../db/schema.js';
import { html, raw, renderPage, sendPage } from '../portal/html.js';
import { projectForLink } from './shares.js';

// The public, read-only page of a share link `{V2_URL}/s/<token>` (CONTRACT §10): the project's brief
// and reports. Markdown is rendered without raw HTML (`html: false`) and without linkify, and
// markdown-it's link validation drops javascript:/vbscript:/data: URLs; the page CSP allows no script.
// An unknown or revoked token answers 404 like any missing page.

const md = new MarkdownIt({ html: false, linkify: false, typographer: false });

/** Renders untrusted markdown as safe HTML. */
export const renderMarkdown = (text: string): string => md.render(text);

export function sharePageRoutes(deps: Deps): Router {
  const router = Router();
  router.get('/s/:token', async (req, res) => {
    const project = await projectForLink(deps.db, deps.keys.hmac, req.params.token ?? '');
    if (!project) {
      sendPage(
        res,
        renderPage({
          title: 'Not found',
          body: html`<h1>Not found</h1><p>This link does not exist or was revoked.</p>`,
        }),
        404,
      );
      return;
    }
    const reports = await deps.db
      .select()
      .from(projectReports)
      .where(eq(projectReports.projectId, project.id))
      .orderBy(asc(projectReports.createdAt), asc(projectReports.id));
    const body = html`<h1>${project.name}</h1>
${project.description ? html`<p class="lead">${project.description}</p>` : ''}
<section class="brief"><h2>Brief</h2>${raw(renderMarkdown(project.brief))}</section>
<section class="reports"><h2>Reports</h2>
${reports.length === 0 ? html`<p>No reports yet.</p>` : ''}
${reports.map((r) => html`<article class="report"><h3>${r.title}</h3>${raw(renderMarkdown(r.body))}</article>`)}
</section>`;
    // The token is a credential in the URL: never let it leak through Referer (sendPage sets no-referrer).
    sendPage(res, renderPage({ title: project.name, body }));
  });
  return router;
}
