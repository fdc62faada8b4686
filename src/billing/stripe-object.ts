// A Stripe object as delivered (events, or objects re-fetched by reconciliation): read defensively,
// since the API version decides which fields exist and where (invoice.subscription, then
// invoice.parent.subscription_details.subscription). Fields are read as `unknown` and each reader says
// what it needs, so a field that moved reads as missing, never as a value of the wrong type.

export type StripeObject = Readonly<Record<string, unknown>>;

const isObject = (v: unknown): v is StripeObject => typeof v === 'object' && v !== null;

/** The value at a path of nested fields (`at(invoice, 'lines', 'data', 0, 'period')`); undefined where a step is missing. */
export function at(value: unknown, ...path: (string | number)[]): unknown {
  let v = value;
  for (const key of path) {
    if (!isObject(v)) return undefined;
    v = (v as Record<string | number, unknown>)[key];
  }
  return v;
}

/** The object at a path, or an empty one. */
export const objectAt = (value: unknown, ...path: (string | number)[]): StripeObject => {
  const v = at(value, ...path);
  return isObject(v) ? v : {};
};

/** The objects of the list at a path (a Stripe list's `data`, an array field); non-objects skipped. */
export const objectsAt = (value: unknown, ...path: (string | number)[]): StripeObject[] => {
  const v = at(value, ...path);
  return Array.isArray(v) ? v.filter(isObject) : [];
};

/** The text at a path, or null. */
export const textAt = (value: unknown, ...path: (string | number)[]): string | null => {
  const v = at(value, ...path);
  return typeof v === 'string' ? v : null;
};

/** An id field: Stripe sends a related object either as its id or, expanded, as the object. */
export const idOf = (v: unknown): string | null => (typeof v === 'string' ? v : textAt(v, 'id'));
