/**
 * Restate as a `twice/1` executor: `npx twice-engine-restate --app twice-restate.json`.
 *
 * A Restate app is a service endpoint in any language behind a `restate-server`; this adapter
 * needs no Restate SDK, only HTTP. The app is named by a small JSON file beside it:
 *
 * ```json
 * {
 *   "command": ["node", "careful.mjs"],
 *   "port_env": "PORT",
 *   "env": {"PAYMENTS_URL": "{payments.url}", "SETTLE_MS": "{payments.contract.settle_ms_max|30000}"},
 *   "actions": {
 *     "payments.refund": {
 *       "handler": "Refunds/refund",
 *       "input": {"order_id": "{intent.id}", "payment_intent": "{params.payment_intent}", "amount": "{params.amount}"}
 *     }
 *   },
 *   "claim": {"external_id": "refund_id"},
 *   "raised": "escalated"
 * }
 * ```
 *
 * `{...}` in `env` and `input` is filled from `init` (`SERVICE.url`, `SERVICE.contract.TERM`,
 * `limits.NAME`, `secrets.NAME`, `worker_id`) and from the intent (`intent.id`, `params.NAME`); `|default` is
 * used when the value is absent, and a string that is one placeholder keeps the value's type.
 *
 * - Each twice worker is the adapter plus the app's endpoint (`command`, with `port_env` set to
 *   a loopback port kept per worker id, so that a restarted worker serves the invocations
 *   Restate pinned to its deployment, and reserved for the case, so that no other case's
 *   endpoint takes it while the worker is down: `reservedPort`), in one process group: twice's SIGKILL and SIGSTOP reach
 *   both. The worker registers its endpoint with the server (`POST /deployments`, `force`).
 * - The server is a `restate-server` of the case (the app's `node_modules` has it, as
 *   `@restatedev/restate-server` installs it, or the PATH), started by the first worker, shared
 *   by every worker of the case and outliving their kills (`./servers.js`).
 * - A job is an invocation sent through the ingress with `idempotency-key: <intent id>`: a
 *   second send attaches to the same invocation. Its id is noted in `restate-sent.jsonl`.
 * - The record is Restate's (`sys_invocation`, the invocation's output): completed with success
 *   is `succeeded`, with a failure (a `TerminalError`) `failed`; anything else `pending`, since
 *   Restate retries until it succeeds. An invocation belongs to Restate, not to a worker.
 *
 * This is the Python kit's `python -m twice.engines.restate`, with the same mapping file.
 *
 * @module
 */

import { type ChildProcess, spawn } from "node:child_process";
import { accessSync, constants, existsSync, readFileSync, realpathSync, statSync, writeFileSync } from "node:fs";
import { basename, delimiter, dirname, extname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { type Init, isObject, type JsonObject } from "../protocol.js";
import { type App, AppNotFound, type Engine, type JobRecord, main, readOutput } from "./index.js";
import { JsonLinesLog } from "./log.js";
import { answers, freePort, reservedPort, ServerError, sharedServer } from "./servers.js";
import { pyStr, sleep } from "./values.js";

/** How long the server and the app's endpoint may take to be ready. */
export const READY_MS_MAX = 60_000;
/** One HTTP call's bound. */
export const CALL_MS_MAX = 10_000;
/** `{name}` or `{name|default}`; a name is lowercase, digits, `_` and `.`. */
const PLACEHOLDER = /\{([a-z0-9_.]+)(?:\|([^}]*))?\}/g;
const WHOLE_PLACEHOLDER = /^\{([a-z0-9_.]+)(?:\|([^}]*))?\}$/;

/** An action done by a Restate handler (`Service/handler`), its input a template. */
export interface Handler {
  handler: string;
  input: unknown;
  /** The intent's params the input uses (`{params.NAME}`): exactly those are taken. */
  params: string[];
}

/** An app of a mapping file: `spec` is the file's content, `folder` where it lies (the
 * endpoint's command runs there). */
