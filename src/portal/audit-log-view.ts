import { z } from 'zod';
import type { AuditEventItem } from '../audit/chain.js';
import type { AuditFilter } from '../audit/service.js';
import { html, type SafeHtml } from '../page-kit/html.js';

// What the two audit log pages share (./audit-pages.ts; CONTRACT §11 "The portal shows both, filterable"):
// the filter form (action, actor, from and to days), the events as a table that becomes one card per
// event on a phone (table.stack), the pager along the API's cursor, and the export links with the same
// filters. The page reads the log with the API's own function, so what it shows is what the API answers.

/** The page's query: the API's filters, with days (UTC) for a person instead of Unix seconds. */
const day = z
  .string()
  .regex(/^$|^\d{4}-\d{2}-\d{2}$/, 'Enter a day as YYYY-MM-DD.')
  .refine((d) => d === '' || !Number.isNaN(Date.parse(`${d}T00:00:00Z`)), 'Enter a day that exists.');

export function pageQuerySchema(actions: readonly [string, ...string[]]) {
  return z.object({
    action: z
      .string()
      .refine((a) => a === '' || actions.includes(a), 'Choose an action of the list.')
      .default(''),
    actor_id: z
      .string()
      .max(100, 'An actor id is at most 100 characters.')
      .regex(/^$|^(usr|sa)_[A-Za-z0-9]+$/, 'Choose someone of the list.')
      .default(''),
    since: day.default(''),
    until: day.default(''),
    starting_after: z
      .string()
      .max(64)
      .regex(/^ae_[A-Za-z0-9]+$/, 'No such event in this log.')
      .optional(),
  });
}

export type PageQuery = z.infer<ReturnType<typeof pageQuerySchema>>;

const DAY_SECONDS = 86_400;
const unixOfDay = (d: string) => Date.parse(`${d}T00:00:00Z`) / 1000;

/** The API's filter for the page's query: `until` is the last day shown, so the bound is the next midnight. */
export function filterOfQuery(q: PageQuery): AuditFilter {
  return {
    action: q.action || undefined,
    actorId: q.actor_id || undefined,
    since: q.since ? unixOfDay(q.since) : undefined,
    until: q.until ? unixOfDay(q.until) + DAY_SECONDS : undefined,
  };
}

/** The query string of the API's routes (and exports) for a filter. */
export function apiQueryOf(filter: AuditFilter): string {
  const params = new URLSearchParams();
  if (filter.action) params.set('action', filter.action);
  if (filter.actorId) params.set('actor_id', filter.actorId);
  if (filter.since !== undefined) params.set('since', String(filter.since));
  if (filter.until !== undefined) params.set('until', String(filter.until));
  const s = params.toString();
  return s ? `?${s}` : '';
}

/** A link to this page with `q`'s filters and the given cursor. */
function pageLink(base: string, q: PageQuery, startingAfter?: string): string {
  const params = new URLSearchParams();
  for (const key of ['action', 'actor_id', 'since', 'until'] as const) if (q[key]) params.set(key, q[key]);
  if (startingAfter) params.set('starting_after', startingAfter);
  const s = params.toString();
  return s ? `${base}?${s}` : base;
}

export const whenOf = (unix: number) => new Date(unix * 1000).toISOString().slice(0, 19).replace('T', ' ');

/** What an actor is called on the page: svc itself, an e-mail, or the principal's id. */
export function actorLabel(e: AuditEventItem, names: ReadonlyMap<string, string>): string {
  if (e.actor.type === 'system' || e.actor.id === null) return 'svc (system)';
  return e.actor.email ?? names.get(e.actor.id) ?? e.actor.id;
}

/** An event's details as `key: value` pairs (ids, names, roles, amounts: never a secret, scrubbed). */
export function detailsText(details: Record<string, unknown>): string {
  return Object.entries(details)
    .filter(([, v]) => v !== undefined)
    .map(([k, v]) => `${k}: ${typeof v === 'string' ? v : JSON.stringify(v)}`)
    .join(' · ');
}

export interface Choice {
  value: string;
  label: string;
}

export interface AuditLogView {
  /** This page's path, without query. */
  base: string;
  /** The API route of this log, without query (`/v1/clients/{id}/audit-events`). */
  api: string;
  query: PageQuery;
  errors: Partial<Record<keyof PageQuery, string>>;
  actions: readonly string[];
  actors: Choice[];
  events: AuditEventItem[];
  hasMore: boolean;
  /** Principal ids to names, for actors without an e-mail (service accounts). */
  names: ReadonlyMap<string, string>;
}

