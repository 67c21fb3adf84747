/**
 * Where the binary comes from (the bin option, $TWICE_BIN, the PATH, the platform package, in
 * that order) and what is said when it is nowhere; and the `twice` command's shim, which runs
 * the platform package's binary as if it were itself.
 *
 * The platform package is faked: a `node_modules/@twice-kit/<platform>-<arch>` in a temporary
 * directory, found from a file there (`resolveFrom`). The shim tests run the built shim
 * (`dist/shim.js`), as the installed package does: `npm run build` first.
 */

import { spawn } from "node:child_process";
import { access, mkdir, symlink, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { findBinary, findTwice, platformBinary, platformPackage, ServeStartError, twiceServe } from "../src/index.js";
import { script, tempDir } from "./helpers.js";

const KIT = dirname(dirname(fileURLToPath(import.meta.url)));
const PLATFORM = `${process.platform}-${process.arch}`;
const PACKAGE = platformPackage();

let dir: { path: string; remove: () => Promise<void> };
/** The fake platform package's directory, and a file that finds it. */
let packageDir: string;
let from: string;

beforeAll(async () => {
  dir = await tempDir();
  packageDir = join(dir.path, "node_modules", "@twice-kit", PLATFORM);
  await mkdir(join(packageDir, "bin"), { recursive: true });
  await writeFile(join(packageDir, "package.json"), JSON.stringify({ name: `@twice-kit/${PLATFORM}`, version: "0.1.0" }));
  from = join(dir.path, "here.js");
});

afterAll(async () => {
  await dir.remove();
});

/** Runs `node file args`, with a bound; its exit code or signal and its output. */
function run(
  file: string,
  args: string[],
  onStdout?: (text: string, child: ReturnType<typeof spawn>) => void,
): Promise<{ code: number | null; signal: NodeJS.Signals | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [file, ...args], { stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`node ${file} did not exit within 20 s; stdout: ${stdout}; stderr: ${stderr}`));
    }, 20_000);
    child.stdout.on("data", (chunk: Buffer) => {
      stdout += chunk.toString();
      onStdout?.(stdout, child);
    });
    child.stderr.on("data", (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    // "close": the process has exited and its pipes are drained.
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
  });
}

describe.runIf(PACKAGE !== undefined)("the binary", () => {
  test("comes from the bin option, then TWICE_BIN, then the PATH, then the platform package", async () => {
    const explicit = await script(join(dir.path, "explicit", "twice"), "exit 0\n");
    const fromEnv = await script(join(dir.path, "env", "twice"), "exit 0\n");
    const onPath = await script(join(dir.path, "path", "twice"), "exit 0\n");
    const shipped = await script(join(packageDir, "bin", "twice"), "exit 0\n");
    const env = { TWICE_BIN: fromEnv, PATH: `${join(dir.path, "empty")}:${dirname(onPath)}` };
    expect(findBinary("twice", { bin: explicit, env, resolveFrom: from })).toBe(explicit);
    expect(findBinary("twice", { env, resolveFrom: from })).toBe(fromEnv);
    expect(findBinary("twice", { env: { PATH: env.PATH }, resolveFrom: from })).toBe(onPath);
    expect(findBinary("twice", { env: { PATH: join(dir.path, "empty") }, resolveFrom: from })).toBe(shipped);
    expect(platformBinary("twice", { resolveFrom: pathToFileURL(from) }).path).toBe(shipped);
    expect(findTwice(explicit)).toBe(explicit);
  });

  test("on the PATH is never this package's own shim (npm's node_modules/.bin/twice)", async () => {
    const bin = join(dir.path, "dot-bin");
    await mkdir(bin, { recursive: true });
    await symlink(join(KIT, "bin", "twice.js"), join(bin, "twice"));
    const shipped = await script(join(packageDir, "bin", "twice"), "exit 0\n");
    expect(findBinary("twice", { env: { PATH: bin }, resolveFrom: from })).toBe(shipped);
    const onPath = await script(join(dir.path, "later", "twice"), "exit 0\n");
    expect(findBinary("twice", { env: { PATH: `${bin}:${dirname(onPath)}` }, resolveFrom: from })).toBe(onPath);
  });

  test("named where it is not an executable file is an error, not a fallback", () => {
    const missing = join(dir.path, "nothing-here");
    expect(() => findBinary("twice", { env: { TWICE_BIN: missing }, resolveFrom: from })).toThrow(
      `TWICE_BIN names ${JSON.stringify(missing)}, which is not an executable file`,
    );
    expect(() => findBinary("twice", { bin: missing, env: {}, resolveFrom: from })).toThrow(ServeStartError);
  });

  test("twice-executor: TWICE_EXECUTOR_BIN, next to TWICE_BIN, the PATH, the platform package", async () => {
    const own = await script(join(dir.path, "own", "twice-executor"), "exit 0\n");
    const twice = await script(join(dir.path, "build", "twice"), "exit 0\n");
    const sibling = await script(join(dir.path, "build", "twice-executor"), "exit 0\n");
    const shipped = await script(join(packageDir, "bin", "twice-executor"), "exit 0\n");
    expect(findBinary("twice-executor", { env: { TWICE_EXECUTOR_BIN: own, TWICE_BIN: twice }, resolveFrom: from })).toBe(
      own,
    );
    expect(findBinary("twice-executor", { env: { TWICE_BIN: twice }, resolveFrom: from })).toBe(sibling);
    expect(findBinary("twice-executor", { env: {}, resolveFrom: from })).toBe(shipped);
  });

  test("nowhere is one error naming every place looked and how to fix it", async () => {
    const nowhere = await tempDir();
    try {
      let message = "";
      try {
        findBinary("twice", { env: { PATH: nowhere.path }, resolveFrom: join(nowhere.path, "here.js") });
      } catch (error) {
        expect(error).toBeInstanceOf(ServeStartError);
        message = (error as Error).message;
      }
      expect(message).toContain("cannot find the twice binary: no bin option was given, TWICE_BIN is not set");
      expect(message).toContain("`twice` is not on the PATH");
      expect(message).toContain(`the platform package ${PACKAGE} is not installed`);
      expect(message).toContain("Set TWICE_BIN to its path");
      expect(message).toContain("`npm install twice-kit` on a supported platform");
      expect(() => findBinary("twice", { env: {}, platform: "win32", arch: "x64" })).toThrow(
        "there is no platform package for win32-x64 (there is one for linux-x64, linux-arm64, darwin-x64, darwin-arm64)",
      );
      expect(platformPackage("darwin", "arm64")).toBe("@twice-kit/darwin-arm64");
    } finally {
      await nowhere.remove();
    }
  });

  test("nowhere, twiceServe says so before starting anything", async () => {
    const nowhere = await tempDir();
    const saved = { TWICE_BIN: process.env.TWICE_BIN, PATH: process.env.PATH };
    try {
      delete process.env.TWICE_BIN;
      process.env.PATH = nowhere.path;
      // This checkout has no platform package installed, so the lookup ends empty-handed.
      await expect(twiceServe()).rejects.toThrow(/cannot find the twice binary: .* TWICE_BIN is not set/);
    } finally {
      for (const [name, value] of Object.entries(saved)) {
        if (value === undefined) delete process.env[name];
        else process.env[name] = value;
      }
      await nowhere.remove();
    }
  });
});

