/**
 * A fixture for Node's own test runner (`node:test`): `useTwice()` registers a `before` hook
 * that starts `twice serve` and an `after` hook that stops it, in the suite it is called in
 * (the file, at top level; a `describe`, inside one), and returns a handle whose `client` is
 * the `Twice` client while the suite runs.
 *
 * ```js
 * import { describe, test } from "node:test";
 * import { useTwice } from "twice-kit/node-test";
 *
 * describe("refunds", () => {
 *   const serve = useTwice();                 // one serve for this describe
 *   test("survive a lost reply", async () => {
 *     const twice = serve.client;
 *     const scenario = await twice.loadScenario("lost_refund_reply");
 *     ...
 *     await twice.check(claims);
 *   });
 * });
 * ```
 *
 * With `{ each: true }` the hooks are `beforeEach` and `afterEach`: a serve of each test's own.
 * Tests that share a serve should begin with `loadScenario` (which resets every fake) or
 * `reset()`.
 *
 * @module
 */

import { after, afterEach, before, beforeEach } from "node:test";

import type { Twice } from "./client.js";
import { TwiceError } from "./errors.js";
import { seedFromEnv, type TwiceServeOptions, twiceServe } from "./serve.js";

/** How `useTwice` starts serve, and how often. */
export interface UseTwiceOptions extends TwiceServeOptions {
  /** A serve per test (`beforeEach`/`afterEach`) rather than one for the suite. */
  each?: boolean;
}

/** What `useTwice` returns: the client of the serve its hooks started. */
export interface TwiceHandle {
  /** The `Twice` client; only between the hooks (inside the suite's tests). */
  readonly client: Twice;
}

/**
 * Registers the hooks that start serve (binary: `options.bin`, else `$TWICE_BIN`, else `twice`
 * on the PATH, else the platform package's; seed: `options.seed`, else `$TWICE_SEED`, else 0)
 * and stop it (SIGTERM, then SIGKILL after 5 s), in the current suite.
 */
export function useTwice(options: UseTwiceOptions = {}): TwiceHandle {
  const { each = false, ...serveOptions } = options;
  let client: Twice | undefined;
  const setUp = async () => {
    client = await twiceServe({ seed: seedFromEnv(), ...serveOptions });
  };
  const tearDown = async () => {
    const stopping = client;
    client = undefined;
    await stopping?.stop();
  };
  if (each) {
    beforeEach(setUp);
    afterEach(tearDown);
  } else {
    before(setUp);
    after(tearDown);
  }
  return {
    get client(): Twice {
      if (client === undefined) {
        throw new TwiceError(
          "useTwice: serve is not running here: use the client inside the suite's tests " +
            `(its ${each ? "beforeEach" : "before"} hook starts serve)`,
        );
      }
      return client;
    },
  };
}
