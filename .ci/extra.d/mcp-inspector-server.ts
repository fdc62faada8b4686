// A throw-away svc server for .ci/extra.d/mcp-inspector.sh: the real app on 127.0.0.1..3 (the test
// harness: PostgreSQL when TEST_DATABASE_URL is set, else an in-memory PGlite), one verified user with
// a project, and a real platform access token. Prints one JSON line, then serves until SIGTERM.
import { startTestServer } from '../../test/helpers/server.js';
import { createUser } from '../../test/helpers/fixtures.js';
import { issueTestGrants } from '../../test/helpers/oauth.js';
import { createProject } from '../../src/projects/service.js';

const server = await startTestServer();
const user = await createUser(server);
const { platform } = await issueTestGrants(server, user, { orgKey: user.orgKey, resources: ['platform'] });
const project = await createProject(
  server.deps.db,
  { userId: user.userId },
  { orgKey: user.orgKey, name: 'Inspector project' },
);
process.stdout.write(
  `${JSON.stringify({ url: `${server.v2Url}/mcp/platform`, token: platform, project_id: project.id })}\n`,
);
const stop = async () => {
  await server.close();
  process.exit(0);
};
process.on('SIGTERM', () => void stop());
process.on('SIGINT', () => void stop());
