import { CliError, EXIT } from '../errors.js';
import { line, type IO } from '../io.js';
import { jsonText } from '../inert.js';
import { serverOrigin } from '../server.js';

// `svc mcp-config [--editor NAME]`: the configuration that points an MCP client at /mcp/platform. The
// editor signs in by itself through OAuth (the 401's resource_metadata leads it to this server's
// authorization server, docs/oauth.md "With an MCP client"), so no secret is written here.

const EDITORS = ['claude', 'cursor', 'vscode', 'windsurf', 'generic'] as const;
type Editor = (typeof EDITORS)[number];

export function mcpConfigFor(editor: Editor, url: string): { file: string; config: unknown } {
  switch (editor) {
    case 'claude':
      return {
        file: '.mcp.json (Claude Code), or add it with `claude mcp add --transport http svc URL`',
        config: { mcpServers: { svc: { type: 'http', url } } },
      };
    case 'cursor':
      return { file: '~/.cursor/mcp.json', config: { mcpServers: { svc: { url } } } };
    case 'vscode':
      return { file: '.vscode/mcp.json', config: { servers: { svc: { type: 'http', url } } } };
    case 'windsurf':
      return {
        file: '~/.codeium/windsurf/mcp_config.json',
        config: { mcpServers: { svc: { serverUrl: url } } },
      };
    default:
      return { file: 'your MCP client’s configuration', config: { mcpServers: { svc: { url } } } };
  }
}

export function mcpConfig(io: IO, opts: { url?: string; editor?: string; json?: boolean }): number {
  const origin = serverOrigin(opts.url, io.env);
  const editor = (opts.editor ?? 'generic').toLowerCase();
  if (!(EDITORS as readonly string[]).includes(editor)) {
    throw new CliError(
      EXIT.usage,
      `Unknown editor "${opts.editor}".`,
      `Choose one of: ${EDITORS.join(', ')}.`,
    );
  }
  const { file, config } = mcpConfigFor(editor as Editor, `${origin}/mcp/platform`);
  if (opts.json || !io.isTTY) {
    line(io.stdout, jsonText(config, 2));
    return EXIT.ok;
  }
  line(
    io.stderr,
    io.color.dim(`Put this in ${file}; the editor signs in with OAuth when it first connects:`),
  );
  line(io.stdout, jsonText(config, 2));
  return EXIT.ok;
}