export interface RestateApp extends App<Handler> {
  spec: JsonObject;
  folder: string;
}

/** The values placeholders read, by dotted name. */
export type Values = Record<string, unknown>;

/** `template` with its placeholders filled from `values` (dotted names). */
export function fill(template: unknown, values: Values): unknown {
  if (Array.isArray(template)) return template.map((v) => fill(v, values));
  if (isObject(template)) {
    return Object.fromEntries(Object.entries(template).map(([k, v]) => [k, fill(v, values)]));
  }
  if (typeof template !== "string") return template;
  const whole = WHOLE_PLACEHOLDER.exec(template);
  if (whole !== null) return valueOf(whole[1] as string, whole[2], values); // keeps its type
  return template.replace(PLACEHOLDER, (_, name: string, fallback?: string) => pyStr(valueOf(name, fallback, values)));
}

function valueOf(name: string, fallback: string | undefined, values: Values): unknown {
  const value = values[name];
  if (value !== undefined && value !== null) return value;
  if (fallback === undefined) throw new Error(`{${name}} has no value and no default`);
  return fallback;
}

/** What `init` gives placeholders: `worker_id`, `SERVICE.url`, `SERVICE.contract.TERM`, `limits.NAME`. */
export function initValues(init: Init): Values {
  const values: Values = { worker_id: init.workerId };
  for (const [name, service] of Object.entries(init.services)) {
    values[`${name}.url`] = service.url;
    for (const [term, value] of Object.entries(service.contract ?? {})) values[`${name}.contract.${term}`] = value;
  }
  for (const [name, value] of Object.entries(init.limits)) values[`limits.${name}`] = value;
  // e.g. the chain account's key, for the endpoint's env
  for (const [name, value] of Object.entries(init.secrets)) values[`secrets.${name}`] = value;
  return values;
}

/** The names of the `{params.NAME}` placeholders of an input, sorted. */
function paramsOf(input: unknown): string[] {
  const names = new Set<string>();
  for (const match of (JSON.stringify(input) ?? "").matchAll(PLACEHOLDER)) {
    const name = match[1] as string;
    if (name.startsWith("params.")) names.add(name.slice("params.".length));
  }
  return [...names].sort();
}

/** The app of a mapping file (see the module's doc). */
export function loadMapping(path: string): RestateApp {
  let spec: unknown;
  try {
    spec = JSON.parse(readFileSync(path, "utf8"));
  } catch (error) {
    throw new Error(`${path}: ${(error as Error).message}`);
  }
  if (!isObject(spec)) throw new Error(`${path}: the mapping is a JSON object`);
  const actions: Record<string, Handler> = {};
  for (const [action, handler] of Object.entries(isObject(spec.actions) ? spec.actions : {})) {
    if (!isObject(handler) || handler.handler === undefined) {
      throw new Error(`${path}: actions.${action} names no handler`);
    }
    actions[action] = { handler: String(handler.handler), input: handler.input ?? null, params: paramsOf(handler.input) };
  }
  const renames = Object.entries(isObject(spec.claim) ? spec.claim : {});
  // The handler's output, its fields renamed to evidence as `claim` says, read as any job's.
  const claim = (output: unknown): JsonObject => {
    if (isObject(output)) {
      const renamed = Object.fromEntries(renames.map(([ours, theirs]) => [ours, output[String(theirs)] ?? null]));
      return readOutput({ ...output, ...renamed });
    }
    return readOutput(output);
  };
  return {
    actions,
    readOutput: claim,
    raised: spec.raised === undefined ? "failed" : pyStr(spec.raised),
    spec,
    folder: dirname(resolve(path)),
  };
}

