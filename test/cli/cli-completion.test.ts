import { describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { CLI_TEST_TIMEOUT_MS, runCli } from '../helpers/cli.js';

// `svc completion bash|zsh|fish`: scripts made from the commands commander knows; bash's is run for real
// (completing `svc or` and `svc orgs u`), an unknown shell is a usage error.

describe('svc completion', { timeout: CLI_TEST_TIMEOUT_MS }, () => {
  it('bash: completes commands and subcommands when sourced', async () => {
    const res = await runCli(['completion', 'bash']);
    expect(res.code, res.stderr).toBe(0);
    const complete = (...words: string[]) =>
      spawnSync(
        'bash',
        [
          '-c',
          `eval "$SCRIPT"; COMP_WORDS=(${words.map((w) => `'${w}'`).join(' ')}); COMP_CWORD=${words.length - 1}; _svc; printf '%s\\n' "\${COMPREPLY[@]}"`,
        ],
        { env: { PATH: process.env.PATH ?? '', SCRIPT: res.stdout }, encoding: 'utf8' },
      )
        .stdout.split('\n')
        .filter(Boolean);
    expect(complete('svc', 'us')).toEqual(['usage']);
    expect(complete('svc', 'orgs', 'u')).toEqual(['use']);
    expect(complete('svc', 'whoami', '--j')).toEqual(['--json']);
  });

  it('zsh and fish: one entry per command; an unknown shell exits 2', async () => {
    const zsh = await runCli(['completion', 'zsh']);
    expect(zsh.stdout).toMatch(/^#compdef svc/);
    expect(zsh.stdout).toContain(
      "'usage:tokens the organization spent today and this month (UTC), by model'",
    );
    const fish = await runCli(['completion', 'fish']);
    expect(fish.stdout).toContain('complete -c svc -n __fish_use_subcommand -a whoami');
    const bad = await runCli(['completion', 'tcsh']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('Choose one of: bash, zsh, fish.');
  });
});
