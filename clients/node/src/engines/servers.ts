/**
 * The servers an engine's workers share within one twice case (a `restate-server`): started
 * once, by whichever worker needs one first, and stopped when the case's last worker is gone.
 *
 * twice kills a worker with everything it started (each process it spawns carries a marker in
 * its environment, which twice looks for), and twice SIGKILLs and restarts workers in mid-case,
 * while the server they share must go on. So a server is started by a **keeper**: a small Node
 * process of its own session, without twice's marker, that starts the server, writes where it
 * listens (`<name>.json` in the case's state directory) and watches the workers that registered
 * there (`workers/<pid>`). When no registered worker has been alive for `GRACE_MS` (a restart
 * takes well under it), when the state directory is gone, or after `LIFETIME_MS` in all, it
 * stops the server and exits. A keeper that lost its parent is adopted by twice (a child
 * subreaper), which kills it at the end of the run whatever happens.
 *
 * Mirrors the Python kit's `twice.engines.servers`; the keeper is `keeper.js` beside this file.
 *
 * @module
 */

import { type ChildProcess, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import {
  closeSync,
  existsSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  renameSync,
  unlinkSync,
  writeFileSync,
} from "node:fs";
import { createConnection, createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { isObject, type JsonObject } from "../protocol.js";
import { sleep } from "./values.js";

/** How long a keeper waits with no registered worker alive before it stops its server. */
export const GRACE_MS = 15_000;
/** The longest a keeper keeps a server, whatever the workers do. */
export const LIFETIME_MS = 1_800_000;
/** The longest a server may take to answer once started. */
export const READY_MS_MAX = 60_000;
/** twice's marker variable: not passed on to a keeper, so that killing a worker spares it. */
export const MARKER_VARIABLE = "TWICE_EXECUTOR_PROCESS";
/** How a keeper is told what else to write beside its server's port (JSON). */
export const INFO_VARIABLE = "TWICE_KEEPER_INFO";

/** A shared server could not be started or did not answer in time. */
export class ServerError extends Error {
  override readonly name = "ServerError";
}

/** Notes this worker process in `stateDir`, for the keepers to watch. */
export function registerWorker(stateDir: string): void {
  const workers = join(stateDir, "workers");
  mkdirSync(workers, { recursive: true });
  writeFileSync(join(workers, String(process.pid)), String(Date.now() / 1000));
}

/** A loopback port free now (the kernel's choice). */
export function freePort(): Promise<number> {
  return new Promise((done, fail) => {
    const server = createServer();
    server.once("error", fail);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as { port: number };
      server.close(() => done(port));
    });
  });
}

/**
 * Where the adapters note, machine-wide, the endpoint ports they reserved: a file per port
 * naming the state directory of the case that holds it (the Python kit's `PORTS_DIR`).
 */
export const PORTS_DIR = join(tmpdir(), "twice-engine-ports");
/** How many ports below the kernel's ephemeral range the reservations are made from. */
export const RESERVED_PORTS = 10_000;

/**
 * Ports `[low, high)` that no listen on port 0 on this machine is given: just below the
 * kernel's ephemeral range (Linux: `ip_local_port_range`; elsewhere 20000 to 30000, under the
 * BSDs' 49152).
 */
export function reservedRange(): [number, number] {
  const ephemeralLow = Number.parseInt(readQuietly("/proc/sys/net/ipv4/ip_local_port_range").split(/\s+/)[0] ?? "", 10);
  if (!Number.isInteger(ephemeralLow)) return [20_000, 30_000];
  return [Math.max(1024, ephemeralLow - RESERVED_PORTS), ephemeralLow];
}

/** Whether the loopback `port` can be listened on now. */
function bindable(port: number): Promise<boolean> {
  return new Promise((done) => {
    const server = createServer();
    server.once("error", () => done(false));
    server.listen(port, "127.0.0.1", () => server.close(() => done(true)));
  });
}

/**
 * A loopback port for an app's endpoint that no other case is given while `owner` (this case's
 * state directory) exists, even while nothing listens on it. A Restate server keeps calling the
 * endpoint an invocation started on at its address, also while twice has killed that worker; a
 * port the kernel handed to another case in that window (the other case's endpoint, say) would
 * run this case's invocation against the other case's services. So the port comes from below
 * the kernel's ephemeral range, and is noted in `PORTS_DIR`, under a lock, until its owner's
 * directory is gone.
 */
export async function reservedPort(owner: string): Promise<number> {
  const [low, high] = reservedRange();
  mkdirSync(PORTS_DIR, { recursive: true });
  return withLock(PORTS_DIR, "ports", async () => {
    // Where the search starts only spreads the cases out; any free port will do.
    const start = low + Math.floor(Math.random() * (high - low));
    for (let i = 0; i < high - low; i++) {
      const port = low + ((start - low + i) % (high - low));
      const claim = join(PORTS_DIR, String(port));
      const holder = readQuietly(claim);
      if ((holder !== "" && existsSync(holder)) || !(await bindable(port))) continue;
      writeFileSync(claim, resolve(owner));
      return port;
    }
    throw new ServerError(`no free port left in ${low}..${high} (reservations in ${PORTS_DIR})`);
  });
}

