import type { RequestHandler } from 'express';

// Browser-based OAuth clients (an MCP inspector in a web page, an editor's web view) call the token,
// registration, device, revocation and introspection endpoints from another origin. These endpoints
// never read cookies (clients authenticate with client_id / secrets in the request), so allowing any
// origin without credentials exposes nothing a non-browser client could not already do.

export const OAUTH_CORS_PATHS = [
  '/oauth/token',
  '/oauth/register',
  '/oauth/device_authorization',
  '/oauth/revoke',
  '/oauth/introspect',
];

export const oauthCors: RequestHandler = (req, res, next) => {
  res.setHeader('Access-Control-Allow-Origin', '*');
  if (req.method === 'OPTIONS') {
    res.setHeader('Access-Control-Allow-Methods', 'POST');
    res.setHeader('Access-Control-Allow-Headers', 'authorization, content-type, mcp-protocol-version');
    res.setHeader('Access-Control-Max-Age', '600');
    res.status(204).end();
    return;
  }
  next();
};
