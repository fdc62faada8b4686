// Paths that a layer names without owning them: the model routes answer a plain GET of the run socket's
// path with 426 (src/models/routes.ts), while the socket itself is served by src/runs/socket.ts, which
// builds on the model call. Kept here, below both, so that neither imports the other for a string.

/** The run WebSocket (interface document: Run WebSocket frames; CONTRACT §9). */
export const RUNS_PATH = '/v1/runs/ws';