/** An HTTP call with a JSON body, bounded: its status and its JSON (or text, on an error). */
export async function http(
  method: string,
  url: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<[number, unknown]> {
  let answer: Response;
  let text: string;
  try {
    answer = await fetch(url, {
      method,
      body: body === undefined || body === null ? undefined : JSON.stringify(body),
      headers: { "content-type": "application/json", accept: "application/json", ...headers },
      signal: AbortSignal.timeout(CALL_MS_MAX),
    });
    text = await answer.text();
  } catch (error) {
    // fetch says "fetch failed"; its cause says why (a refused connection, a timeout).
    const cause = (error as Error & { cause?: Error }).cause;
    throw new Error(`${method} ${url}: ${cause?.message ?? (error as Error).message}`);
  }
  if (answer.status < 400) return [answer.status, text === "" ? null : JSON.parse(text)];
  try {
    return [answer.status, JSON.parse(text)];
  } catch {
    return [answer.status, text];
  }
}

/** The `restate-server` of the app's `node_modules` (or a folder above it), else of the PATH. */
export function serverBinary(appDir: string): string {
  const platform = `restate-server-${process.platform}-${process.arch}`;
  for (let folder = resolve(appDir); ; folder = dirname(folder)) {
    const found = join(folder, "node_modules", "@restatedev", platform, "bin", "restate-server");
    if (isFile(found)) return found;
    if (dirname(folder) === folder) break;
  }
  const onPath = which("restate-server");
  if (onPath === undefined) {
    throw new ServerError(
      `no restate-server in node_modules above ${appDir} nor on the PATH (npm install @restatedev/restate-server)`,
    );
  }
  return onPath;
}

function isFile(path: string): boolean {
  try {
    return statSync(path).isFile();
  } catch {
    return false;
  }
}

function which(name: string): string | undefined {
  for (const folder of (process.env.PATH ?? "").split(delimiter)) {
    const path = join(folder || ".", name);
    try {
      accessSync(path, constants.X_OK);
      if (isFile(path)) return path;
    } catch {
      // Not here.
    }
  }
  return undefined;
}

/** Waits until `ready()` says so, polling, or throws after `timeoutMs`. */
export async function waitFor(what: string, ready: () => Promise<boolean>, timeoutMs = READY_MS_MAX): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!(await ready())) {
    if (performance.now() > deadline) throw new ServerError(`${what} was not ready within ${timeoutMs / 1000} s`);
    await sleep(100);
  }
}

async function healthy(url: string): Promise<boolean> {
  try {
    return (await http("GET", url))[0] === 200;
  } catch {
    return false;
  }
}

/** The ids of the invocations sent, by intent (the first noted wins: a resend attaches). */
class SentTable {
  private readonly log: JsonLinesLog;
  private readonly sent = new Map<string, string>();

  constructor(path: string) {
    this.log = new JsonLinesLog(path);
  }

  note(intentId: string, invocationId: string): void {
    if (this.all().has(intentId)) return;
    this.log.append({ intent_id: intentId, invocation_id: invocationId });
  }

  all(): Map<string, string> {
    for (const record of this.log.readNew()) {
      if (!isObject(record) || typeof record.intent_id !== "string" || typeof record.invocation_id !== "string") continue;
      if (!this.sent.has(record.intent_id)) this.sent.set(record.intent_id, record.invocation_id);
    }
    return this.sent;
  }
}

export class RestateEngine implements Engine<Handler> {
  readonly name = "restate";
  admin = "";
  ingress = "";
  private endpoint: ChildProcess | undefined;
  /** Why the endpoint could not run, once it could not (a command not found). */
  private endpointError: Error | undefined;
  private sent: SentTable | undefined;

  async launch(init: Init, app: App<Handler>, stateDir: string): Promise<void> {
    if (!("spec" in app) || !("folder" in app)) {
      throw new TypeError("a Restate app comes from a mapping file (--app FILE.json)");
    }
    const { spec, folder } = app as RestateApp;
    await this.startServer(stateDir, folder);
    this.sent = new SentTable(join(stateDir, "restate-sent.jsonl"));
    const port = await this.endpointPort(stateDir, init.workerId);
    this.startEndpoint(spec, folder, init, port);
    await waitFor(`the app's endpoint on port ${port}`, () => this.listening(port));
    const [status, answer] = await http("POST", `${this.admin}/deployments`, {
      uri: `http://127.0.0.1:${port}`,
      force: true,
    });
    if (status !== 200 && status !== 201) {
      throw new ServerError(`registering the endpoint on port ${port}: ${status} ${JSON.stringify(answer)}`);
    }
  }

