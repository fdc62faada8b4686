import { and, eq } from 'drizzle-orm';
import type { Deps } from '../deps.js';
import { isPersonId, users } from '../db/schema.js';
import { clientIdOf } from '../ids.js';
import { canonicalMailbox } from '../accounts/trial-addresses.js';
import { memberMail, type MemberChange } from '../mail/member-mail.js';

// A person added to an organization, given another role in it or removed from it by its owner is told so
// by mail (docs/orgs-tokens-device.md § Members). The mail follows the change, after its transaction
// committed: a relay that is down, or a mailbox past its bound (docs/limits.md § Member mail: 10 a day,
// as the invitation mail counts mailboxes), leaves the change made and the mail out, and the log says so.

export async function tellMember(
  deps: Deps,
  org: { id: string; name: string },
  userId: string,
  change: MemberChange,
): Promise<void> {
  try {
    const [user] = await deps.db
      .select({ email: users.email, name: users.name })
      .from(users)
      .where(and(eq(users.id, userId), isPersonId(users.id)));
    if (!user) return;
    const mailbox = canonicalMailbox(user.email);
    await deps.limits.memberMailsPerAddress.check(mailbox);
    await deps.limits.memberMailsPerAddress.fail(mailbox);
    const link =
      change.kind === 'removed'
        ? `${deps.config.v2Url}/account`
        : `${deps.config.v2Url}/account/clients/${clientIdOf(org.id)}`;
    await deps.mailer.send(memberMail({ to: user.email, name: user.name, orgName: org.name, change, link }));
  } catch (err) {
    deps.log.warn({ err: (err as Error).message, userId, change: change.kind }, 'member mail not sent');
  }
}
