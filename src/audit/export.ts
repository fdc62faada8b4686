import type { Response } from 'express';
import type { AuditEventItem } from './chain.js';

// The exports of a chain (CONTRACT §11): CSV with the contract's columns, and JSONL of the API's items —
// each line is an event exactly as GET …/audit-events answers it, so its hash can be recomputed from the
// line alone. Written a batch at a time (the caller's generator), never the whole log in memory.

export const CSV_COLUMNS = [
  'id',
  'created_at',
  'action',
  'actor_type',
  'actor_id',
  'actor_email',
  'credential_id',
  'ip',
  'user_agent',
  'target_type',
  'target_id',
  'details',
  'prev_hash',
  'hash',
] as const;

/** RFC 4180 quoting; a cell a spreadsheet would run as a formula is prefixed with `'` (OWASP CSV injection). */
function csvCell(value: string | number | null): string {
  if (value === null) return '';
  let text = String(value);
  if (/^[=+\-@\t\r]/.test(text) && typeof value === 'string') text = `'${text}`;
  return /[",\r\n]/.test(text) ? `"${text.replaceAll('"', '""')}"` : text;
}

export function csvLine(e: AuditEventItem): string {
  const cells = [
    e.id,
    e.created_at,
    e.action,
    e.actor.type,
    e.actor.id,
    e.actor.email ?? null,
    e.credential_id,
    e.ip,
    e.user_agent,
    e.target.type,
    e.target.id,
    JSON.stringify(e.details),
    e.prev_hash,
    e.hash,
  ];
  return `${cells.map(csvCell).join(',')}\r\n`;
}

/** Writes every event to `res`, honouring back-pressure. */
export async function streamExport(
  res: Response,
  format: 'csv' | 'jsonl',
  filename: string,
  events: AsyncIterable<AuditEventItem>,
): Promise<void> {
  res.status(200);
  res.setHeader('content-type', format === 'csv' ? 'text/csv; charset=utf-8' : 'application/x-ndjson');
  res.setHeader('content-disposition', `attachment; filename="${filename}.${format}"`);
  res.setHeader('cache-control', 'no-store');
  if (format === 'csv') res.write(`${CSV_COLUMNS.join(',')}\r\n`);
  for await (const e of events) {
    const line = format === 'csv' ? csvLine(e) : `${JSON.stringify(e)}\n`;
    if (res.destroyed) return;
    if (!res.write(line))
      await new Promise<void>((resolve) => {
        res.once('drain', resolve);
        res.once('close', resolve);
      });
  }
  res.end();
}