  /** The endpoint: in this process group (not detached), so that twice's signals reach it;
   * its output on stderr, since stdout is the protocol's. */
  private startEndpoint(spec: JsonObject, folder: string, init: Init, port: number): void {
    const values = initValues(init);
    const filled = Object.entries(isObject(spec.env) ? spec.env : {}).map(([k, v]) => [k, pyStr(fill(v, values))]);
    const env = { ...process.env, ...Object.fromEntries(filled), [pyStr(spec.port_env ?? "PORT")]: String(port) };
    const command = (Array.isArray(spec.command) ? spec.command : []).map(pyStr);
    if (command.length === 0) throw new Error("the mapping's command is empty");
    this.endpoint = spawn(command[0] as string, command.slice(1), { cwd: folder, env, stdio: ["ignore", 2, 2] });
    this.endpoint.on("error", (error) => (this.endpointError = error));
  }

  private async startServer(stateDir: string, appDir: string): Promise<void> {
    const [ingress, admin, node] = [await freePort(), await freePort(), await freePort()];
    const command = [
      serverBinary(appDir),
      ...["--base-dir", join(stateDir, "restate-data"), "--bind-ip", "127.0.0.1", "--bind-port", String(node)],
      ...["--listen-mode", "tcp", "--default-num-partitions", "1", "--no-logo"],
    ];
    const env = {
      RESTATE_INGRESS__BIND_ADDRESS: `127.0.0.1:${ingress}`,
      RESTATE_ADMIN__BIND_ADDRESS: `127.0.0.1:${admin}`,
      RESTATE_DISABLE_TELEMETRY: "true",
      RESTATE_LOG_DISABLE_ANSI_CODES: "true",
    };
    const found = await sharedServer(stateDir, "restate", command, admin, { info: { ingress }, env });
    this.admin = `http://127.0.0.1:${found.port}`;
    this.ingress = `http://127.0.0.1:${found.ingress}`;
    await waitFor(
      "restate-server",
      async () => (await healthy(`${this.admin}/health`)) && (await healthy(`${this.ingress}/restate/health`)),
    );
  }

  /** The same port for every life of a worker: Restate keeps calling the deployment an
   * invocation started on. Reserved for the case (`reservedPort`), so that no other case's
   * endpoint takes it while this worker is down. */
  private async endpointPort(stateDir: string, workerId: string): Promise<number> {
    const path = join(stateDir, `restate-endpoint-${workerId}.port`);
    if (existsSync(path)) return Number.parseInt(readFileSync(path, "utf8"), 10);
    const port = await reservedPort(stateDir);
    writeFileSync(path, String(port));
    return port;
  }

  private async listening(port: number): Promise<boolean> {
    const endpoint = this.endpoint;
    if (this.endpointError !== undefined) {
      throw new ServerError(`the app's endpoint could not start: ${this.endpointError.message}`);
    }
    if (endpoint !== undefined && (endpoint.exitCode !== null || endpoint.signalCode !== null)) {
      const how = endpoint.exitCode ?? `-${endpoint.signalCode}`;
      throw new ServerError(`the app's endpoint exited with ${how} (its output is on stderr)`);
    }
    return answers(port);
  }

  async start(intentId: string, work: Handler, params: JsonObject): Promise<void> {
    const values: Values = { "intent.id": intentId };
    for (const [k, v] of Object.entries(params)) values[`params.${k}`] = v;
    const url = `${this.ingress}/${work.handler}/send`;
    const [status, answer] = await http("POST", url, fill(work.input, values), { "idempotency-key": intentId });
    if ((status !== 200 && status !== 202) || !isObject(answer) || !("invocationId" in answer)) {
      throw new Error(`ingress ${work.handler}/send: ${status} ${JSON.stringify(answer)}`);
    }
    this.sentTable().note(intentId, String(answer.invocationId));
  }

