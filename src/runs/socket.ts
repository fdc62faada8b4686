import type { Server } from 'node:http';
import type { Deps } from '../deps.js';

// The run WebSocket (/v1/runs/ws) is built by its issue; it attaches to the HTTP server's upgrades.
export function attachRunSocket(_server: Server, _deps: Deps): void {}
