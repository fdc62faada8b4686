import { z } from 'zod';
import { acceptBody, inviteBody, renameBody, roleBody } from '../orgs/people-routes.js';
import { pageQuery } from '../http/pagination.js';
import { route } from './describe.js';
import { page } from './pages.js';

// An organization's people (docs/orgs-tokens-device.md): rename, roles, leave and
// invitations by e-mail.

const unixTime = z.number().int().meta({ description: 'Unix time, seconds' });
const clientId = z
  .string()
  .meta({ description: 'An organization id, client_… (CONTRACT §2)', example: 'client_k3j9x2' });
const clientParams = z.object({ client_id: clientId });
const both = ['session', 'token'] as const;

const member = z.object({
  user_id: z.string(),
  email: z.string(),
  name: z.string(),
  role: z.enum(['owner', 'member', 'viewer']),
  created_at: unixTime,
});

const invitation = z
  .object({
    id: z.string().meta({ example: 'inv_k3j9x2' }),
    client_id: clientId,
    email: z.string(),
    role: z.enum(['member', 'viewer']),
    status: z.enum(['pending', 'accepted', 'revoked', 'expired']),
    created_at: unixTime,
    expires_at: unixTime,
    accepted_at: unixTime.nullable(),
    revoked_at: unixTime.nullable(),
  })
  .meta({ id: 'Invitation' });

export const peopleRoutes = [
  route('patch', '/v1/clients/:client_id', {
    summary: 'Rename a client (owner)',
    auth: [...both],
    params: clientParams,
    body: renameBody,
    response: z.object({ id: clientId, name: z.string(), owner_id: z.string(), created_at: unixTime }),
    errors: [403, 404],
  }),
  route('patch', '/v1/clients/:client_id/members/:user_id', {
    summary: "Change a member's role to member or viewer (owner; not the owner's own)",
    auth: [...both],
    params: clientParams.extend({ user_id: z.string() }),
    body: roleBody,
    response: member,
    errors: [403, 404],
  }),
  route('post', '/v1/clients/:client_id/leave', {
    summary: "Leave a client (any member but the owner); the caller's tokens and grants for it are revoked",
    auth: [...both],
    params: clientParams,
    response: z.object({ left: z.literal(true) }),
    errors: [403, 404],
  }),
  route('get', '/v1/clients/:client_id/invitations', {
    summary: "A client's invitations, newest first (owner)",
    auth: [...both],
    params: clientParams,
    query: pageQuery,
    response: z.object({ data: z.array(invitation) }),
    errors: [403, 404],
  }),
  route('post', '/v1/clients/:client_id/invitations', {
    summary: 'Invite an e-mail address, registered or not (owner); mails a single-use link valid 7 days',
    auth: [...both],
    params: clientParams,
    body: inviteBody,
    response: invitation,
    errors: [403, 404, 409, 429],
  }),
  route('post', '/v1/clients/:client_id/invitations/:invitation_id/resend', {
    summary:
      'Send an open invitation again (owner): a new link valid 7 days, the old one stops working; at most 3 re-sends per invitation and 20 a day per client (429 past either)',
    auth: [...both],
    params: clientParams.extend({ invitation_id: z.string() }),
    response: invitation,
    errors: [403, 404, 409, 410, 429],
  }),
  route('delete', '/v1/clients/:client_id/invitations/:invitation_id', {
    summary: 'Revoke an invitation (owner): its link stops working',
    auth: [...both],
    params: clientParams.extend({ invitation_id: z.string() }),
    response: invitation,
    errors: [403, 404, 409],
  }),
  route('post', '/v1/invitations/accept', {
    summary:
      "Accept an invitation with its link's token (a session whose verified e-mail is the invited one)",
    auth: ['session'],
    body: acceptBody,
    response: z.object({
      client: z.object({ id: clientId, name: z.string(), role: z.enum(['member', 'viewer']) }),
    }),
    errors: [403, 404, 409, 410, 429],
  }),
];

/** The portal's organization pages over the same services (src/portal/{org-settings,member,invitation}-pages). */
export const peoplePageRoutes = [
  page(
    'get',
    '/account/clients/:clientId/settings',
    "An organization's settings: rename, delete or leave",
    true,
  ),
  page('post', '/account/clients/:clientId/settings/name', 'Rename the organization (form)', true),
  page('get', '/account/clients/:clientId/delete', 'Confirm deleting the organization', true),
  page('post', '/account/clients/:clientId/delete', 'Delete the organization (form)', true),
  page('get', '/account/clients/:clientId/leave', 'Confirm leaving the organization', true),
  page('post', '/account/clients/:clientId/leave', 'Leave the organization (form)', true),
  page('post', '/account/clients/:clientId/members/:userId/role', "Change a member's role (form)", true),
  page('get', '/account/clients/:clientId/members/:userId/remove', 'Confirm removing a member', true),
  page('post', '/account/clients/:clientId/invitations', 'Invite an e-mail address (form)', true),
  page(
    'post',
    '/account/clients/:clientId/invitations/:invitationId/revoke',
    'Revoke an invitation (form)',
    true,
  ),
  page(
    'post',
    '/account/clients/:clientId/invitations/:invitationId/resend',
    'Send an invitation again (form)',
    true,
  ),
  page(
    'get',
    '/account/invitations/accept',
    'An invitation (the link in the mail, ?token=): what it is and how to accept',
  ),
  page('post', '/account/invitations/accept', 'Accept an invitation (form)', true),
];
