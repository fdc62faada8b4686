import { spawn } from 'node:child_process';
import { lstat, mkdir, readdir, readFile, realpath, writeFile } from 'node:fs/promises';
import { dirname, isAbsolute, join, relative, sep } from 'node:path';
import { executingConfig, likelySecret } from './confine.js';

// The built-in agent's tools (docs/models.md: read_file, write_file, list_directory, run_command), run on
// this machine for `svc run`. Files are confined to the working directory: no absolute paths, no `..`,
// and no symlink whose target lies outside (checked on the real path, so a link planted inside cannot
// lead out). A command runs with the working directory as its cwd, a timeout and an output cap; it is
// the confirmation, not a sandbox, that protects the machine (docs/cli.md).

export const READ_TOOLS = new Set(['read_file', 'list_directory']);
export const KNOWN_TOOLS = new Set(['read_file', 'write_file', 'list_directory', 'run_command']);

/** Largest file read_file returns whole; beyond it the start and a note. */
const READ_CAP_BYTES = 256 * 1024;
const LIST_CAP = 1000;

export class ToolRefused extends Error {}

export interface ToolLimits {
  commandTimeoutSeconds: number;
  outputCapBytes: number;
  signal: AbortSignal;
}

function inside(root: string, real: string): boolean {
  const rel = relative(root, real);
  return rel === '' || (!rel.startsWith(`..${sep}`) && rel !== '..' && !isAbsolute(rel));
}

/** Resolves a tool's `path` inside `root` (a real path), or refuses. */
export async function confinedPath(root: string, path: unknown): Promise<string> {
  return (await resolveInside(root, path)).target;
}

/**
 * A tool's `path` inside `root`: the path to use, and where it really leads relative to `root` (through
 * any symlink inside), so the checks of confine.ts see both `link/config` and the `.git/config` it is.
 */
export async function resolveInside(
  root: string,
  path: unknown,
): Promise<{ target: string; asked: string; real: string }> {
  if (typeof path !== 'string') throw new ToolRefused('path must be a string');
  const p = path === '' ? '.' : path;
  if (isAbsolute(p) || /^[a-zA-Z]:/.test(p)) throw new ToolRefused(`absolute paths are not allowed: ${p}`);
  if (p.split(/[\\/]+/).includes('..')) throw new ToolRefused(`paths may not contain "..": ${p}`);
  const target = join(root, p);
  // The real path of the target, or of its nearest existing ancestor for a file not yet written.
  let probe = target;
  for (;;) {
    try {
      const real = await realpath(probe);
      if (!inside(root, real)) throw new ToolRefused(`${p} leads outside the working directory`);
      return { target, asked: p, real: join(relative(root, real), relative(probe, target)) };
    } catch (err) {
      if (err instanceof ToolRefused) throw err;
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      // A dangling symlink is ENOENT on realpath but exists: refuse rather than write through it.
      if (
        await lstat(probe).then(
          (s) => s.isSymbolicLink(),
          () => false,
        )
      ) {
        throw new ToolRefused(`${p} is a link to something that does not exist`);
      }
      const parent = dirname(probe);
      if (parent === probe) throw new ToolRefused(`${p} cannot be resolved`);
      probe = parent;
    }
  }
}

/** What a call must be refused outright (a write to configuration that executes) or asked about (a secret). */
export async function guardOf(
  root: string,
  name: string,
  args: Record<string, unknown>,
): Promise<{ refused?: string; secret?: string }> {
  if (name !== 'write_file' && name !== 'read_file') return {};
  let where: { asked: string; real: string };
  try {
    where = await resolveInside(root, args.path);
  } catch {
    return {}; // the tool refuses it itself, with the reason
  }
  if (name === 'write_file') {
    const risk = executingConfig(where.asked, where.real);
    return risk ? { refused: `writing ${where.asked} is not allowed: ${risk}` } : {};
  }
  const secret = likelySecret(where.asked, where.real);
  return secret ? { secret } : {};
}

export async function runTool(
  root: string,
  name: string,
  args: Record<string, unknown>,
  limits: ToolLimits,
): Promise<unknown> {
  switch (name) {
    case 'read_file': {
      const path = await confinedPath(root, args.path);
      const bytes = await readFile(path);
      const text = bytes.subarray(0, READ_CAP_BYTES).toString('utf8');
      return bytes.length > READ_CAP_BYTES ? `${text}\n[truncated: ${bytes.length} bytes in all]` : text;
    }
    case 'write_file': {
      const { target: path, asked, real } = await resolveInside(root, args.path);
      const risk = executingConfig(asked, real);
      if (risk) throw new ToolRefused(`writing ${asked} is not allowed: ${risk}`);
      if (typeof args.content !== 'string') throw new ToolRefused('content must be a string');
      await mkdir(dirname(path), { recursive: true });
      await writeFile(path, args.content);
      return `wrote ${Buffer.byteLength(args.content)} bytes to ${String(args.path)}`;
    }
    case 'list_directory': {
      const path = await confinedPath(root, args.path ?? '.');
      const entries = await readdir(path, { withFileTypes: true });
      return entries
        .slice(0, LIST_CAP)
        .map((e) => (e.isDirectory() ? `${e.name}/` : e.name))
        .sort()
        .join('\n');
    }
    case 'run_command': {
      if (typeof args.command !== 'string' || !args.command.trim())
        throw new ToolRefused('command must be a non-empty string');
      const asked = Number(args.timeout_seconds);
      const timeout = Math.min(
        asked > 0 ? asked : limits.commandTimeoutSeconds,
        limits.commandTimeoutSeconds,
      );
      return runCommand(root, args.command, timeout, limits);
    }
    default:
      throw new ToolRefused(`this client does not run the tool "${name}"`);
  }
}

function runCommand(cwd: string, command: string, timeoutSeconds: number, limits: ToolLimits) {
  return new Promise<{ exit_code: number | null; output: string; timed_out: boolean; truncated: boolean }>(
    (resolve) => {
      // Its own process group, so a timeout or Ctrl-C ends the command and whatever it started.
      const child = spawn('/bin/sh', ['-c', command], {
        cwd,
        detached: true,
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      const chunks: Buffer[] = [];
      let size = 0;
      let truncated = false;
      let timedOut = false;
      const collect = (b: Buffer) => {
        if (size >= limits.outputCapBytes) {
          truncated = true;
          return;
        }
        const room = limits.outputCapBytes - size;
        chunks.push(b.subarray(0, room));
        size += Math.min(b.length, room);
        if (b.length > room) truncated = true;
      };
      child.stdout.on('data', collect);
      child.stderr.on('data', collect);
      const kill = () => {
        try {
          process.kill(-child.pid!, 'SIGKILL');
        } catch {
          /* already gone */
        }
      };
      const timer = setTimeout(() => {
        timedOut = true;
        kill();
      }, timeoutSeconds * 1000);
      limits.signal.addEventListener('abort', kill, { once: true });
      child.on('error', () => {});
      child.on('close', (code) => {
        clearTimeout(timer);
        limits.signal.removeEventListener('abort', kill);
        resolve({
          exit_code: code,
          output: Buffer.concat(chunks).toString('utf8'),
          timed_out: timedOut,
          truncated,
        });
      });
    },
  );
}