function fieldError(id: string, error: string | undefined): SafeHtml {
  return error ? html`<div class="field-error" id="${id}-error">${error}</div>` : html``;
}

const describedBy = (id: string, error: string | undefined, focus = false) =>
  error ? html` aria-describedby="${id}-error" aria-invalid="true"${focus ? html` autofocus` : ''}` : html``;

/** The filter's fields in the form's order: the first in error takes the focus. */
const FILTER_FIELDS = ['action', 'actor_id', 'since', 'until'] as const;

function filterForm(v: AuditLogView): SafeHtml {
  const { query: q, errors } = v;
  const first = FILTER_FIELDS.find((f) => errors[f]);
  const select = (id: string, name: 'action' | 'actor_id', label: string, choices: Choice[]) =>
    html`<div class="field"><label for="${id}">${label}</label><select id="${id}" name="${name}"${describedBy(id, errors[name], first === name)}>${choices.map(
      (c) =>
        html`<option value="${c.value}"${c.value === q[name] ? html` selected` : ''}>${c.label}</option>`,
    )}</select>${fieldError(id, errors[name])}</div>`;
  const date = (id: string, name: 'since' | 'until', label: string) =>
    html`<div class="field"><label for="${id}">${label}</label><input id="${id}" name="${name}" type="date" value="${q[name]}"${describedBy(id, errors[name], first === name)}>${fieldError(id, errors[name])}</div>`;
  const actionChoices = [
    { value: '', label: 'Any action' },
    ...v.actions.map((a) => ({ value: a, label: a })),
  ];
  return html`<form method="get" action="${v.base}" class="actions" aria-label="Filter the events">
${select('f-action', 'action', 'Action', actionChoices)}
${select('f-actor', 'actor_id', 'Who', [{ value: '', label: 'Anyone' }, ...v.actors])}
${date('f-since', 'since', 'From (UTC day)')}
${date('f-until', 'until', 'To (UTC day, included)')}
<button type="submit" class="secondary">Show</button> <a href="${v.base}">Clear the filters</a></form>`;
}

function eventRow(e: AuditEventItem, v: AuditLogView): SafeHtml {
  const who = actorLabel(e, v.names);
  const whoCell =
    e.actor.id === null
      ? html`<span class="who">${who}</span>`
      : html`<a href="${pageLink(v.base, { ...v.query, actor_id: e.actor.id })}"><span class="who">${who}</span><span class="sr"> (only their events)</span></a>`;
  const from = [e.ip, e.user_agent].filter(Boolean).join(' · ');
  return html`<tr><td data-label="When (UTC)">${whenOf(e.created_at)}</td>
<td data-label="Action"><strong>${e.action}</strong><div class="sub mono">${e.id}</div></td>
<td data-label="Who">${whoCell}${e.credential_id ? html`<div class="sub">with ${e.credential_id}</div>` : ''}</td>
<td data-label="Target">${e.target.type}${e.target.id ? html` <span class="mono">${e.target.id}</span>` : ''}</td>
<td data-label="Details" class="md">${detailsText(e.details) || '—'}</td>
<td data-label="From" class="md">${from || '—'}</td></tr>`;
}

export function auditLogBody(v: AuditLogView): SafeHtml {
  const filter = filterOfQuery(v.query);
  const table =
    v.events.length === 0
      ? html`<p class="muted">No events${v.query.action || v.query.actor_id || v.query.since || v.query.until ? ' match these filters' : ' yet'}.</p>`
      : html`<table class="stack" aria-labelledby="h-events"><thead><tr><th scope="col">When (UTC)</th><th scope="col">Action</th><th scope="col">Who</th><th scope="col">Target</th><th scope="col">Details</th><th scope="col">From</th></tr></thead>
<tbody>${v.events.map((e) => eventRow(e, v))}</tbody></table>`;
  const older = v.hasMore ? v.events.at(-1)?.id : undefined;
  const pager = html`<nav class="pager" aria-label="Pages of events">${v.query.starting_after ? html`<a href="${pageLink(v.base, v.query)}">← Newest events</a>` : ''}${older ? html`<a href="${pageLink(v.base, v.query, older)}">Older events →</a>` : ''}</nav>`;
  const exports = apiQueryOf(filter);
  return html`${filterForm(v)}
<h2 id="h-events">Events</h2>
${table}
${pager}
<p><a href="${v.api}.csv${exports}">Download these events (CSV)</a> · <a href="${v.api}.jsonl${exports}">JSONL</a></p>`;
}
