import type { Command } from 'commander';
import { CliError, EXIT } from '../errors.js';
import type { IO } from '../io.js';

// `svc completion bash|zsh|fish`: a completion script for the shell, made from the commands commander
// knows, so it never lists a command that does not exist. Install: docs/cli.md, "Shell completion".

const SHELLS = ['bash', 'zsh', 'fish'] as const;

interface Entry {
  name: string;
  description: string;
  subcommands: { name: string; description: string }[];
  options: string[];
}

function entries(program: Command): Entry[] {
  return program.commands.map((c) => ({
    name: c.name(),
    description: c.description(),
    subcommands: c.commands.map((s) => ({ name: s.name(), description: s.description() })),
    options: [...c.options.map((o) => o.long).filter((o): o is string => Boolean(o)), '--help'],
  }));
}

/** Single quotes for the shell: a description may hold any character. */
const quoted = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

function bash(list: Entry[]): string {
  const cases = list
    .map((e) => {
      const words = [...e.subcommands.map((s) => s.name), ...e.options].join(' ');
      return `    ${e.name}) words=${quoted(words)} ;;`;
    })
    .join('\n');
  return `# svc completion for bash: add \`source <(svc completion bash)\` to ~/.bashrc
_svc() {
  local cur=\${COMP_WORDS[COMP_CWORD]} words
  if [ "$COMP_CWORD" -eq 1 ]; then
    words=${quoted(list.map((e) => e.name).join(' ') + ' --help --version')}
  else
    case "\${COMP_WORDS[1]}" in
${cases}
    *) words='--help' ;;
    esac
  fi
  COMPREPLY=($(compgen -W "$words" -- "$cur"))
}
complete -F _svc svc
`;
}

function zsh(list: Entry[]): string {
  const described = (items: { name: string; description: string }[]) =>
    items.map((i) => quoted(`${i.name.replace(/:/g, '\\:')}:${i.description}`)).join(' ');
  const cases = list
    .map((e) => {
      const subs = e.subcommands.length ? `_describe 'subcommand' subs; ` : '';
      const subList = e.subcommands.length ? `local -a subs=(${described(e.subcommands)}); ` : '';
      return `    ${e.name}) ${subList}${subs}compadd -- ${e.options.join(' ')} ;;`;
    })
    .join('\n');
  return `#compdef svc
# svc completion for zsh: add \`source <(svc completion zsh)\` to ~/.zshrc (after compinit)
_svc() {
  local -a commands=(${described(list)})
  if (( CURRENT == 2 )); then
    _describe 'command' commands
    return
  fi
  case "$words[2]" in
${cases}
  esac
}
compdef _svc svc
`;
}

function fish(list: Entry[]): string {
  const out = [
    '# svc completion for fish: svc completion fish > ~/.config/fish/completions/svc.fish',
    'complete -c svc -f',
  ];
  for (const e of list) {
    out.push(`complete -c svc -n __fish_use_subcommand -a ${e.name} -d ${quoted(e.description)}`);
    for (const s of e.subcommands)
      out.push(
        `complete -c svc -n ${quoted(`__fish_seen_subcommand_from ${e.name}`)} -a ${s.name} -d ${quoted(s.description)}`,
      );
    for (const o of e.options)
      out.push(`complete -c svc -n ${quoted(`__fish_seen_subcommand_from ${e.name}`)} -l ${o.slice(2)}`);
  }
  return `${out.join('\n')}\n`;
}

export function completion(io: IO, program: Command, shell: string): number {
  if (!(SHELLS as readonly string[]).includes(shell)) {
    throw new CliError(EXIT.usage, `No completion for "${shell}".`, `Choose one of: ${SHELLS.join(', ')}.`);
  }
  const list = entries(program);
  io.stdout.write(shell === 'bash' ? bash(list) : shell === 'zsh' ? zsh(list) : fish(list));
  return EXIT.ok;
}
