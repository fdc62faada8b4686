import { DEFAULT_URL } from './server.js';

// The examples `--help` shows under each command, and where more help is: the guide the server serves
// at /docs/cli (docs/cli.md), on the server this terminal talks to.

export const helpUrl = (env: NodeJS.ProcessEnv) =>
  `${(env.SVC_URL ?? DEFAULT_URL).replace(/\/+$/, '')}/docs/cli`;

export const EXAMPLES: Record<string, string> = {
  svc: [
    '  $ svc login                      # sign in: approve the code in a browser',
    '  $ svc chat "What is a monad?"    # one question, the answer streamed',
    '  $ svc run "add a README"         # an agent; it asks before it writes or runs anything',
  ].join('\n'),
  login: [
    '  $ svc login                           # device code; Enter opens the browser',
    '  $ svc login --browser                 # this machine’s browser, redirect to 127.0.0.1',
    '  $ svc login --org "Acme Research"     # then act for that organization',
    '  $ svc login --api-key                 # an svc_ key for scripts and CI',
  ].join('\n'),
  logout: '  $ svc logout',
  whoami: ['  $ svc whoami', '  $ svc whoami --json | jq -r .email'].join('\n'),
  orgs: [
    '  $ svc orgs',
    '  $ svc orgs use "Acme Research"    # by name',
    '  $ svc orgs use client_7f3k…        # or either id spelling',
  ].join('\n'),
  balance: ['  $ svc balance', '  $ svc balance --json | jq .balance.balance_credits'].join('\n'),
  usage: ['  $ svc usage', '  $ svc usage --json | jq .month.totals.credits_debited'].join('\n'),
  'mcp-config': '  $ svc mcp-config --editor claude > .mcp.json',
  chat: [
    '  $ svc chat                          # a conversation',
    '  $ svc chat "Summarise this" < notes.md',
    '  $ svc chat --json "Hi" | jq .svc_outcome.credits_debited',
  ].join('\n'),
  run: [
    '  $ svc run "list the files here"',
    '  $ svc run --allow read "explain this project"   # reads only, never asks',
    '  $ svc run --agent default --command-timeout 30 "run the tests"',
  ].join('\n'),
  keys: [
    '  $ svc keys                         # asks for your e-mail, password and 2FA code',
    "  $ svc keys --all --json | jq '.data[] | {id, token_name, revoked_at}'",
    '  $ svc keys revoke 42',
  ].join('\n'),
  'service-accounts': [
    '  $ svc service-accounts create ci-bot --role member',
    '  $ svc service-accounts mint sa_… --expires-in-days 90',
  ].join('\n'),
  completion: [
    '  $ source <(svc completion bash)                      # in ~/.bashrc',
    '  $ source <(svc completion zsh)                       # in ~/.zshrc, after compinit',
    '  $ svc completion fish > ~/.config/fish/completions/svc.fish',
  ].join('\n'),
};
