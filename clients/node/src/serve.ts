/**
 * `twice serve` as a child process: found, started, waited for, and stopped.
 *
 * Serve writes its URLs file whole and renames it into place once every listener is up
 * (`docs/byo.md`), so the file appearing is the signal that serve is ready; until then the
 * process is watched, and if it dies its own output is what the error shows. Its output goes
 * to a log file in a directory of its own, not to a pipe: a pipe nobody reads fills up and
 * blocks serve.
 *
 * @module
 */

import { type ChildProcess, spawn } from "node:child_process";
import { access, mkdir, mkdtemp, open, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";

import { findTwice } from "./binary.js";
import { type ServeHandle, Twice } from "./client.js";
import { ServeStartError, TwiceError } from "./errors.js";

/** How long serve may take to write its URLs file (it is ready in well under a second). */
export const START_TIMEOUT_MS_DEFAULT = 30_000;
/** How long serve has to exit after SIGTERM before it gets SIGKILL, and again after that. */
export const STOP_TIMEOUT_MS_DEFAULT = 5_000;
/** How often the URLs file is looked for. */
const POLL_MS = 20;
/** How much of serve's output an error shows. */
const LOG_TAIL_BYTES = 4000;

/** How `twiceServe` starts serve. */
export interface TwiceServeOptions {
  /** The twice binary; else `$TWICE_BIN`, `twice` on the PATH, the platform package's. */
  bin?: string | undefined;
  /** The seed of every random choice the fakes make (ids, fault draws); 0 unless given. */
  seed?: number | undefined;
  /** A scenario to set up at start (`--scenario`: a catalog name or a file). */
  scenario?: string | undefined;
  /** How long serve may take to become ready; 30 000 ms unless given. */
  startTimeoutMs?: number | undefined;
  /** How long serve has to exit after SIGTERM, and after SIGKILL; 5 000 ms unless given. */
  stopTimeoutMs?: number | undefined;
  /** More arguments for `twice serve` (`["-vv"]`, `["--payments-port", "4242"]`). */
  extraArgs?: readonly string[] | undefined;
  /** Where the URLs file and the log go; a new temporary directory (removed at stop) unless given. */
  workdir?: string | undefined;
  /** How long each control request of the client may take; 30 000 ms unless given. */
  requestTimeoutMs?: number | undefined;
}

/** How a child process ended: its exit code or the signal that killed it, or why it never ran. */
interface Ending {
  code: number | null;
  signal: NodeJS.Signals | null;
  error?: Error;
}

/** Serves still running: killed when this process exits, so that none outlives its test run. */
const running = new Set<ChildProcess>();
process.on("exit", () => {
  for (const child of running) child.kill("SIGKILL");
});

/** One `twice serve` child process, with its URLs file and log in a directory of its own. */
export class ServeProcess implements ServeHandle {
  readonly command: readonly string[];
  readonly workdir: string;
  readonly urlsFile: string;
  readonly logFile: string;
  private readonly child: ChildProcess;
  private readonly ownWorkdir: boolean;
  private readonly stopTimeoutMs: number;
  private ending: Ending | undefined;
  private readonly ended: Promise<Ending>;
  private stopping: Promise<number | null> | undefined;

  /** Use `twiceServe`: this only spawns, it does not wait for serve to be ready. */
  constructor(
    command: readonly string[],
    paths: { workdir: string; ownWorkdir: boolean; urlsFile: string; logFile: string; logFd: number },
    stopTimeoutMs: number,
  ) {
    this.command = command;
    this.workdir = paths.workdir;
    this.ownWorkdir = paths.ownWorkdir;
    this.urlsFile = paths.urlsFile;
    this.logFile = paths.logFile;
    this.stopTimeoutMs = stopTimeoutMs;
    const [binary, ...args] = command as [string, ...string[]];
    this.child = spawn(binary, args, { stdio: ["ignore", paths.logFd, paths.logFd] });
    running.add(this.child);
    // Not a reason for Node to stay alive: a serve nobody stopped is killed at exit instead.
    this.child.unref();
    this.ended = new Promise<Ending>((resolve) => {
      this.child.once("exit", (code, signal) => resolve((this.ending = { code, signal })));
      this.child.once("error", (error) => resolve((this.ending = { code: null, signal: null, error })));
    });
    void this.ended.then(() => running.delete(this.child));
  }

  /** Serve's process id (undefined when it could not be started). */
  get pid(): number | undefined {
    return this.child.pid;
  }

  /** Whether serve has exited (or never started). */
  get exited(): boolean {
    return this.ending !== undefined;
  }

  /** Waits until serve's URLs file is there, at most `timeoutMs`; stops serve and throws otherwise. */
  async ready(timeoutMs: number): Promise<void> {
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      if (await exists(this.urlsFile)) return;
      if (this.ending !== undefined) {
        const tail = await this.logTail();
        await this.cleanup();
        if (this.ending.error !== undefined) {
          throw new ServeStartError(`cannot start ${this.command.join(" ")}: ${this.ending.error.message}`, {
            cause: this.ending.error,
          });
        }
        throw new ServeStartError(`twice serve ${describeEnding(this.ending)} before writing its URLs file:\n${tail}`);
      }
      if (performance.now() > deadline) {
        const tail = await this.logTail();
        await this.stop();
        throw new ServeStartError(
          `twice serve did not write its URLs file within ${timeoutMs / 1000} s; it was stopped. Its output:\n${tail}`,
        );
      }
      await Promise.race([sleep(POLL_MS), this.ended]);
    }
  }

  /**
   * Stops serve: SIGTERM, then SIGKILL after `stopTimeoutMs`. Returns its exit code (null if it
   * was killed by a signal or never ran). Idempotent: a second call waits for the first.
   */
  stop(): Promise<number | null> {
    this.stopping ??= this.stopOnce();
    return this.stopping;
  }

  private async stopOnce(): Promise<number | null> {
    if (this.ending === undefined) {
      // While stopping, serve's exit is worth staying alive for.
      this.child.ref();
      this.child.kill("SIGTERM");
      if (!(await this.exitWithin(this.stopTimeoutMs))) {
        this.child.kill("SIGKILL");
        if (!(await this.exitWithin(this.stopTimeoutMs))) {
          throw new TwiceError(
            `twice serve (pid ${this.pid}) did not exit within ${this.stopTimeoutMs / 1000} s of SIGKILL`,
          );
        }
      }
    }
    await this.cleanup();
    return this.ending?.code ?? null;
  }

  /** The end of serve's output (stdout and stderr), for error messages. */
  async logTail(): Promise<string> {
    let text: string;
    try {
      const file = await open(this.logFile, "r");
      try {
        const { size } = await file.stat();
        const length = Math.min(size, LOG_TAIL_BYTES);
        const buffer = Buffer.alloc(length);
        await file.read(buffer, 0, length, size - length);
        text = buffer.toString("utf8").trimEnd();
      } finally {
        await file.close();
      }
    } catch {
      return "(no output)";
    }
    return text || "(no output)";
  }

  private async exitWithin(ms: number): Promise<boolean> {
    const controller = new AbortController();
    const timedOut = sleep(ms, false, { signal: controller.signal }).catch(() => false);
    const exited = await Promise.race([this.ended.then(() => true), timedOut]);
    controller.abort();
    return exited;
  }

  private async cleanup(): Promise<void> {
    // Only a directory this object made is removed; a caller's is left as it is.
    if (this.ownWorkdir) await rm(this.workdir, { recursive: true, force: true });
  }
}

