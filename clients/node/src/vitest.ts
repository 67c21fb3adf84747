/**
 * vitest fixtures that start `twice serve` and hand out a `Twice` client of it: `test` is
 * vitest's own, extended with
 *
 * - `twice`: a serve of the test's own, started before it and stopped after it;
 * - `twiceSession`: one serve for the test file (a `scope: "file"` fixture); every test that
 *   uses it should set its world up with `loadScenario` (which resets every fake first) or
 *   `reset()`;
 * - `twiceOptions`: how both start serve (`TwiceServeOptions`), `{}` unless overridden with
 *   `test.scoped({ twiceOptions: {...} })` or vitest's `provide: { twiceOptions: {...} }`.
 *
 * The binary is `twiceOptions.bin`, else `$TWICE_BIN`, else `twice` on the PATH, else the
 * platform package's; the seed is `twiceOptions.seed`, else `$TWICE_SEED`, else 0.
 *
 * ```ts
 * import { test, expect } from "twice-kit/vitest";
 *
 * test("a refund survives a lost reply", async ({ twice }) => {
 *   const scenario = await twice.loadScenario("lost_refund_reply");
 *   ...
 *   await twice.check(claims);   // throws TwiceViolation with the verdict's summary
 * });
 * ```
 *
 * @module
 */

import { test as base } from "vitest";

import type { Twice } from "./client.js";
import { seedFromEnv, type TwiceServeOptions, twiceServe } from "./serve.js";

export { afterAll, afterEach, beforeAll, beforeEach, describe, expect } from "vitest";
export * from "./index.js";

/** The fixtures `test` adds to vitest's context. */
export interface TwiceFixtures {
  /** How `twice` and `twiceSession` start serve. */
  twiceOptions: TwiceServeOptions;
  /** A serve of this test's own, stopped after the test. */
  twice: Twice;
  /** One serve for the test file; begin each test with `loadScenario` or `reset()`. */
  twiceSession: Twice;
}

/** Starts serve for `use`, and stops it after, whatever `use` did. */
async function serveFor(options: TwiceServeOptions, use: (twice: Twice) => Promise<void>): Promise<void> {
  const twice = await twiceServe({ seed: seedFromEnv(), ...options });
  try {
    await use(twice);
  } finally {
    await twice.stop();
  }
}

/** vitest's `test`, with the fixtures `twice`, `twiceSession` and `twiceOptions`. */
export const test = base.extend<TwiceFixtures>({
  // vitest reads a fixture's dependencies from the destructuring of its first parameter, so
  // each fixture below names what it uses there.
  twiceOptions: [{}, { injected: true, scope: "file" }],
  twiceSession: [
    async ({ twiceOptions }, use) => {
      await serveFor(twiceOptions, use);
    },
    { scope: "file" },
  ],
  twice: async ({ twiceOptions }, use) => {
    await serveFor(twiceOptions, use);
  },
});

/** `test` under its other name. */
export const it = test;
