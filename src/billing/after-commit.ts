import type { Deps } from '../deps.js';

// What a billing transaction owes once it has committed: the owner's mails (a top-up's receipt, a failed
// auto top-up's notice), sent at most once and never from inside the transaction (a rolled-back grant
// mails nothing). The webhook and reconciliation run them after their commit.

/** What those steps need: the mailer, the configuration (links), the log. */
export type MailDeps = Pick<Deps, 'mailer' | 'config' | 'log'>;

export type AfterCommit = (deps: MailDeps) => Promise<void>;
