/**
 * What `bin/twice.js` and `bin/twice-executor.js` do: run the binary of this machine's
 * platform package (`@twice-kit/<platform>-<arch>`) with this process's arguments and stdio,
 * pass SIGINT and SIGTERM on to it, and end as it ended (its exit code, or its signal).
 *
 * `TWICE_BIN` is not consulted: the shim *is* the `twice` command that `npm install` put on
 * the PATH, and pointing it elsewhere would hide which binary runs.
 *
 * @module
 */

import { spawn } from "node:child_process";
import { constants } from "node:os";

import { type BinaryName, platformBinary } from "./binary.js";

/** The signals passed on to the binary; the others end the shim as Node's defaults say. */
const FORWARDED: readonly NodeJS.Signals[] = ["SIGINT", "SIGTERM", "SIGHUP"];

/**
 * Runs `name` from the platform package with `args`, and exits this process the way the
 * binary exited. `resolveFrom` is where the platform package is looked for (this module
 * unless given).
 */
export function runShim(
  name: BinaryName,
  options: { args?: readonly string[]; resolveFrom?: string | URL } = {},
): void {
  const found = platformBinary(name, { resolveFrom: options.resolveFrom });
  if (found.path === undefined) {
    process.stderr.write(
      `twice-kit: cannot run ${name}: ${found.reason}. ` +
        "npm installs it as an optional dependency of twice-kit on a supported platform: " +
        "reinstall without --omit=optional (or --no-optional), or set TWICE_BIN for the kit's own " +
        `client and run that binary directly.\n`,
    );
    process.exit(1);
  }
  const child = spawn(found.path, options.args ?? process.argv.slice(2), { stdio: "inherit" });
  const forward = (signal: NodeJS.Signals) => {
    child.kill(signal);
  };
  for (const signal of FORWARDED) process.on(signal, forward);
  child.on("error", (error) => {
    process.stderr.write(`twice-kit: cannot run ${found.path}: ${error.message}\n`);
    process.exit(1);
  });
  child.on("exit", (code, signal) => {
    for (const s of FORWARDED) process.off(s, forward);
    if (signal !== null) {
      // End by the same signal, so that a caller sees what the binary's caller would have.
      process.kill(process.pid, signal);
      // A signal Node handles or ignores itself (SIGPIPE, SIGSEGV) does not end it: the shell's
      // convention for "killed by a signal" then.
      setTimeout(() => process.exit(128 + (constants.signals[signal] ?? 0)), 100);
      return;
    }
    process.exit(code ?? 1);
  });
}
