/**
 * The SDKs, each loaded when a service first needs it rather than when the process starts.
 *
 * Together they take about 0.6 s of CPU to load (viem alone about 0.3 s), and the harness
 * bounds how long `init` may take (10 s). On a busy CI machine that starts eight executors
 * at once, loading every SDK before answering `init` can pass that bound; a scenario uses
 * one or two services, so `init` is answered first and the SDKs of the services it named
 * are loaded right after (`preloadAfterAnswer`), before the next request is read: sends then take as
 * long as they would with the SDKs loaded at start-up.
 *
 * Only types are imported at the top (they vanish when compiled); the values come from
 * `require`, once, on the first call of each accessor.
 */

import type * as S3 from "@aws-sdk/client-s3";
import type * as ResendSdk from "resend";
import type StripeSdk from "stripe";
import type * as Viem from "viem";
import type * as ViemAccounts from "viem/accounts";

let s3Module: typeof S3 | undefined;
let resendModule: typeof ResendSdk | undefined;
let stripeModule: typeof StripeSdk | undefined;
let viemModule: typeof Viem | undefined;
let viemAccountsModule: typeof ViemAccounts | undefined;

/** `@aws-sdk/client-s3`. */
export function s3(): typeof S3 {
  return (s3Module ??= require("@aws-sdk/client-s3") as typeof S3);
}

/** `resend`. */
export function resend(): typeof ResendSdk {
  return (resendModule ??= require("resend") as typeof ResendSdk);
}

/** The `Stripe` class of `stripe` (its CommonJS export, or its `default`). */
export function stripe(): typeof StripeSdk {
  if (stripeModule === undefined) {
    const loaded = require("stripe") as typeof StripeSdk & { default?: typeof StripeSdk };
    stripeModule = loaded.default ?? loaded;
  }
  return stripeModule;
}

/** `viem`. */
export function viem(): typeof Viem {
  return (viemModule ??= require("viem") as typeof Viem);
}

/** `viem/accounts`. */
export function viemAccounts(): typeof ViemAccounts {
  return (viemAccountsModule ??= require("viem/accounts") as typeof ViemAccounts);
}

/** The SDKs each service's calls use. */
const LOADERS: Record<string, readonly (() => unknown)[]> = {
  payments: [stripe],
  files: [s3],
  chain: [viem, viemAccounts],
  messages: [resend],
  workspaces: [],
};

/**
 * Loads the SDKs of `services` once the current request's answer is out: `setImmediate` runs
 * after the answer is written and before the next line from the harness is handled.
 */
export function preloadAfterAnswer(services: Iterable<string>): void {
  const loaders = [...services].flatMap((name) => LOADERS[name] ?? []);
  setImmediate(() => {
    for (const load of loaders) load();
  });
}
