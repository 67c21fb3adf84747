/**
 * The kit's errors, in one module of their own so that the client, the serve launcher and the
 * binary lookup can all throw them without importing each other.
 *
 * - `TwiceError`: the kit could not do what was asked (serve unreachable, a request refused,
 *   a wait that ran out). Never a verdict.
 * - `TwiceHTTPError`: serve or a fake answered with an error status; `message` is its own words.
 * - `TwiceTimeout`: a bounded wait ran out (a step's point never reached, serve not answering).
 * - `ServeStartError`: `twice serve` could not be found, started, or was not ready in time.
 * - `TwiceViolation`: the verdict on the claims, when an invariant was violated.
 *
 * @module
 */

import type { Verdict } from "./model.js";

/** The kit could not do what was asked. Never a verdict: a violated invariant is `TwiceViolation`. */
export class TwiceError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = new.target.name;
  }
}

/**
 * Serve or a fake answered with an error status. `serveMessage` is its own words (which name
 * the field and the value at fault); `message` adds the method, the URL and the status.
 */
export class TwiceHTTPError extends TwiceError {
  readonly method: string;
  readonly url: string;
  readonly status: number;
  readonly serveMessage: string;

  constructor(method: string, url: string, status: number, serveMessage: string) {
    super(`${method} ${url} answered ${status}: ${serveMessage}`);
    this.method = method;
    this.url = url;
    this.status = status;
    this.serveMessage = serveMessage;
  }
}

/** A bounded wait ran out: a step's point never reached, serve not answering in time. */
export class TwiceTimeout extends TwiceError {}

/** `twice serve` could not be found, started, or did not become ready in time. */
export class ServeStartError extends TwiceError {}

/**
 * No verdict yet: the check was asked not to wait (`{ wait: false }`), nothing was violated in
 * what serve read, but something still pending (a late commit, a delivery due) could change a
 * ledger. Harm may still land, so a test that stopped here would pass on a world that is not
 * done: check again with `wait` left true. The message is the verdict's summary, which lists
 * what was pending; the verdict (`exitCode` 3, `settled` false) is in `verdict`.
 */
export class TwiceUnsettled extends Error {
  readonly verdict: Verdict;

  constructor(verdict: Verdict) {
    super(verdict.summary);
    this.name = "TwiceUnsettled";
    this.verdict = verdict;
  }
}

/**
 * The verdict on the claims: at least one invariant was violated.
 *
 * Its message is the verdict's own `summary`, which names each violated invariant with the
 * ledger's evidence and the command that replays the scenario; the whole verdict is in
 * `verdict`. Deliberately not a `TwiceError`: the kit did its job, the application did not.
 */
export class TwiceViolation extends Error {
  readonly verdict: Verdict;

  constructor(verdict: Verdict) {
    super(verdict.summary);
    this.name = "TwiceViolation";
    this.verdict = verdict;
  }
}
