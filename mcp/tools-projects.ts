import {
  briefIn,
  descriptionIn,
  listOf,
  nameIn,
  projectDetailOut,
  projectOut,
} from '../src/projects/schema.js';
import {
  createProject,
  deleteProject,
  forkProject,
  getProject,
  listProjects,
  transferProject,
  updateProject,
} from '../src/projects/service.js';
import {
  ADDITIVE_IDEMPOTENT,
  CREATES,
  OVERWRITES,
  READ_ONLY,
  defineTool,
  type PlatformTool,
  orgIdArg,
  pageArgs,
  projectIdArg,
  deletedOut,
} from './tool-kit.js';

// Project tools (CONTRACT §10): same services, same rules and same fields as /v1/projects.

export const projectTools: PlatformTool[] = [
  defineTool(
    'list_projects',
    {
      title: 'List projects',
      description: 'Projects of a client (default: the acting client), newest first.',
      inputSchema: { org_id: orgIdArg.optional(), ...pageArgs },
      outputSchema: listOf(projectOut).shape,
      annotations: READ_ONLY,
    },
    async (ctx, a) => ({
      data: await listProjects(ctx.deps.database, ctx.actor, {
        orgKey: ctx.orgKeyOf(a.org_id),
        limit: a.limit ?? 20,
        offset: a.offset ?? 0,
        startingAfter: a.starting_after,
      }),
    }),
  ),

  defineTool(
    'get_project',
    {
      title: 'Get a project',
      description: 'A project with its brief and the number of reports and files.',
      inputSchema: { project_id: projectIdArg },
      outputSchema: projectDetailOut.shape,
      annotations: READ_ONLY,
    },
    (ctx, a) => getProject(ctx.deps.db, ctx.actor, a.project_id),
  ),

  defineTool(
    'create_project',
    {
      title: 'Create a project',
      description: 'Creates a project in a client where you are an owner or member.',
      inputSchema: {
        org_id: orgIdArg.optional(),
        name: nameIn,
        description: descriptionIn.optional(),
        brief: briefIn.optional(),
      },
      outputSchema: projectOut.shape,
      annotations: CREATES,
    },
    (ctx, a) =>
      createProject(ctx.deps.db, ctx.actor, {
        orgKey: ctx.orgKeyOf(a.org_id),
        name: a.name,
        description: a.description,
        brief: a.brief,
      }),
  ),

  defineTool(
    'update_project',
    {
      title: 'Update a project',
      description: 'Changes the name, description and/or brief (markdown) of a project.',
      inputSchema: {
        project_id: projectIdArg,
        name: nameIn.optional(),
        description: descriptionIn.optional(),
        brief: briefIn.optional(),
      },
      outputSchema: projectDetailOut.shape,
      annotations: OVERWRITES,
    },
    (ctx, a) =>
      updateProject(ctx.deps.db, ctx.actor, a.project_id, {
        name: a.name,
        description: a.description,
        brief: a.brief,
      }),
  ),

  defineTool(
    'delete_project',
    {
      title: 'Delete a project',
      description: 'Deletes a project with its reports, files and shares.',
      inputSchema: { project_id: projectIdArg },
      outputSchema: deletedOut,
      annotations: OVERWRITES,
    },
    (ctx, a) => deleteProject(ctx.deps.db, ctx.actor, a.project_id),
  ),

  defineTool(
    'fork_project',
    {
      title: 'Fork a project',
      description:
        'Copies brief, reports and files into a new project named "<name> (fork)", "(fork 2)", … unless name is given; ' +
        'target_org_id forks into another of your clients.',
      inputSchema: { project_id: projectIdArg, name: nameIn.optional(), target_org_id: orgIdArg.optional() },
      outputSchema: projectOut.shape,
      annotations: CREATES,
    },
    (ctx, a) =>
      forkProject(ctx.deps.db, ctx.actor, a.project_id, {
        name: a.name,
        targetOrgKey: a.target_org_id === undefined ? undefined : ctx.orgKeyOf(a.target_org_id),
      }),
  ),

  defineTool(
    'transfer_project',
    {
      title: 'Transfer a project',
      description: 'Moves a project to another client; you must own both clients.',
      inputSchema: { project_id: projectIdArg, target_org_id: orgIdArg },
      outputSchema: projectOut.shape,
      annotations: { ...ADDITIVE_IDEMPOTENT, destructiveHint: true },
    },
    (ctx, a) => transferProject(ctx.deps.db, ctx.actor, a.project_id, ctx.orgKeyOf(a.target_org_id)),
  ),
];
