import { Router } from 'express';
import { desc, eq } from 'drizzle-orm';
import type { Deps } from '../deps.js';
import { mailOutbox } from '../db/schema.js';
import { notFound } from '../http/errors.js';
import { parse } from '../http/validate.js';
import { unix } from '../ids.js';
import { mailInboxPage, mailQuery } from './mail-page.js';

export { mailQuery };

// /dev/* exists only in DEV_MODE; in production mode it answers 404 (CONTRACT §1).
export function devRoutes(deps: Deps): Router {
  const router = Router();
  router.use('/dev', (_req, _res, next) => {
    if (!deps.config.devMode) throw notFound('no such route');
    next();
  });

  // The dev mail outbox, newest first (CONTRACT §4). A browser gets it as a page.
  router.get('/dev/mail', async (req, res) => {
    if (req.accepts(['application/json', 'text/html']) === 'text/html') return mailInboxPage(deps, req, res);
    const { to } = parse(mailQuery, req.query);
    const rows = await deps.db
      .select()
      .from(mailOutbox)
      .where(eq(mailOutbox.to, to))
      .orderBy(desc(mailOutbox.createdAt), desc(mailOutbox.id))
      .limit(100);
    res.json({
      data: rows.map((m) => ({
        to: m.to,
        subject: m.subject,
        text: m.text,
        html: m.html,
        created_at: unix(m.createdAt),
      })),
    });
  });
  return router;
}