  /** Rows of Restate's SQL introspection; asked again (bounded) while the partition is not
   * known yet. */
  async query(sql: string): Promise<JsonObject[]> {
    const deadline = performance.now() + CALL_MS_MAX;
    for (;;) {
      const [status, answer] = await http("POST", `${this.admin}/query`, { query: sql });
      if (status === 200 && isObject(answer) && Array.isArray(answer.rows)) return answer.rows as JsonObject[];
      if (performance.now() > deadline) throw new Error(`${sql}: ${status} ${JSON.stringify(answer)}`);
      await sleep(200);
    }
  }

  async records(ids: readonly string[]): Promise<Map<string, JobRecord>> {
    const wanted = new Set(ids);
    const sent = [...this.sentTable().all()].filter(([intentId]) => wanted.has(intentId));
    const out = new Map<string, JobRecord>();
    if (sent.length === 0) return out;
    const listed = sent.map(([, inv]) => `'${inv.replaceAll("'", "''")}'`).join(", ");
    const sql = `SELECT id, status, completion_result, completion_failure, modified_at FROM sys_invocation WHERE id IN (${listed})`;
    const rows = new Map((await this.query(sql)).map((r) => [String(r.id), r]));
    for (const [intentId, invocationId] of sent) out.set(intentId, await this.record(invocationId, rows.get(invocationId)));
    return out;
  }

  /** One invocation's record: pending until completed, then its output or its failure. */
  private async record(invocationId: string, row: JsonObject | undefined): Promise<JobRecord> {
    const engineStatus = String(row?.status || "unknown");
    if (row === undefined || engineStatus !== "completed") return { status: "pending", engineStatus };
    if (row.completion_result === "success") {
      const [code, output] = await http("GET", `${this.ingress}/restate/invocation/${invocationId}/output`);
      if (code !== 200) throw new Error(`the output of ${invocationId}: ${code} ${JSON.stringify(output)}`);
      return { status: "succeeded", output, engineStatus };
    }
    const failure = row.completion_failure;
    const error = typeof failure === "string" ? failure : failure ? JSON.stringify(failure) : "";
    return { status: "failed", error: error.slice(0, 300), engineStatus };
  }

  async pending(ids: readonly string[]): Promise<[number, number]> {
    const running = [...(await this.records(ids)).values()].filter((r) => r.status === "pending").length;
    return [running, running];
  }

  async close(): Promise<void> {
    const endpoint = this.endpoint;
    if (endpoint !== undefined && endpoint.exitCode === null && endpoint.signalCode === null) endpoint.kill("SIGKILL");
  }

  private sentTable(): SentTable {
    if (this.sent === undefined) throw new Error("restate: not launched");
    return this.sent;
  }
}

/** `--app FILE`: the mapping file (see the module's doc) and its name without `.json`. */
export function load(spec: string): [RestateApp, string] {
  try {
    return [loadMapping(spec), basename(spec, extname(spec))];
  } catch (error) {
    throw new AppNotFound(`--app ${spec}: ${(error as Error).message}`);
  }
}

/** The `twice-engine-restate` command: serves twice/1 on stdio until shutdown. */
export function run(argv: readonly string[] = process.argv.slice(2)): Promise<never> {
  const description = "Restate as a twice/1 executor: the app's endpoint and a restate-server, named by --app FILE.json.";
  return main(new RestateEngine(), { argv, description, load });
}

/** Whether this module is the program (`node dist/engines/restate.js`), not an import. */
function isProgram(): boolean {
  try {
    return process.argv[1] !== undefined && realpathSync(process.argv[1]) === fileURLToPath(import.meta.url);
  } catch {
    return false;
  }
}

// `node dist/engines/restate.js --app ...` runs it too, as `python -m twice.engines.restate` does.
if (isProgram()) void run();
