import { basename } from 'node:path';

// Confinement beyond paths (docs/cli.md, "What is confined and what is asked"). A path inside the working
// directory can still hand the machine over: git runs hooks and `core.fsmonitor` from `.git/`, direnv
// runs `.envrc`, editors run tasks from `.vscode/` and `.idea/`, shells run their rc files. Writes to
// such "configuration that executes" are refused outright — no prompt, not even with --yes — because a
// person approving "write_file .git/config" rarely sees that the next `git status` runs what it wrote.
// Reads of files that likely hold secrets ask first (even with --yes): what a tool reads goes to the
// model's provider.

/** A path as its segments, lower-cased (case-insensitive file systems treat `.GIT` as `.git`). */
const segmentsOf = (rel: string): string[] =>
  rel
    .split(/[\\/]+/)
    .filter((s) => s !== '' && s !== '.')
    .map((s) => s.toLowerCase());

/** Folders whose content a tool runs: any path with one of these segments. */
const EXECUTING_FOLDERS: Record<string, string> = {
  '.git': 'git runs hooks and configuration (core.fsmonitor, aliases) from .git/',
  '.husky': 'git hooks run from .husky/',
  '.githooks': 'git hooks run from .githooks/',
  '.vscode': 'the editor runs tasks and settings from .vscode/',
  '.idea': 'the IDE runs run configurations from .idea/',
  '.devcontainer': 'a dev container runs commands from .devcontainer/',
  '.direnv': 'direnv runs what .direnv/ holds',
  '.ssh': 'ssh reads commands and keys from .ssh/',
};

/** Files a tool runs, by name, wherever they are. */
const EXECUTING_FILES: Record<string, string> = {
  '.envrc': 'direnv runs .envrc when you enter the folder',
  '.gitmodules': 'git reads submodule commands from .gitmodules',
  '.gitconfig': 'git runs commands named in .gitconfig',
  '.pre-commit-config.yaml': 'pre-commit runs the hooks it names',
  'lefthook.yml': 'lefthook runs the hooks it names',
  '.lefthook.yml': 'lefthook runs the hooks it names',
  '.npmrc': 'npm runs scripts and node options named in .npmrc',
  '.yarnrc': 'yarn runs what .yarnrc names',
  '.yarnrc.yml': 'yarn runs the yarnPath .yarnrc.yml names',
  '.pnpmfile.cjs': 'pnpm runs .pnpmfile.cjs on install',
  '.bashrc': 'your shell runs it',
  '.bash_profile': 'your shell runs it',
  '.bash_login': 'your shell runs it',
  '.bash_logout': 'your shell runs it',
  '.profile': 'your shell runs it',
  '.zshrc': 'your shell runs it',
  '.zshenv': 'your shell runs it',
  '.zprofile': 'your shell runs it',
  '.zlogin': 'your shell runs it',
  '.zlogout': 'your shell runs it',
  '.inputrc': 'your shell reads key bindings from it',
  'config.fish': 'your shell runs it',
};

/**
 * Why writing `rel` (relative to the working directory) could run code, or undefined when it is plain
 * data. Both the path asked for and its real path (through symlinks inside the folder) are checked.
 */
export function executingConfig(...rels: string[]): string | undefined {
  for (const rel of rels) {
    const segments = segmentsOf(rel);
    for (const s of segments.slice(0, -1)) if (EXECUTING_FOLDERS[s]) return EXECUTING_FOLDERS[s];
    const name = segments.at(-1);
    if (!name) continue;
    // `.git` as a file is a gitfile pointing git at another repository; `.git/` as the last segment too.
    if (EXECUTING_FOLDERS[name]) return EXECUTING_FOLDERS[name];
    if (EXECUTING_FILES[name]) return EXECUTING_FILES[name];
    if (segments.includes('fish') && name.endsWith('.fish')) return 'your shell runs it';
  }
  return undefined;
}

/** `.env` files that by convention hold no secrets (templates committed to the repository). */
const ENV_TEMPLATES = new Set(['.env.example', '.env.sample', '.env.template', '.env.dist', '.env.defaults']);

const SECRET_FILES = new Set([
  '.npmrc',
  '.pypirc',
  '.netrc',
  '.git-credentials',
  '.pgpass',
  '.htpasswd',
  'credentials',
  'credentials.json',
  'secrets.json',
  'secrets.yaml',
  'secrets.yml',
  'service-account.json',
]);
const SECRET_EXTENSIONS = ['.pem', '.key', '.p12', '.pfx', '.jks', '.keystore', '.kdbx', '.gpg', '.asc'];
const SECRET_FOLDERS = new Set(['.ssh', '.aws', '.gnupg', '.kube', '.docker']);

/**
 * Why reading `rel` may send a secret to the model's provider, or undefined. Asked before reading; the
 * file's name, not its content, decides (nothing is read before the person answers).
 */
export function likelySecret(...rels: string[]): string | undefined {
  for (const rel of rels) {
    const segments = segmentsOf(rel);
    const name = segments.at(-1) ?? '';
    if (segments.slice(0, -1).some((s) => SECRET_FOLDERS.has(s)))
      return 'it is in a folder of keys and credentials';
    if (segments.slice(0, -1).includes('.git') && name === 'config')
      return '.git/config can hold credentials in remote URLs';
    if ((name === '.env' || name.startsWith('.env.')) && !ENV_TEMPLATES.has(name))
      return 'an .env file usually holds passwords and API keys';
    if (name.endsWith('.env') && name !== '.env') return 'an .env file usually holds passwords and API keys';
    if (/^id_[a-z0-9]+$/.test(name)) return 'it looks like an SSH private key';
    if (SECRET_EXTENSIONS.some((e) => name.endsWith(e))) return 'it looks like a key or certificate store';
    if (SECRET_FILES.has(name)) return `${basename(rel)} usually holds credentials or tokens`;
  }
  return undefined;
}
