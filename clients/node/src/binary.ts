/**
 * Where the `twice` (and `twice-executor`) binary is: an explicit path, `$TWICE_BIN`, `twice`
 * on the PATH, or the binary shipped in the platform package `@twice-kit/<platform>-<arch>`
 * that npm installed next to this one (an optional dependency of `twice-kit`).
 *
 * The platform package holds `bin/twice` and `bin/twice-executor`; it is found the way Node
 * finds any package from here (`createRequire(import.meta.url).resolve`), so it works from a
 * hoisted, nested or pnpm layout alike.
 *
 * @module
 */

import { accessSync, constants, realpathSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import { delimiter, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { ServeStartError } from "./errors.js";

/** The binaries the kit ships. */
export type BinaryName = "twice" | "twice-executor";

/** The platforms a platform package exists for, as `<process.platform>-<process.arch>`. */
export const SUPPORTED_PLATFORMS = ["linux-x64", "linux-arm64", "darwin-x64", "darwin-arm64"] as const;

/** Where to look; every field defaults to this process's own. */
export interface FindBinaryOptions {
  /** An explicit path: used if given (and an error if it is not an executable file). */
  bin?: string | undefined;
  /** The environment whose `TWICE_BIN` and `PATH` are read. */
  env?: NodeJS.ProcessEnv;
  /** `process.platform`; `process.arch`. */
  platform?: string;
  arch?: string;
  /** The file (path or URL) the platform package is resolved from; this module unless given. */
  resolveFrom?: string | URL;
}

/** The name of the platform package for `platform`-`arch`, or undefined where there is none. */
export function platformPackage(platform: string = process.platform, arch: string = process.arch): string | undefined {
  const key = `${platform}-${arch}`;
  return (SUPPORTED_PLATFORMS as readonly string[]).includes(key) ? `@twice-kit/${key}` : undefined;
}

/**
 * The binary in this machine's platform package, or undefined when the package is not
 * installed (or this platform has none). `reason` says which.
 */
export function platformBinary(
  name: BinaryName,
  options: Pick<FindBinaryOptions, "platform" | "arch" | "resolveFrom"> = {},
): { path: string | undefined; reason: string } {
  const platform = options.platform ?? process.platform;
  const arch = options.arch ?? process.arch;
  const pkg = platformPackage(platform, arch);
  if (pkg === undefined) {
    return {
      path: undefined,
      reason: `there is no platform package for ${platform}-${arch} (there is one for ${SUPPORTED_PLATFORMS.join(", ")})`,
    };
  }
  let manifest: string;
  try {
    manifest = createRequire(options.resolveFrom ?? import.meta.url).resolve(`${pkg}/package.json`);
  } catch {
    return { path: undefined, reason: `the platform package ${pkg} is not installed` };
  }
  const path = join(dirname(manifest), "bin", name);
  if (!isExecutableFile(path)) {
    return { path: undefined, reason: `the platform package ${pkg} has no executable bin/${name}` };
  }
  return { path, reason: `found in ${pkg}` };
}

/**
 * The `twice` binary, or `twice-executor`: `options.bin` if given, else `$TWICE_BIN` (for
 * `twice-executor`: `$TWICE_EXECUTOR_BIN`, then the `twice-executor` next to `$TWICE_BIN`), else
 * the name on the PATH, else the binary of the platform package. Throws `ServeStartError` naming every place it looked when none has it.
 */
export function findBinary(name: BinaryName, options: FindBinaryOptions = {}): string {
  const env = options.env ?? process.env;
  const variable = name === "twice" ? "TWICE_BIN" : "TWICE_EXECUTOR_BIN";
  for (const [source, candidate] of [
    ["the bin option", options.bin],
    [variable, env[variable]],
  ] as const) {
    if (candidate) {
      if (!isExecutableFile(candidate)) {
        throw new ServeStartError(`${source} names ${JSON.stringify(candidate)}, which is not an executable file`);
      }
      return candidate;
    }
  }
  if (name === "twice-executor" && env.TWICE_BIN) {
    // A build directory (target/debug) and a release archive hold both binaries side by side.
    const sibling = join(dirname(env.TWICE_BIN), name);
    if (isExecutableFile(sibling)) return sibling;
  }
  const onPath = findOnPath(name, env.PATH ?? "");
  if (onPath !== undefined) return onPath;
  const shipped = platformBinary(name, options);
  if (shipped.path !== undefined) return shipped.path;
  throw new ServeStartError(
    `cannot find the ${name} binary: no bin option was given, ${variable} is not set, ` +
      `\`${name}\` is not on the PATH, and ${shipped.reason}. ` +
      `Set ${variable} to its path (in a twice checkout, after \`cargo build --bins\`: target/debug/${name}), ` +
      `put the directory holding \`${name}\` on the PATH, or \`npm install twice-kit\` on a supported platform ` +
      `(${SUPPORTED_PLATFORMS.join(", ")}) so that npm installs the platform package with the binary.`,
  );
}

/** The `twice` binary: `findBinary("twice", ...)`, with an explicit path as a shorthand. */
export function findTwice(options: FindBinaryOptions | string = {}): string {
  return findBinary("twice", typeof options === "string" ? { bin: options } : options);
}

/**
 * `name` in a directory of `path` (a PATH value), as an executable file; the first one that is
 * not this package's own command. npm puts `node_modules/.bin` first on the PATH of every
 * script it runs, and `twice` there is this package's shim, which would only run the platform
 * package's binary (the last place looked) through one more process, or fail without it.
 */
function findOnPath(name: BinaryName, path: string): string | undefined {
  const ownShim = realPath(fileURLToPath(new URL(`../bin/${name}.js`, import.meta.url)));
  for (const dir of path.split(delimiter)) {
    if (dir === "") continue;
    const candidate = join(dir, name);
    if (isExecutableFile(candidate) && realPath(candidate) !== ownShim) return candidate;
  }
  return undefined;
}

function realPath(path: string): string | undefined {
  try {
    return realpathSync(path);
  } catch {
    return undefined;
  }
}

function isExecutableFile(path: string): boolean {
  try {
    if (!statSync(path).isFile()) return false;
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}
