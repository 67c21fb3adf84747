/**
 * twice-kit: twice's fake services, faults and verdicts in a Node test suite.
 *
 * `twice serve` runs fakes of Stripe (payments), a SaaS create API (workspaces), S3 (files),
 * an Ethereum node (chain) and Resend (messages), sets up a scenario's world on them
 * (contracts, seeds, faults) and judges what an application claims against their ledgers.
 * This package is its client:
 *
 * - `Twice`: the client of one serve (`loadScenario`, `waitStep`, `stepDone`, `check`, fault
 *   rules, seeds, clocks, ledgers and journals);
 * - `twiceServe()`: `twice serve` as a child process, and a `Twice` client of it;
 * - `Claim`, `Scenario`, `Step`, `Verdict`: what goes in and comes out;
 * - `twice-kit/vitest` and `twice-kit/node-test`: fixtures for vitest and `node:test`;
 * - `twice-kit/protocol`, `twice-kit/engines` and `twice-kit/engines/restate`: the `twice/1`
 *   plumbing of an executor, and a Restate app as one (`npx twice-engine-restate`).
 *
 * The documentation is `docs/byo.md` of the twice repository.
 *
 * @module
 */

export { findBinary, findTwice, platformBinary, platformPackage, SUPPORTED_PLATFORMS } from "./binary.js";
export type { BinaryName, FindBinaryOptions } from "./binary.js";
export {
  CHECK_SETTLE_WAIT_MS_MAX,
  claimJson,
  REQUEST_TIMEOUT_MS_DEFAULT,
  STEP_WAIT_S_DEFAULT,
  WEBHOOKS_WAIT_S_DEFAULT,
  Twice,
} from "./client.js";
export type { Account, CheckOptions, ServeHandle, TwiceOptions } from "./client.js";
export {
  ServeStartError,
  TwiceError,
  TwiceHTTPError,
  TwiceTimeout,
  TwiceUnsettled,
  TwiceViolation,
} from "./errors.js";
export { isState, parseIntent, Scenario, STATES, Step, Verdict } from "./model.js";
export type {
  ArmedRule,
  Claim,
  Clock,
  Effect,
  Intent,
  JournalEntry,
  JsonObject,
  Pending,
  Rule,
  State,
  StepProgress,
  Trigger,
  VerdictLine,
  VerdictStatus,
} from "./model.js";
export { seedFromEnv, ServeProcess, START_TIMEOUT_MS_DEFAULT, STOP_TIMEOUT_MS_DEFAULT, twiceServe } from "./serve.js";
export type { TwiceServeOptions } from "./serve.js";

/** This kit's version. */
export const VERSION = "0.1.0";