describe.runIf(PACKAGE !== undefined)("the twice command's shim", () => {
  let runner: string;

  beforeAll(async () => {
    const shim = join(KIT, "dist", "shim.js");
    await access(shim).catch(() => {
      throw new Error(`${shim} is missing: \`npm run build\` first`);
    });
    // Beside the fake platform package, as bin/twice.js is beside the real one.
    runner = join(dir.path, "runner.mjs");
    await writeFile(
      runner,
      `import { runShim } from ${JSON.stringify(pathToFileURL(shim).href)};\nrunShim("twice", { resolveFrom: import.meta.url });\n`,
    );
  });

  test("passes the arguments on and exits with the binary's code", async () => {
    await script(join(packageDir, "bin", "twice"), 'echo "args:$*"\necho "to stderr" >&2\nexit 7\n');
    const result = await run(runner, ["serve", "--seed", "3"]);
    expect(result).toEqual({ code: 7, signal: null, stdout: "args:serve --seed 3\n", stderr: "to stderr\n" });
  });

  test("passes SIGTERM on, and exits as the binary did", async () => {
    // A Node program, not a shell script: dash can miss a trapped signal that arrives while it
    // forks the loop's next `sleep`.
    const binary = join(packageDir, "bin", "twice");
    await writeFile(
      binary,
      `#!${process.execPath}\n` +
        'process.on("SIGTERM", () => { process.stdout.write("got-term\\n"); process.exit(42); });\n' +
        'setInterval(() => {}, 1000);\nprocess.stdout.write("ready\\n");\n',
    );
    let sent = false;
    const result = await run(runner, [], (stdout, child) => {
      if (!sent && stdout.includes("ready")) {
        sent = true;
        child.kill("SIGTERM");
      }
    });
    expect(result).toMatchObject({ code: 42, signal: null, stdout: "ready\ngot-term\n" });
  });

  test("ends by the binary's signal when a signal ended it", async () => {
    await script(join(packageDir, "bin", "twice"), "kill -TERM $$\n");
    expect(await run(runner, [])).toMatchObject({ code: null, signal: "SIGTERM" });
  });

  test("bin/twice.js without its platform package says what is missing", async () => {
    // This checkout has no platform package: the real shim, as `npx twice` would run it.
    const result = await run(join(KIT, "bin", "twice.js"), ["--version"]);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(`twice-kit: cannot run twice: the platform package ${PACKAGE} is not installed`);
    const executor = await run(join(KIT, "bin", "twice-executor.js"), []);
    expect(executor.stderr).toContain("cannot run twice-executor");
  });
});
