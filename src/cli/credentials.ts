import { chmod, mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { randomBytes } from 'node:crypto';

// $XDG_CONFIG_HOME/svc/credentials.json (XDG Base Directory; ~/.config when unset), mode 0600 in a 0700
// folder, one entry per server origin. Secrets live here and nowhere else: never printed, never logged.

export interface StoredGrant {
  access_token: string;
  refresh_token: string;
  /** Unix seconds when the access token stops working. */
  expires_at: number;
  scope: string;
}

export interface ServerEntry {
  /** The OAuth issuer the grants came from (checked against discovery on every use). */
  issuer?: string;
  /** usr_… of the signed-in person (the access token's `sub`). */
  user?: string;
  /** The organization the grants were approved for (`org` claim). */
  grant_org?: string;
  /** `svc orgs use`: sent as x-svc-organisation on model calls and runs. */
  default_org?: string;
  grants?: { model?: StoredGrant; platform?: StoredGrant };
  /** `svc login --api-key`: a durable svc_ token bound to one organization. */
  api_key?: { token: string; org: string; email: string };
}

interface CredentialsFile {
  version: 1;
  servers: Record<string, ServerEntry>;
}

export function credentialsPath(env: NodeJS.ProcessEnv): string {
  const base = env.XDG_CONFIG_HOME || join(env.HOME || homedir(), '.config');
  return join(base, 'svc', 'credentials.json');
}

async function readAll(path: string): Promise<CredentialsFile> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { version: 1, servers: {} };
    throw err;
  }
  const parsed = JSON.parse(text) as Partial<CredentialsFile>;
  return { version: 1, servers: parsed.servers ?? {} };
}

export async function readEntry(env: NodeJS.ProcessEnv, server: string): Promise<ServerEntry | undefined> {
  return (await readAll(credentialsPath(env))).servers[server];
}

/**
 * Changes one server's entry (undefined removes it). The file is written to a temporary name created
 * 0600 and renamed over the old one, so a reader never sees half a file and the secret is never
 * readable by others, not even for a moment.
 */
export async function updateEntry(
  env: NodeJS.ProcessEnv,
  server: string,
  change: (entry: ServerEntry | undefined) => ServerEntry | undefined,
): Promise<void> {
  const path = credentialsPath(env);
  const all = await readAll(path);
  const next = change(all.servers[server]);
  if (next) all.servers[server] = next;
  else delete all.servers[server];
  await mkdir(dirname(path), { recursive: true, mode: 0o700 });
  const temp = `${path}.${randomBytes(6).toString('hex')}.tmp`;
  await writeFile(temp, `${JSON.stringify(all, null, 2)}\n`, { mode: 0o600 });
  await chmod(temp, 0o600);
  await rename(temp, path);
}