/** Whether something accepts connections on the loopback `port` (within 0.5 s). */
export function answers(port: number): Promise<boolean> {
  return new Promise((done) => {
    const socket = createConnection({ host: "127.0.0.1", port });
    const end = (ok: boolean) => {
      socket.destroy();
      done(ok);
    };
    socket.setTimeout(500, () => end(false));
    socket.once("connect", () => end(true));
    socket.once("error", () => end(false));
  });
}

export interface SharedServerOptions {
  /** Written beside the server's port in `<name>.json` (other ports, say). */
  info?: JsonObject;
  /** Added to the server's environment. */
  env?: Record<string, string>;
  /** How the keeper is run (default: this Node with `keeper.js`); the arguments follow it. */
  keeper?: readonly string[];
}

/**
 * The server `name` of this case: the one a worker of it started (read from `<name>.json`),
 * or a new one run from `command` listening on `port` by a keeper. Under a lock, so that two
 * workers starting together get one server.
 */
export async function sharedServer(
  stateDir: string,
  name: string,
  command: readonly string[],
  port: number,
  options: SharedServerOptions = {},
): Promise<JsonObject> {
  mkdirSync(stateDir, { recursive: true });
  registerWorker(stateDir);
  return withLock(stateDir, name, async () => {
    const found = await running(stateDir, name);
    if (found !== undefined) return found;
    startKeeper(stateDir, name, command, port, options);
    const deadline = performance.now() + READY_MS_MAX;
    while (performance.now() < deadline) {
      const started = await running(stateDir, name);
      if (started !== undefined) return started;
      await sleep(50);
    }
    throw new ServerError(
      `${name} did not answer on 127.0.0.1:${port} within ${READY_MS_MAX / 1000} s; see ${join(stateDir, `${name}.log`)}`,
    );
  });
}

/** Starts a keeper in a session of its own, without twice's marker, its output in the log. */
function startKeeper(
  stateDir: string,
  name: string,
  command: readonly string[],
  port: number,
  options: SharedServerOptions,
): void {
  const env: NodeJS.ProcessEnv = { ...process.env, ...options.env, [INFO_VARIABLE]: JSON.stringify(options.info ?? {}) };
  delete env[MARKER_VARIABLE];
  const [program, ...first] = options.keeper ?? [process.execPath, fileURLToPath(new URL("./keeper.js", import.meta.url))];
  const log = openSync(join(stateDir, `${name}.log`), "a");
  try {
    const keeper = spawn(program as string, [...first, stateDir, name, String(port), ...command], {
      detached: true, // setsid(): twice's SIGKILL of the worker's group spares it
      env,
      stdio: ["ignore", log, log],
    });
    keeper.on("error", (error) => process.stderr.write(`keeper of ${name}: ${error.message}\n`));
    keeper.unref();
  } finally {
    closeSync(log);
  }
}

/** The server described in `<name>.json`, if it answers. */
async function running(stateDir: string, name: string): Promise<JsonObject | undefined> {
  let found: unknown;
  try {
    found = JSON.parse(readFileSync(join(stateDir, `${name}.json`), "utf8"));
  } catch {
    return undefined;
  }
  return isObject(found) && (await answers(Number(found.port))) ? found : undefined;
}

/**
 * Runs `fn` holding the lock `name` of `stateDir`, across processes. On Linux the lock is a
 * listening socket in the abstract namespace: the kernel lets it go when its holder dies,
 * SIGKILL included, so a killed worker never leaves a stale lock. Elsewhere it is a file made
 * with O_EXCL holding the pid, taken over when that process is gone.
 */
async function withLock<T>(stateDir: string, name: string, fn: () => Promise<T>): Promise<T> {
  const release = process.platform === "linux" ? await socketLock(stateDir, name) : await fileLock(stateDir, name);
  try {
    return await fn();
  } finally {
    await release();
  }
}

/** How long a worker waits for another's lock: its holder starts a server, bounded itself. */
const LOCK_WAIT_MS_MAX = 2 * READY_MS_MAX;

async function socketLock(stateDir: string, name: string): Promise<() => Promise<void>> {
  const digest = createHash("sha256").update(`${resolve(stateDir)}\0${name}`).digest("hex").slice(0, 40);
  const address = `\0twice-kit-lock-${digest}`;
  const deadline = performance.now() + LOCK_WAIT_MS_MAX;
  for (;;) {
    const server = await listenOn(address);
    if (server !== undefined) return () => new Promise<void>((done) => server.close(() => done()));
    if (performance.now() > deadline) throw new ServerError(`the lock of ${name} in ${stateDir} stayed taken`);
    await sleep(50);
  }
}

