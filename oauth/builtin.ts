// The built-in public client (CONTRACT §7): the svc terminal. It is not a row: it cannot be edited or
// deleted through registration, and its redirect URIs are loopback ones (RFC 8252 §7.3, any port).

import { BUILTIN_CLI_CLIENT_ID } from '../src/ids.js';

export const BUILTIN_CLI_CLIENT = {
  clientId: BUILTIN_CLI_CLIENT_ID,
  source: 'builtin' as const,
  clientName: 'svc command-line tool',
  clientUri: null,
  redirectUris: ['http://127.0.0.1/callback', 'http://[::1]/callback', 'http://localhost/callback'],
  grantTypes: ['authorization_code', 'refresh_token', 'urn:ietf:params:oauth:grant-type:device_code'],
  tokenEndpointAuthMethod: 'none',
  clientSecretHash: null,
};
