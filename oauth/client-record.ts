// What a client_id names, whichever source it comes from (the built-in client, a registered row, a
// client ID metadata document): the one shape oauth/clients.ts and oauth/client-metadata.ts both
// yield, kept below them so neither imports the other for it (docs/architecture.md).

export interface OAuthClient {
  clientId: string;
  source: 'builtin' | 'registered' | 'metadata';
  clientName: string | null;
  clientUri: string | null;
  redirectUris: string[];
  grantTypes: string[];
  tokenEndpointAuthMethod: string;
  clientSecretHash: string | null;
}
