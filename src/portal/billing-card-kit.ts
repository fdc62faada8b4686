import type { Request, Response } from 'express';
import { AppError, errorOf, COMMON_ERRORS } from '../http/errors.js';
import { clientIdOf } from '../ids.js';
import { html, type SafeHtml } from '../page-kit/html.js';
import { CREDITS_PER_CENT, usdOfTokens } from '../billing/par.js';

// What the billing page's owner cards share (alert, auto top-up, budgets, webhook endpoints):
// the organization of the URL, the form-action registrar the page hands each card (CSRF checked first,
// owner only, a person's mistake shown on the billing page itself, next to the field it is about), and
// the attributes that tie an error to its input (aria-invalid, aria-describedby; STYLE "Pages").

export interface BillingOrg {
  orgKey: string;
  name: string;
  role: 'owner' | 'member' | 'viewer';
}

export type BillingCard = 'alert' | 'hooks' | 'autotopup' | 'budgets';

/** A refused form of one card: the page is drawn again with `text` next to `field` (or atop the card). */
export interface CardError {
  card: BillingCard;
  field?: string;
  text: string;
}

/** Registers `POST <billing page>/<path>`: CSRF, owner only, then `act`; its 4xx shows on `card`. */
export type OwnerAction = (
  path: string,
  card: BillingCard,
  act: (req: Request, res: Response, org: BillingOrg) => Promise<void>,
) => void;

export const billingPath = (orgKey: string) => `/account/clients/${clientIdOf(orgKey)}/billing`;

/** A form mistake about one field (the page shows it next to that field's input). */
export const fieldMistake = (field: string, message: string) =>
  errorOf(COMMON_ERRORS, 'VALIDATION_ERROR', message, { errors: [{ path: field, message }], param: field });

/** Which field an error is about: a form mistake's, or a service's validation of that field. */
export function errorField(err: AppError): string | undefined {
  return err.extra.param ?? err.extra.errors?.[0]?.path;
}

/**
 * The attributes of input `id` (its form field `field`) and the message to put after it: with the card's
 * error about this field, the input is invalid, described by the message, and takes the focus.
 */
export function fieldState(
  error: CardError | undefined,
  card: BillingCard,
  field: string,
  id: string,
  hintId?: string,
): { attrs: SafeHtml; message: SafeHtml } {
  const mine = error?.card === card && error.field === field ? error : undefined;
  const describedBy = [hintId, mine ? `${id}-error` : undefined].filter(Boolean).join(' ');
  return {
    attrs: html`${describedBy ? html` aria-describedby="${describedBy}"` : ''}${mine ? html` aria-invalid="true" autofocus` : ''}`,
    message: mine ? html`<div class="field-error" id="${id}-error">${mine.text}</div>` : html``,
  };
}

/** The card's error that names no field of it (a 403, a 409, a refused URL …), announced atop the card. */
export function cardMessage(error: CardError | undefined, card: BillingCard, fields: string[]): SafeHtml {
  if (!error || error.card !== card || (error.field && fields.includes(error.field))) return html``;
  return html`<div class="alert error" role="alert">${error.text}</div>`;
}

const tokenFormat = new Intl.NumberFormat('en-US'); // built once: each call would build one
export const fmtTokens = (v: number) => tokenFormat.format(v);
/** 2500 → "$25.00": the one money format of the pages (cents through the par formatter, src/billing/par.ts). */
export const fmtUsd = (cents: number) => usdOfTokens(cents * CREDITS_PER_CENT);
export const fmtTime = (unix: number) => new Date(unix * 1000).toISOString().slice(0, 16).replace('T', ' ');

/** CONTRACT §8: one charge (a top-up, an automatic one) is 1.00 to 10,000.00 USD. */
const CHARGE_MIN_CENTS = 100;
const CHARGE_MAX_CENTS = 1_000_000;
export const isChargeCents = (cents: number) =>
  Number.isInteger(cents) && cents >= CHARGE_MIN_CENTS && cents <= CHARGE_MAX_CENTS;

/** A top-up's "12.50" → 1250 cents; null when it is not an amount a charge may be. */
export function parseUsdAmount(text: string): number | null {
  const m = /^\s*\$?\s*(\d{1,5})(?:[.,](\d{1,2}))?\s*$/.exec(text);
  if (!m) return null;
  const cents = Number(m[1]) * 100 + Number((m[2] ?? '0').padEnd(2, '0'));
  return isChargeCents(cents) ? cents : null;
}

/** "12.50" → 1250 cents; "1,000" → 100000; null when it is not a plain amount. */
export function parseCents(text: string): number | null {
  const m = /^\s*\$?\s*(\d{1,7})(?:[.](\d{1,2}))?\s*$/.exec(text.replace(/,(?=\d{3}\b)/g, ''));
  if (!m) return null;
  return Number(m[1]) * 100 + Number((m[2] ?? '0').padEnd(2, '0'));
}

/** "5,000" → 5000; null when it is not a whole number of tokens. */
export function parseTokens(text: string): number | null {
  const t = text.replace(/[\s,_]/g, '');
  return /^\d{1,15}$/.test(t) ? Number(t) : null;
}
