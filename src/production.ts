// What NODE_ENV=production refuses (CONTRACT §1). Each problem names the variable to
// change. Production is where a mistake costs someone their account: mail that only sits in a table
// (reset links readable by whoever reads the database), /dev/mail answering anyone's reset link,
// session cookies and tokens over plain http, server keys stored beside the data they protect.
// README "Deploying" lists what a production start needs.

const LOOPBACK_HOSTS = new Set(['localhost', '127.0.0.1', '[::1]']);

const isLoopback = (hostname: string): boolean =>
  LOOPBACK_HOSTS.has(hostname) || /^127\.\d+\.\d+\.\d+$/.test(hostname);

/** The settings the production checks read (a slice of src/config.ts Config). */
export interface ProductionSettings {
  devMode: boolean;
  smtpUrl: string | undefined;
  baseUrl: string;
  v2Url: string;
  lightUrl: string;
  keyEncryptionKey: string | undefined;
}

/** `NAME: why` for every setting that is unsafe in production; empty when there is none. */
export function productionProblems(config: ProductionSettings): string[] {
  const problems: string[] = [];
  if (config.devMode)
    problems.push('DEV_MODE: must be off in production (/dev/mail would show anyone any reset link)');
  if (!config.smtpUrl)
    problems.push(
      'SMTP_URL: required in production (without it, verification and reset mail is never sent, only stored)',
    );
  for (const [name, origin] of [
    ['BASE_URL', config.baseUrl],
    ['V2_URL', config.v2Url],
    ['LIGHT_URL', config.lightUrl],
  ] as const) {
    const url = new URL(origin);
    if (url.protocol === 'http:' && !isLoopback(url.hostname))
      problems.push(`${name}: must be https:// in production (${origin} would carry sessions in the clear)`);
  }
  if (!config.keyEncryptionKey)
    problems.push(
      'KEY_ENCRYPTION_KEY: required in production (generated server keys are stored sealed under it, not beside the data)',
    );
  return problems;
}
