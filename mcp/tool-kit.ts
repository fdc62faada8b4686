import type { CallToolResult, McpServer, ToolAnnotations } from '@modelcontextprotocol/server';
import { z } from 'zod';
import type { Deps } from '../src/deps.js';
import { AppError } from '../src/http/errors.js';
import type { Actor } from '../src/projects/access.js';
import { projectIdIn } from '../src/projects/schema.js';
import type { McpGrant } from './guard.js';
import { withToolSpan } from '../src/telemetry/spans.js';

// What every platform tool module is written with: the context a tool runs in, how a tool body
// becomes a result, the annotations and the argument schemas that several tools share. It sits below
// the server that registers the tools (mcp/server.ts) and below each tool module, so none of them
// imports another (docs/architecture.md).

export interface ToolContext {
  deps: Deps;
  actor: Actor;
  grant: McpGrant;
  /** `org_id` argument → stored key; default: the acting organization (CONTRACT §10). */
  orgKeyOf(orgId: string | undefined): string;
}

/** Runs a tool body: the object in structuredContent (and as JSON text); an AppError as an isError
 *  result whose message starts with its code (CONTRACT §10) — never a transport failure. */
export async function runTool(
  ctx: ToolContext,
  fn: () => Promise<Record<string, unknown>>,
): Promise<CallToolResult> {
  try {
    const out = await fn();
    return { content: [{ type: 'text', text: JSON.stringify(out) }], structuredContent: out };
  } catch (err) {
    if (err instanceof AppError && err.expose) return toolError(err.code, err.message);
    if (err instanceof AppError) return toolError(err.code, 'try again later');
    ctx.deps.log.error({ err }, 'platform tool failed');
    return toolError('INTERNAL', 'internal error');
  }
}

export const toolError = (code: string, message: string): CallToolResult => ({
  content: [{ type: 'text', text: `${code}: ${message}` }],
  isError: true,
});

export const READ_ONLY = {
  readOnlyHint: true,
  destructiveHint: false,
  idempotentHint: true,
  openWorldHint: false,
} as const;
export const CREATES = {
  readOnlyHint: false,
  destructiveHint: false,
  idempotentHint: false,
  openWorldHint: false,
} as const;
export const OVERWRITES = {
  readOnlyHint: false,
  destructiveHint: true,
  idempotentHint: true,
  openWorldHint: false,
} as const;
export const ADDITIVE_IDEMPOTENT = {
  readOnlyHint: false,
  destructiveHint: false,
  idempotentHint: true,
  openWorldHint: false,
} as const;

/**
 * A platform tool: its MCP definition, whose zod schemas are built once when the module loads, and the
 * step that registers it on a request's server with that request's context. Building the schemas per
 * request cost more than the call itself (bench/README.md#mcp).
 */
export interface PlatformTool {
  name: string;
  /** Annotated read-only: what a read-only selection or a `platform:read` grant may list and call. */
  readOnly: boolean;
  register(server: McpServer, ctx: ToolContext): void;
}

export function defineTool<In extends z.ZodRawShape, Out extends z.ZodRawShape>(
  name: string,
  config: {
    title: string;
    description: string;
    inputSchema: In;
    outputSchema: Out;
    annotations: ToolAnnotations;
  },
  run: (ctx: ToolContext, args: z.output<z.ZodObject<In>>) => Promise<Record<string, unknown>>,
): PlatformTool {
  const inputSchema = jsonSchemaOnce(z.object(config.inputSchema));
  const definition = { ...config, inputSchema, outputSchema: jsonSchemaOnce(z.object(config.outputSchema)) };
  return {
    name,
    readOnly: config.annotations.readOnlyHint === true,
    register(server, ctx) {
      server.registerTool(name, definition, (args) =>
        withToolSpan(name, () => runTool(ctx, () => run(ctx, args))),
      );
    },
  };
}

/** How the SDK asks a schema for its JSON Schema form (Standard JSON Schema: the target draft). */
type JsonSchemaOptions = Parameters<z.ZodType['~standard']['jsonSchema']['input']>[0];

/**
 * The schema with its JSON Schema form converted once per process. The SDK converts a tool's zod
 * schemas to JSON Schema on the servers it builds (the input schema before every 2026-07-28 call, for
 * its `Mcp-Param-*` check; the output schema for the result's projection; both for `tools/list`), and a
 * server here lives for one request: that conversion, the same every time, took about 8% of svc's CPU
 * on a `tools/call` in a profile (docs/decisions/0095-mcp-schema-conversion-once.md). The converted
 * forms are frozen: requests share them.
 */
function jsonSchemaOnce<T extends z.ZodType>(schema: T): T {
  const standard = schema['~standard'];
  const converted = new Map<string, Record<string, unknown>>();
  const once = (io: 'input' | 'output') => (options: JsonSchemaOptions) => {
    const key = `${io} ${options.target}`;
    let json = converted.get(key);
    if (!json) {
      json = deepFreeze(standard.jsonSchema[io](options));
      if (!options.libraryOptions) converted.set(key, json);
    }
    return json;
  };
  schema['~standard'] = { ...standard, jsonSchema: { input: once('input'), output: once('output') } };
  return schema;
}

function deepFreeze<T>(value: T): T {
  if (value && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const inner of Object.values(value)) deepFreeze(inner);
  }
  return value;
}

/** Tool arguments are plain strings in the schema (JSON Schema cannot express our id transform). */
export const orgIdArg = z.string().max(80).describe('client_… or org_… id; default: the acting client');
export const pageArgs = {
  limit: z.number().int().min(1).max(100).optional().describe('page size, default 20, max 100'),
  offset: z.number().int().min(0).optional().describe('items to skip, default 0'),
  starting_after: z
    .string()
    .min(1)
    .max(200)
    .optional()
    .describe('the id of the last item of the previous page: the page starts right after it'),
};
export const projectIdArg = projectIdIn.describe('prj_… id of the project');
export const deletedOut = { deleted: z.literal(true) };
