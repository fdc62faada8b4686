// The actions of the audit log (CONTRACT §11), one list per log: an organization's and a person's own.

export const ORG_AUDIT_ACTIONS = [
  'token.created',
  'token.revoked',
  'token.expired',
  'service_account.created',
  'service_account.deleted',
  'member.added',
  'member.removed',
  'member.role_changed',
  'invitation.sent',
  'invitation.accepted',
  'invitation.revoked',
  'allocation.changed',
  'budget.set',
  'limits.set',
  'alert.set',
  'auto_topup.set',
  'webhook_endpoint.created',
  'webhook_endpoint.deleted',
  'grant.approved',
  'grant.revoked',
  'client.renamed',
  'client.deleted',
  'subscription.changed',
  'payment.succeeded',
  'payment.failed',
  'dispute.opened',
  'dispute.closed',
  'refund.created',
] as const;

export const ACCOUNT_AUDIT_ACTIONS = [
  'account.signed_in',
  'account.sign_in_failed',
  'account.password_changed',
  'account.password_reset',
  'account.2fa_enabled',
  'account.2fa_disabled',
  'account.sessions_revoked',
  'account.deleted',
] as const;

export type OrgAuditAction = (typeof ORG_AUDIT_ACTIONS)[number];
export type AccountAuditAction = (typeof ACCOUNT_AUDIT_ACTIONS)[number];
export type AuditAction = OrgAuditAction | AccountAuditAction;

export const ACTOR_TYPES = ['user', 'service_account', 'system'] as const;
export type ActorType = (typeof ACTOR_TYPES)[number];
