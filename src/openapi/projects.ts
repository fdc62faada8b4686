import { z } from 'zod';
import { idParams } from '../projects/routes.js';
import {
  createBody,
  forkBody,
  listQuery,
  listOf,
  projectDetailOut,
  projectOut,
  transferBody,
  updateBody,
} from '../projects/schema.js';
import { route } from './describe.js';

// Projects over REST (CONTRACT §10); the MCP tools share these shapes (src/projects/schema.ts).

const project = projectOut.meta({ id: 'Project' });
const projectDetail = projectDetailOut.meta({ id: 'ProjectDetail' });
const both = ['session', 'token'] as const;

export const projectRoutes = [
  route('get', '/v1/projects', {
    summary: "An organization's projects (org_id, or client_id as its other spelling)",
    auth: [...both],
    query: listQuery.extend({ client_id: z.string().optional() }).partial({ org_id: true }),
    response: listOf(project),
    errors: [403],
  }),
  route('post', '/v1/projects', {
    summary: 'Create a project',
    auth: [...both],
    body: createBody,
    response: project,
    errors: [403],
  }),
  route('get', '/v1/projects/:project_id', {
    summary: 'A project with its brief and counts',
    auth: [...both],
    params: idParams,
    response: projectDetail,
    errors: [403, 404],
  }),
  route('patch', '/v1/projects/:project_id', {
    summary: 'Change a project’s name, description or brief',
    auth: [...both],
    params: idParams,
    body: updateBody,
    response: projectDetail,
    errors: [403, 404],
  }),
  route('delete', '/v1/projects/:project_id', {
    summary: 'Delete a project',
    auth: [...both],
    params: idParams,
    response: z.object({ deleted: z.literal(true) }),
    errors: [403, 404],
  }),
  route('post', '/v1/projects/:project_id/fork', {
    summary: 'Copy a project (into this or another organization of the caller)',
    auth: [...both],
    params: idParams,
    body: forkBody,
    response: project,
    errors: [403, 404],
  }),
  route('post', '/v1/projects/:project_id/transfer', {
    summary: 'Move a project to another organization',
    auth: [...both],
    params: idParams,
    body: transferBody,
    response: project,
    errors: [403, 404],
  }),
];
