// Exit codes (docs/cli.md, "Exit codes"): scripts branch on these, so they never change meaning.
export const EXIT = {
  ok: 0,
  /** Anything else that failed: a run's error, a server fault. */
  failure: 1,
  /** Bad arguments or options. */
  usage: 2,
  /** Not signed in, or the sign-in has ended: run `svc login`. */
  auth: 3,
  /** Signed in but not allowed: no credits (402), a viewer spending, not a member (403). */
  denied: 4,
  /** The server cannot answer now: unreachable, 503, 429 after the retries. Try again later. */
  unavailable: 5,
  /** The server is not the one it claims to be (issuer mismatch): nothing was sent to it. */
  untrusted: 6,
  /** Ctrl-C. */
  interrupted: 130,
} as const;

/** An error meant for a person: what happened, and the next step to take. */
export class CliError extends Error {
  constructor(
    readonly exitCode: number,
    message: string,
    readonly nextStep?: string,
    readonly code?: string,
  ) {
    super(message);
  }
}

export const notSignedIn = (server: string) =>
  new CliError(EXIT.auth, `You are not signed in to ${server}.`, `Run \`svc login --url ${server}\`.`);

export const signInAgain = (server: string) =>
  new CliError(
    EXIT.auth,
    `Your sign-in to ${server} has ended (the server no longer accepts it).`,
    `Run \`svc login --url ${server}\` again.`,
    'invalid_grant',
  );
