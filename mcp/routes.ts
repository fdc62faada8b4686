import { Router } from 'express';
import type { Deps } from '../src/deps.js';

// The MCP server at /mcp/platform is built by its issue.
export function mcpRoutes(_deps: Deps): Router {
  return Router();
}
