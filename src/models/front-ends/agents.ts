import { readFileSync } from 'node:fs';
import { z } from 'zod';

// The agent catalog (CONTRACT §9): from AGENTS_FILE (JSON, validated at start-up so a bad file stops the
// process with a clear message) or the built-in one, whose `default` agent offers the tools a terminal
// client executes on its own machine. The server never runs these tools; it only asks for them.

const jsonSchema = z
  .record(z.string(), z.unknown())
  .refine((s) => s.type === 'object', 'parameters must be a JSON Schema of type "object"');

const toolSchema = z.strictObject({
  name: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, 'tool names are 1-64 of A-Z a-z 0-9 _ -'),
  description: z.string().min(1).max(1024),
  parameters: jsonSchema,
});

const agentSchema = z.strictObject({
  name: z.string().regex(/^[A-Za-z0-9_.-]{1,64}$/),
  description: z.string().min(1).max(1024),
  /** The system prompt the run starts with (not shown by GET /v1/agents). */
  instructions: z.string().max(20_000).optional(),
  tools: z.array(toolSchema).max(64),
});

const catalogSchema = z
  .union([z.array(agentSchema), z.strictObject({ agents: z.array(agentSchema) }).transform((c) => c.agents)])
  .refine((agents) => agents.length > 0, 'the catalog needs at least one agent')
  .refine(
    (agents) => new Set(agents.map((a) => a.name)).size === agents.length,
    'agent names must be unique',
  );

export type Agent = z.output<typeof agentSchema>;
export type AgentTool = z.output<typeof toolSchema>;

export interface AgentCatalog {
  list(): Agent[];
  get(name: string): Agent | undefined;
}

const str = (description: string) => ({ type: 'string', description });

export const BUILT_IN_AGENTS: Agent[] = [
  {
    name: 'default',
    description:
      'A general coding assistant that works in your terminal: it reads, writes and lists files and runs commands on your machine, with your approval.',
    instructions:
      "You are a helpful coding assistant. You can use the tools to inspect and change files in the user's working directory and to run commands. Keep answers short.",
    tools: [
      {
        name: 'read_file',
        description: 'Read a text file from the working directory.',
        parameters: {
          type: 'object',
          properties: { path: str('Path of the file, relative to the working directory.') },
          required: ['path'],
          additionalProperties: false,
        },
      },
      {
        name: 'write_file',
        description: 'Create or overwrite a text file in the working directory.',
        parameters: {
          type: 'object',
          properties: {
            path: str('Path of the file, relative to the working directory.'),
            content: str('The complete new content of the file.'),
          },
          required: ['path', 'content'],
          additionalProperties: false,
        },
      },
      {
        name: 'list_directory',
        description: 'List the entries of a directory.',
        parameters: {
          type: 'object',
          properties: {
            path: str('Directory path, relative to the working directory; "." for the working directory.'),
          },
          required: ['path'],
          additionalProperties: false,
        },
      },
      {
        name: 'run_command',
        description: 'Run a shell command in the working directory and return its exit code and output.',
        parameters: {
          type: 'object',
          properties: {
            command: str('The command line to run.'),
            timeout_seconds: {
              type: 'integer',
              minimum: 1,
              maximum: 600,
              description: 'Stop the command after this many seconds.',
            },
          },
          required: ['command'],
          additionalProperties: false,
        },
      },
    ],
  },
];

function catalogOf(agents: Agent[]): AgentCatalog {
  const byName = new Map(agents.map((a) => [a.name, a]));
  return { list: () => agents, get: (name) => byName.get(name) };
}

/** Loads AGENTS_FILE or the built-in catalog; throws a message naming the file and the bad field. */
export function loadAgentCatalog(agentsFile: string | undefined): AgentCatalog {
  if (!agentsFile) return catalogOf(BUILT_IN_AGENTS);
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(agentsFile, 'utf8'));
  } catch (err) {
    throw new Error(`AGENTS_FILE ${agentsFile}: ${(err as Error).message}`, { cause: err });
  }
  const parsed = catalogSchema.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw new Error(`AGENTS_FILE ${agentsFile}: ${issue.path.join('.') || '(root)'}: ${issue.message}`);
  }
  return catalogOf(parsed.data);
}

/** The public view (GET /v1/agents): name, description, tools. */
export const publicAgent = (a: Agent) => ({
  name: a.name,
  description: a.description,
  tools: a.tools.map((t) => ({ name: t.name, description: t.description, parameters: t.parameters })),
});

/** The tools of an agent in the OpenAI request shape. */
export const openAiTools = (a: Agent) =>
  a.tools.map((t) => ({
    type: 'function',
    function: { name: t.name, description: t.description, parameters: t.parameters },
  }));
