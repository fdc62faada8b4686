import type { Request } from 'express';
import { errorOf } from '../src/http/errors.js';
import { MCP_ERRORS } from './errors.js';
import type { PlatformTool } from './tool-kit.js';
import { projectTools } from './tools-projects.js';
import { fileTools, reportTools } from './tools-content.js';
import { shareTools } from './tools-shares.js';

// Tool selection (CONTRACT §10 "Tool selection"): a client narrows what `tools/list` shows and what it
// may call with the header `X-MCP-Toolsets` (comma-separated toolsets), the header `X-MCP-Readonly: true`
// or the path `/mcp/platform/readonly`. A tool outside the selection is an unknown tool. A grant whose
// scope is `platform:read` lists only read-only tools; calling another is the step-up 403 (mcp/guard.ts).

export const TOOLSETS = {
  projects: projectTools,
  reports: reportTools,
  files: fileTools,
  shares: shareTools,
} as const satisfies Record<string, PlatformTool[]>;
export type Toolset = keyof typeof TOOLSETS;

/** The twenty tools of CONTRACT §10, defined once per process (mcp/tool-kit.ts defineTool). */
export const ALL_TOOLS: readonly PlatformTool[] = Object.values(TOOLSETS).flat();
export const TOOLS_BY_NAME: ReadonlyMap<string, PlatformTool> = new Map(ALL_TOOLS.map((t) => [t.name, t]));
const TOOLSET_OF: ReadonlyMap<PlatformTool, Toolset> = new Map(
  (Object.entries(TOOLSETS) as [Toolset, PlatformTool[]][]).flatMap(([set, tools]) =>
    tools.map((t) => [t, set] as const),
  ),
);

export const READONLY_SUFFIX = '/readonly';

export interface ToolSelection {
  /** The tools this request may call: the chosen toolsets, read-only ones only when read-only was asked. */
  callable: readonly PlatformTool[];
  /** What `tools/list` shows: `callable`, narrowed to read-only tools for a `platform:read` grant. */
  listed: readonly PlatformTool[];
}

function parseToolsets(header: string | undefined): ReadonlySet<Toolset> | null {
  if (header === undefined || header.trim() === '') return null;
  const out = new Set<Toolset>();
  for (const raw of header.split(',')) {
    const name = raw.trim().toLowerCase();
    if (name === '') continue;
    if (name === 'all') return null;
    if (!(name in TOOLSETS)) {
      throw errorOf(
        MCP_ERRORS,
        'INVALID_REQUEST',
        `X-MCP-Toolsets: unknown toolset ${JSON.stringify(name.slice(0, 40))}; use any of ${Object.keys(TOOLSETS).join(', ')}`,
      );
    }
    out.add(name as Toolset);
  }
  return out.size ? out : null;
}

function parseReadonly(header: string | undefined): boolean {
  const value = header?.trim().toLowerCase();
  if (value === undefined || value === '' || value === 'false') return false;
  if (value === 'true') return true;
  throw errorOf(MCP_ERRORS, 'INVALID_REQUEST', 'X-MCP-Readonly: expected true or false');
}

/** The request's selection (headers and path), and what a read-only grant narrows it to. */
export function selectionOf(req: Request, grantReadOnly: boolean): ToolSelection {
  const toolsets = parseToolsets(req.get('x-mcp-toolsets'));
  const readOnly =
    parseReadonly(req.get('x-mcp-readonly')) ||
    req.path.toLowerCase().replace(/\/$/, '').endsWith(READONLY_SUFFIX);
  const callable = ALL_TOOLS.filter(
    (t) => (!toolsets || toolsets.has(TOOLSET_OF.get(t)!)) && (!readOnly || t.readOnly),
  );
  return { callable, listed: grantReadOnly ? callable.filter((t) => t.readOnly) : callable };
}