/**
 * Starts `twice serve --urls-file <dir>/urls.json --seed <seed>` and returns a `Twice` client
 * of it once it is ready (its URLs file written), at most `startTimeoutMs` later.
 *
 * If serve exits first, or is not ready in time (then it is stopped), throws `ServeStartError`
 * with serve's own output. The client's `stop()` (or `await using`) stops serve: SIGTERM, then
 * SIGKILL after `stopTimeoutMs`.
 */
export async function twiceServe(options: TwiceServeOptions = {}): Promise<Twice> {
  const binary = findTwice({ bin: options.bin });
  const seed = options.seed ?? 0;
  if (!Number.isSafeInteger(seed) || seed < 0) throw new ServeStartError(`seed ${seed}: a whole number, 0 or more`);
  const ownWorkdir = options.workdir === undefined;
  const workdir = options.workdir ?? (await mkdtemp(join(tmpdir(), "twice-serve-")));
  await mkdir(workdir, { recursive: true });
  const urlsFile = join(workdir, "urls.json");
  const logFile = join(workdir, "serve.log");
  await rm(urlsFile, { force: true });
  const command = [binary, "serve", "--urls-file", urlsFile, "--seed", String(seed)];
  if (options.scenario !== undefined) command.push("--scenario", options.scenario);
  command.push(...(options.extraArgs ?? []));

  const log = await open(logFile, "w");
  let serve: ServeProcess;
  try {
    serve = new ServeProcess(
      command,
      { workdir, ownWorkdir, urlsFile, logFile, logFd: log.fd },
      options.stopTimeoutMs ?? STOP_TIMEOUT_MS_DEFAULT,
    );
  } finally {
    // The child has its own copy of the descriptor.
    await log.close();
  }
  await serve.ready(options.startTimeoutMs ?? START_TIMEOUT_MS_DEFAULT);
  let client: Twice;
  try {
    client = await Twice.fromUrlsFile(urlsFile, { requestTimeoutMs: options.requestTimeoutMs });
  } catch (error) {
    await serve.stop();
    throw new ServeStartError(`twice serve wrote a URLs file the kit cannot read: ${(error as Error).message}`, {
      cause: error,
    });
  }
  client.serve = serve;
  return client;
}

/**
 * The seed `$TWICE_SEED` asks for, if any: what the fixtures start serve with when their
 * options name no seed, so that a failing test replays with `TWICE_SEED=N`.
 */
export function seedFromEnv(env: NodeJS.ProcessEnv = process.env): number | undefined {
  const raw = env.TWICE_SEED;
  if (raw === undefined || raw === "") return undefined;
  const seed = Number(raw);
  if (!Number.isSafeInteger(seed) || seed < 0) {
    throw new ServeStartError(`TWICE_SEED=${JSON.stringify(raw)}: a whole number, 0 or more`);
  }
  return seed;
}

async function exists(path: string): Promise<boolean> {
  try {
    await access(path);
    return true;
  } catch {
    return false;
  }
}

function describeEnding(ending: Ending): string {
  return ending.signal !== null ? `was killed by ${ending.signal}` : `exited with ${ending.code}`;
}
