// Types of ensure-built.mjs for the TypeScript that imports it (test/helpers/entry.ts).
export function isBuilt(entry: string): boolean;
export function ensureBuilt(entry: string, log?: NodeJS.WritableStream): string;
