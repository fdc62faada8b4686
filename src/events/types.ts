// The outbound event types (docs/billing.md "Outbound events"). An endpoint subscribes
// to some of them; an event of another type is not delivered to it.
export const EVENT_TYPES = [
  'balance.low',
  'balance.exhausted',
  'topup.succeeded',
  'topup.failed',
  'subscription.updated',
  'member_budget.exhausted',
  // Each event of the organization's audit log, as GET …/audit-events answers it (CONTRACT §11; opt-in).
  'audit.event',
] as const;

export type EventType = (typeof EVENT_TYPES)[number];