/** A server listening on the Unix socket `address`, or undefined while another holds it. */
function listenOn(address: string): Promise<Server | undefined> {
  return new Promise((done, fail) => {
    const server = createServer((socket) => socket.destroy());
    server.once("error", (error: NodeJS.ErrnoException) => (error.code === "EADDRINUSE" ? done(undefined) : fail(error)));
    server.listen(address, () => {
      server.unref(); // the lock never keeps the process alive by itself
      done(server);
    });
  });
}

async function fileLock(stateDir: string, name: string): Promise<() => Promise<void>> {
  const path = join(stateDir, `${name}.lock`);
  const deadline = performance.now() + LOCK_WAIT_MS_MAX;
  for (;;) {
    try {
      writeFileSync(path, String(process.pid), { flag: "wx" });
      return async () => unlinkQuietly(path);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
    }
    const holder = Number(readQuietly(path));
    // A holder that died leaves its file: taken over. (Two workers taking over the same stale
    // lock at once is a narrow race this fallback accepts; Linux uses the socket lock.)
    if (Number.isInteger(holder) && holder > 0 && !alive(holder)) unlinkQuietly(path);
    else if (performance.now() > deadline) throw new ServerError(`the lock ${path} stayed taken`);
    else await sleep(50);
  }
}

function readQuietly(path: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return "";
  }
}

function unlinkQuietly(path: string): void {
  try {
    unlinkSync(path);
  } catch {
    // Gone already.
  }
}

/** Whether process `pid` is alive (a zombie is gone for this purpose). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 1).trim().split(/\s+/)[0] !== "Z";
  } catch {
    return true; // no /proc here: kill(0) said it is there
  }
}

/** Whether any worker registered in `stateDir` is alive. */
export function workersAlive(stateDir: string): boolean {
  let names: string[];
  try {
    names = readdirSync(join(stateDir, "workers"));
  } catch {
    return false;
  }
  return names.filter((n) => /^\d+$/.test(n)).some((n) => alive(Number(n)));
}

export interface KeepOptions {
  /** Written beside the port in `<name>.json`. */
  info?: JsonObject;
  graceMs?: number;
  lifetimeMs?: number;
  /** How often the workers are looked at. */
  pollMs?: number;
}

/**
 * The keeper: runs `command`, says where it listens once it answers, and stops it when no
 * worker is left (see the module's doc). Resolves to the keeper's exit code.
 */
export async function keep(
  stateDir: string,
  name: string,
  port: number,
  command: readonly string[],
  options: KeepOptions = {},
): Promise<number> {
  const env = { ...process.env };
  delete env[INFO_VARIABLE];
  const server = spawn(command[0] as string, command.slice(1), { stdio: ["ignore", "inherit", "inherit"], env });
  const ended = { now: false };
  const exited = new Promise<void>((done) => {
    const end = () => {
      ended.now = true;
      done();
    };
    server.once("exit", end);
    server.once("error", (error) => {
      process.stderr.write(`keeper: cannot run ${command[0]}: ${error.message}\n`);
      end();
    });
  });
  const started = performance.now();
  if (!(await ready(port, ended))) {
    process.stderr.write(`keeper: ${name} exited or did not answer on port ${port}\n`);
    server.kill("SIGKILL");
    return 1;
  }
  const tmp = join(stateDir, `${name}.json.tmp`);
  writeFileSync(tmp, JSON.stringify({ ...options.info, port, pid: server.pid, keeper: process.pid }));
  renameSync(tmp, join(stateDir, `${name}.json`));
  await watch(stateDir, ended, started, options);
  await stop(server, exited);
  return 0;
}

/** Whether the server answered on `port` in time (false: it exited first, or never did). */
async function ready(port: number, ended: { now: boolean }): Promise<boolean> {
  const started = performance.now();
  while (!(await answers(port))) {
    if (ended.now || performance.now() - started > READY_MS_MAX) return false;
    await sleep(50);
  }
  return true;
}

/** Waits while the server runs and a worker of the case may still need it. */
async function watch(stateDir: string, ended: { now: boolean }, started: number, options: KeepOptions): Promise<void> {
  const graceMs = options.graceMs ?? GRACE_MS;
  const lifetimeMs = options.lifetimeMs ?? LIFETIME_MS;
  let lastSeen = performance.now();
  while (!ended.now) {
    const now = performance.now();
    if (workersAlive(stateDir)) lastSeen = now;
    if (!existsSync(stateDir) || now - lastSeen > graceMs || now - started > lifetimeMs) return;
    await sleep(options.pollMs ?? 500);
  }
}

/** SIGTERM, then SIGKILL after `graceMs`: a server stopped, bounded. */
export async function stop(child: ChildProcess, exited: Promise<void>, graceMs = 10_000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  child.kill("SIGTERM");
  const timer = sleep(graceMs).then(() => "late" as const);
  if ((await Promise.race([exited.then(() => "done" as const), timer])) === "late") {
    child.kill("SIGKILL");
    await Promise.race([exited, sleep(graceMs)]);
  }
}
