/**
 * `twiceServe`: the real binary started, answering and stopped; and stand-ins for it (shell
 * scripts) that die at start, never get ready, or cannot be run at all.
 */

import { access, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";

import { describe, expect, test } from "vitest";
import { findTwice, ServeProcess, ServeStartError, twiceServe, TwiceError } from "../src/index.js";
import { alive, script, tempDir } from "./helpers.js";

describe("twiceServe", () => {
  test("starts serve, answers, and stops it on SIGTERM", async () => {
    const twice = await twiceServe({ seed: 7 });
    const serve = twice.serve as ServeProcess;
    expect(serve).toBeInstanceOf(ServeProcess);
    const pid = serve.pid as number;
    expect(alive(pid)).toBe(true);
    expect(await twice.health()).toMatchObject({ service: "serve", ok: true });
    expect(Object.keys(twice.urls).sort()).toEqual(["chain", "control", "files", "messages", "payments", "workspaces"]);
    for (const url of Object.values(twice.urls)) expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(twice.accounts.length).toBeGreaterThan(0);
    expect(serve.command.slice(1)).toEqual(["serve", "--urls-file", serve.urlsFile, "--seed", "7"]);
    expect((await twice.loadScenario("lost_refund_reply")).seed).toBe(7);

    // SIGTERM is a clean stop for serve; its own directory goes with it; a second stop is a no-op.
    expect(await twice.stop()).toBe(0);
    expect(serve.exited).toBe(true);
    expect(alive(pid)).toBe(false);
    await expect(access(serve.workdir)).rejects.toThrow();
    expect(await twice.stop()).toBe(0);
    await expect(twice.health()).rejects.toThrow(TwiceError);
  });

  test("sets a scenario up at start, and is disposed of by `await using`", async () => {
    let pid: number | undefined;
    {
      await using twice = await twiceServe({ scenario: "lost_refund_reply", extraArgs: ["-q"] });
      pid = twice.serve?.pid;
      expect((await twice.scenario()).name).toBe("lost_refund_reply");
    }
    expect(alive(pid as number)).toBe(false);
  });

  test("keeps a workdir it was given, with serve's log in it", async () => {
    const dir = await tempDir();
    try {
      const workdir = join(dir.path, "serve");
      const twice = await twiceServe({ workdir, extraArgs: ["-v"] });
      await twice.loadScenario("lost_refund_reply");
      expect(await (twice.serve as ServeProcess).logTail()).toContain("lost_refund_reply");
      await twice.stop();
      await access(join(workdir, "urls.json"));
      await access(join(workdir, "serve.log"));
    } finally {
      await dir.remove();
    }
  });
});

describe("a serve that does not start", () => {
  test("is reported with its output when it dies at start", async () => {
    const dir = await tempDir();
    try {
      const bin = await script(join(dir.path, "dies"), "echo 'error: cannot listen on 127.0.0.1:1' >&2\nexit 2\n");
      const error = await twiceServe({ bin }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(ServeStartError);
      expect((error as Error).message).toBe(
        "twice serve exited with 2 before writing its URLs file:\nerror: cannot listen on 127.0.0.1:1",
      );
    } finally {
      await dir.remove();
    }
  });

  test("is reported with the real serve's own words when its arguments are wrong", async () => {
    const error = await twiceServe({ extraArgs: ["--no-such-flag"] }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ServeStartError);
    expect((error as Error).message).toMatch(/^twice serve exited with 2 before writing its URLs file:\n/);
    expect((error as Error).message).toContain("--no-such-flag");
    const scenario = await twiceServe({ scenario: "lost_refund_replay" }).catch((e: unknown) => e);
    expect(scenario).toBeInstanceOf(ServeStartError);
    expect((scenario as Error).message).toContain('did you mean "lost_refund_reply"');
  });

  test("is killed after its bounds when it never gets ready", async () => {
    const dir = await tempDir();
    try {
      // Ignores SIGTERM, never writes the URLs file: only SIGKILL ends it.
      const bin = await script(
        join(dir.path, "stuck"),
        `trap '' TERM\necho $$ > ${join(dir.path, "pid")}\necho starting\nwhile :; do sleep 0.05; done\n`,
      );
      const started = performance.now();
      const error = await twiceServe({ bin, startTimeoutMs: 300, stopTimeoutMs: 300 }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(ServeStartError);
      expect((error as Error).message).toBe(
        "twice serve did not write its URLs file within 0.3 s; it was stopped. Its output:\nstarting",
      );
      expect(performance.now() - started).toBeLessThan(5000);
      // SIGKILLed: gone, not left behind.
      const pid = Number(await readFile(join(dir.path, "pid"), "utf8"));
      expect(pid).toBeGreaterThan(0);
      expect(alive(pid)).toBe(false);
    } finally {
      await dir.remove();
    }
  });

  test("is reported when the binary cannot be run at all", async () => {
    const dir = await tempDir();
    try {
      const bin = await script(join(dir.path, "no-interpreter"), "");
      // An executable file whose interpreter is not there: spawn itself fails.
      await writeFile(bin, "#!/no/such/interpreter\n");
      const error = await twiceServe({ bin }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(ServeStartError);
      expect((error as Error).message).toMatch(/^cannot start .*no-interpreter serve --urls-file .*: spawn .* ENOENT$/);
      const notExecutable = join(dir.path, "plain.txt");
      await writeFile(notExecutable, "");
      await expect(twiceServe({ bin: notExecutable })).rejects.toThrow(
        `the bin option names ${JSON.stringify(notExecutable)}, which is not an executable file`,
      );
      await expect(twiceServe({ seed: -1, bin: findTwice() })).rejects.toThrow(/seed -1: a whole number/);
    } finally {
      await dir.remove();
    }
  });
});
