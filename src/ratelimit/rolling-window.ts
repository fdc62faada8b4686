// Rolling windows for the RPM and TPM limits (CONTRACT §11 "Rate limits": a rolling minute), in the store
// every process shares: PostgreSQL (or PGlite) by default, Redis when REDIS_URL is set. Each window is the
// log of what it admitted, timestamped by the store's own clock; what it holds is the sum of the entries
// younger than the window. Why a log of our own rather than rate-limiter-flexible's fixed windows:
// docs/decisions/0065-rolling-rate-windows.md.

/** The rolling window the limits count in: a minute (CONTRACT §11). */
export const WINDOW_MS = 60_000;

/** One call counted in one window: `amount` against `key`'s `limit`. */
export interface WindowCount {
  key: string;
  limit: number;
  amount: number;
}

/** A window's state as one admission saw it, in the store's clock. */
export interface WindowState {
  /** What the window holds: after the call when admitted, before it when refused. */
  used: number;
  /** Milliseconds until the window is empty (its newest entry leaves it); 0 when it is. */
  resetMs: number;
  /** Milliseconds until the call's amount fits (0: it fits now); null when it never can (amount > limit). */
  retryMs: number | null;
}

/** An admitted call's entry in one window, to correct its amount at settle. */
export interface WindowEntry {
  key: string;
  id: string;
  amount: number;
}

export interface WindowAdmission {
  /** True when the call fitted every window and was counted in all of them; false: in none. */
  admitted: boolean;
  /** One per count, in the counts' order. */
  states: WindowState[];
  /** One per count when admitted, else empty. */
  entries: WindowEntry[];
}

export interface RollingWindows {
  /** Counts one call in every window, all or none, atomically across every process of the store. */
  admit(counts: WindowCount[]): Promise<WindowAdmission>;
  /** Sets an admitted entry's amount to what the call really used (nothing when it has left the window). */
  correct(entry: WindowEntry, amount: number): Promise<void>;
  close(): void;
}
