import { z } from 'zod';
import { listOf, roleIn, shareIdIn, shareOut } from '../src/projects/schema.js';
import { createShareLink, listShares, revokeShare, shareWithUser } from '../src/projects/shares.js';
import {
  ADDITIVE_IDEMPOTENT,
  CREATES,
  OVERWRITES,
  READ_ONLY,
  defineTool,
  type PlatformTool,
  projectIdArg,
} from './tool-kit.js';

// Sharing tools (CONTRACT §10): a registered e-mail as viewer or editor, or a read-only public link
// `{V2_URL}/s/<token>` shown once.

export const shareTools: PlatformTool[] = [
  defineTool(
    'share_project',
    {
      title: 'Share a project with a person',
      description:
        'Gives a registered account viewer (read) or editor (read and write) access to this project alone.',
      inputSchema: { project_id: projectIdArg, email: z.string().max(320), role: roleIn },
      outputSchema: shareOut.shape,
      annotations: ADDITIVE_IDEMPOTENT,
    },
    (ctx, a) => shareWithUser(ctx.deps.db, ctx.actor, a.project_id, { email: a.email, role: a.role }),
  ),

  defineTool(
    'create_share_link',
    {
      title: 'Create a public link',
      description:
        'A read-only public link to the project’s brief and reports. The URL is shown only in this answer.',
      inputSchema: { project_id: projectIdArg },
      outputSchema: shareOut.shape,
      annotations: CREATES,
    },
    ({ deps, actor }, a) => createShareLink(deps.db, deps.keys.hmac, deps.config.v2Url, actor, a.project_id),
  ),

  defineTool(
    'list_shares',
    {
      title: 'List shares',
      description: 'Live shares of a project (people and public links; link URLs are not shown again).',
      inputSchema: { project_id: projectIdArg },
      outputSchema: listOf(shareOut).shape,
      annotations: READ_ONLY,
    },
    async (ctx, a) => ({ data: await listShares(ctx.deps.db, ctx.actor, a.project_id) }),
  ),

  defineTool(
    'revoke_share',
    {
      title: 'Revoke a share',
      description: 'Ends a share: the person loses access, or the public link stops working.',
      inputSchema: { share_id: shareIdIn.describe('shr_… id of the share') },
      outputSchema: shareOut.shape,
      annotations: OVERWRITES,
    },
    (ctx, a) => revokeShare(ctx.deps.db, ctx.actor, a.share_id),
  ),
];
