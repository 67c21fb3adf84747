/**
 * A team's engine app as a `twice/1` executor: what every engine adapter shares.
 *
 * `twice run --executor "npx twice-engine-restate --app twice-app.json"` starts one process
 * per worker; each is a real worker of the engine, running the team's own workflows, that twice
 * SIGKILLs, SIGSTOPs and restarts. The app names which of its units of work does each action,
 * in one object (`App`).
 *
 * What the adapter owns, the same for every engine (this module):
 *
 * - an intent table in `state_dir/twice-intents.jsonl` (id, action, params, `replaces`,
 *   `after`, and what the adapter itself decided), written durably before the engine is asked
 *   to run anything, so that a proposal is durable before `propose_ok`;
 * - the job's id: the intent id, which is every engine's own idempotency for starting work (a
 *   second start of the same id runs nothing new);
 * - `replaces` (no engine has the notion): a replacement is not started while anything in the
 *   lineage it replaces is unresolved; it is cancelled (`failed`) when a predecessor is
 *   confirmed, started when every predecessor certainly has no effect, and escalated when one
 *   may have taken effect;
 * - steps (`after`, the `workflows` feature, `./steps.js`);
 * - the claims, read from the engine's own record of each job (`JobRecord`): running is
 *   `submitted`; a job that raised is `failed` (as an app that trusts its engine reads it); a
 *   job that returned is `confirmed`, unless its output says otherwise (`readOutput`);
 * - `drain` (bounded by `timeout_ms`), `reconcile` (the app's `reconcile`, for intents left
 *   `unknown`), `status`, and the events of every change, in order.
 *
 * What each engine supplies is an `Engine`: launch a worker, start a job under an id, read the
 * engine's record of jobs, say which are still pending. `twice-kit/engines/restate` is one.
 * This mirrors the Python kit's `twice.engines`.
 *
 * @module
 */

import { randomUUID } from "node:crypto";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";

import {
  CRASH,
  emit,
  type Event,
  EXISTS,
  type Fields,
  Init,
  isObject,
  type JsonObject,
  type LineOutput,
  MALFORMED,
  NOT_SUPPORTED,
  parseInit,
  protocolOutput,
  ProtocolError,
  repr,
  serve,
  TIMEOUT,
  UNAVAILABLE,
} from "../protocol.js";
import { JsonLinesLog } from "./log.js";
import * as steps from "./steps.js";
import { canonical, describe, isBlank, sleep, truthy } from "./values.js";

export { steps };

/** The seven states of docs/protocol.md §7. */
export const STATES = ["recorded", "submitted", "blocked", "unknown", "confirmed", "failed", "escalated"] as const;
/** States in which an intent may still take effect or be decided. */
export const UNRESOLVED = ["recorded", "submitted", "blocked", "unknown"] as const;
/** The evidence fields a job's output may carry into its claim (docs/protocol.md §6). */
export const EVIDENCE_FIELDS = [
  "key",
  "previous_keys",
  "external_id",
  "tx_hash",
  "last_error",
  "decision",
  "could_duplicate",
  "reason",
] as const;
/** The longest `drain` a request may ask for. */
export const DRAIN_MS_MAX = 600_000;
/** The intent table's file in the state directory. */
export const TABLE_FILE = "twice-intents.jsonl";

const isState = (value: unknown): value is string => (STATES as readonly unknown[]).includes(value);

export function nowMs(): number {
  return Date.now();
}

/**
 * A unit of work: anything an engine runs. One that lists its `params` has them checked at
 * `propose` (every name given, no other), as Python binds a function's keyword arguments.
 */
export interface Work {
  readonly params?: readonly string[];
}

/** An intent as `propose_ok` and `status_ok` show it (docs/protocol.md §6). */
export interface IntentView extends JsonObject {
  id: string;
  action: string;
  params: JsonObject;
  state: string;
  attempts: number;
  evidence: JsonObject;
  replaces?: string;
  after?: string[];
}

/**
 * A team's app, as the adapter drives it.
 *
 * - `actions`: action name (`payments.refund`, `workspaces.create`, `files.put`,
 *   `chain.transfer`, `messages.send`) -> the engine's unit of work for it, run with the
 *   intent's params.
 * - `configure(init)`: called once per worker process before the engine starts, with the
 *   checked `init`: point the app's clients at twice's fakes here.
 * - `reconcile(intent, endedMs)`: for an intent whose job left it `unknown`, after the job
 *   ended at `endedMs`: an object with the new `state` and evidence fields, or null while it
 *   cannot tell. Without it, `reconcile` settles nothing.
 * - `readOutput(output)`: a job's return value -> an object with `state` and evidence fields.
 *   The default (`readOutput` below): an object with a `state` is taken as it is; any other
 *   return value is `confirmed`, with the object's `external_id` or `id` as evidence.
 * - `attempts(intentId)`: write requests sent so far for the intent, when the app counts them
 *   (claims say 0 otherwise).
 * - `onStart(intentId)`: called in the process that starts a job, just before.
 * - `raised`: the state of a job that raised. `failed` (the default) is how an app that
 *   trusts its engine reads it; a careful app says `unknown`, since a job that raised past its
 *   retries may have acted.
 */
export interface App<W = Work> {
  actions: Record<string, W>;
  configure?: (init: Init) => void | Promise<void>;
  reconcile?: (
    intent: IntentView,
    endedMs: number,
  ) => JsonObject | null | undefined | Promise<JsonObject | null | undefined>;
  readOutput?: (output: unknown) => JsonObject;
  attempts?: (intentId: string) => number | Promise<number>;
  onStart?: (intentId: string) => void | Promise<void>;
  raised?: string;
}

/**
 * The engine's record of one job: `status` is `pending`, `succeeded` or `failed`; `output` the
 * job's return value, `error` what it raised; `endedMs` when it ended; `engineStatus` the
 * engine's own word for it (shown in the claim's evidence).
 */
export interface JobRecord {
  status: "pending" | "succeeded" | "failed";
  output?: unknown;
  error?: string | null;
  endedMs?: number | null;
  engineStatus?: string;
  executor?: string | null;
}

/** A job the adapter started: its id, its work, the params it runs with. */
export type Job<W> = [intentId: string, work: W, params: JsonObject];

/**
 * What an engine supplies to the adapter. Every method may throw; the adapter answers a crash
 * (code 13) and goes on.
 */
export interface Engine<W = Work> {
  /** The engine's name, in the executor's name (`<engine>-<app>`). */
  readonly name: string;
  /**
   * Starts this worker's engine side (after `app.configure`); a worker restarted with the same
   * `workerId` resumes the jobs its previous life left pending.
   */
  launch(init: Init, app: App<W>, stateDir: string): Promise<void>;
  /** Starts `work` with `params` as a job whose id is `intentId`; durable on return. A second
   * start of the same id must run nothing new. */
  start(intentId: string, work: W, params: JsonObject): Promise<void>;
  /** Called once after `launch` with every job the adapter has started: an engine that does
   * not resume its own unfinished jobs on start resumes this worker's here. */
  recover?(jobs: Job<W>[]): Promise<void>;
  /** The engine's record of each job in `ids` it knows (an id it never started is absent). */
  records(ids: readonly string[]): Promise<Map<string, JobRecord>>;
  /** Of the jobs `ids`, how many are pending and this worker's to finish, and how many are
   * pending in all. */
  pending(ids: readonly string[], workerId: string): Promise<[mine: number, total: number]>;
  /** At `shutdown` (or the end of input): stops what this worker started besides itself.
   * Everything acknowledged is durable already. */
  close?(): Promise<void>;
}

/** One intent in the adapter's table. `state` null: its job was started (or is due to be). */
export interface IntentRow {
  seq: number;
  id: string;
  action: string;
  params: JsonObject;
  replaces: string | null;
  state: string | null;
  evidence: JsonObject;
  after: string[];
}

/**
 * The adapter's own record of the intents, shared by the workers of a state directory: an
 * append-only log of inserts (the first of an id wins) and updates (the last wins), each
 * durable before it returns.
 */
export class IntentTable {
  private readonly log: JsonLinesLog;
  private readonly byId = new Map<string, IntentRow & { token: unknown }>();
  private readonly inOrder: IntentRow[] = [];

  constructor(path: string) {
    this.log = new JsonLinesLog(path);
  }

  /** The rows of `ids` (every row without), in the order they were recorded. */
  rows(ids?: readonly string[] | null): IntentRow[] {
    this.refresh();
    const wanted = ids == null ? null : new Set(ids);
    return this.inOrder.filter((r) => wanted === null || wanted.has(r.id)).map(copyRow);
  }

  find(intentId: string): IntentRow | undefined {
    return this.rows([intentId])[0];
  }

  /**
   * Records an intent; whether this record is the one kept (another worker may have recorded
   * the same id a moment before: the first record of an id wins).
   */
  insert(
    intentId: string,
    action: string,
    params: JsonObject,
    replaces: string | null,
    state: string | null,
    evidence: JsonObject,
    after: readonly string[] = [],
  ): boolean {
    const token = randomUUID();
    this.log.append({
      op: "insert",
      id: intentId,
      action,
      params: JSON.parse(canonical(params)),
      replaces,
      state,
      evidence: Object.keys(evidence).length > 0 ? evidence : null,
      after: after.length > 0 ? [...after] : null,
      token,
    });
    this.refresh();
    return this.byId.get(intentId)?.token === token;
  }

  /** Sets what the adapter decided of an intent (`state` null: its job runs). */
  set(intentId: string, state: string | null, evidence: JsonObject): void {
    this.log.append({ op: "set", id: intentId, state, evidence: Object.keys(evidence).length > 0 ? evidence : null });
    this.refresh();
  }

  close(): void {
    this.log.close();
  }

  private refresh(): void {
    for (const record of this.log.readNew()) this.apply(record);
  }

  private apply(record: unknown): void {
    if (!isObject(record) || typeof record.id !== "string") return;
    const row = this.byId.get(record.id);
    if (record.op === "insert" && row === undefined) {
      const added = {
        seq: this.inOrder.length + 1,
        id: record.id,
        action: String(record.action),
        params: isObject(record.params) ? record.params : {},
        replaces: typeof record.replaces === "string" ? record.replaces : null,
        state: typeof record.state === "string" ? record.state : null,
        evidence: isObject(record.evidence) ? record.evidence : {},
        after: Array.isArray(record.after) ? (record.after as string[]) : [],
        token: record.token,
      };
      this.byId.set(added.id, added);
      this.inOrder.push(added);
    } else if (record.op === "set" && row !== undefined) {
      row.state = typeof record.state === "string" ? record.state : null;
      row.evidence = isObject(record.evidence) ? record.evidence : {};
    }
  }
}

/** A row callers may change freely (the table's own stays as recorded). */
function copyRow(row: IntentRow): IntentRow {
  const { seq, id, action, params, replaces, state, evidence, after } = structuredClone(row);
  return { seq, id, action, params, replaces, state, evidence, after };
}

/** The default reading of a job's return value (see `App.readOutput`). */
export function readOutput(output: unknown): JsonObject {
  if (isObject(output) && isState(output.state)) {
    return Object.fromEntries(
      Object.entries(output).filter(([k]) => k === "state" || (EVIDENCE_FIELDS as readonly string[]).includes(k)),
    );
  }
  const found: JsonObject = { state: "confirmed" };
  if (isObject(output)) {
    // An `external_id` that is there, even null, is the answer (as Python's dict.get reads it).
    const external = "external_id" in output ? output.external_id : output.id;
    if (typeof external === "string" && external !== "") found.external_id = external;
  }
  return found;
}

/** The params must be an object whose fields the work takes by name (when it lists them). */
export function checkParams(action: string, work: unknown, params: unknown): asserts params is JsonObject {
  if (!isObject(params)) throw new ProtocolError(MALFORMED, "intent.params must be an object");
  const names = (work as Work | undefined)?.params;
  if (!Array.isArray(names)) return; // a work that does not say: the engine will
  const missing = names.find((name) => !Object.hasOwn(params, name));
  if (missing !== undefined) {
    throw new ProtocolError(MALFORMED, `${action}: missing a required argument: ${repr(missing)}`);
  }
  const extra = Object.keys(params).find((name) => !names.includes(name));
  if (extra !== undefined) {
    throw new ProtocolError(MALFORMED, `${action}: got an unexpected keyword argument ${repr(extra)}`);
  }
}

/** An intent as `propose` carries it, checked. */
interface Proposed {
  id: string;
  action: string;
  params: JsonObject;
  replaces: string | null;
  after: string[];
}

/** One worker: the `twice/1` requests answered from the intent table and the engine's record. */
export class Adapter<W = Work> {
  private table: IntentTable | undefined;
  private workerId = "";
  private limits: JsonObject = {};
  /** Intent id -> the state last told (for events). */
  private readonly known = new Map<string, string>();
  /** The engine's records of jobs that ended: they do not change, so a poll reads only the
   * others (a Restate output is a request each). */
  private readonly ended = new Map<string, JobRecord>();

  constructor(
    readonly engine: Engine<W>,
    readonly app: App<W>,
    readonly appName: string,
    readonly out: LineOutput,
  ) {}

  /** The `twice/1` handler (for `serve`): every request but `init` and `shutdown` needs init. */
  handle = async (kind: string, request: JsonObject): Promise<[Event[], Fields]> => {
    if (kind === "shutdown") return [[], {}];
    if (kind === "init") return [[], await this.init(request)];
    if (!["propose", "status", "drain", "reconcile"].includes(kind)) {
      throw new ProtocolError(NOT_SUPPORTED, `unknown request type ${repr(kind)}`);
    }
    if (this.table === undefined) throw new ProtocolError(UNAVAILABLE, "send init first");
    try {
      if (kind === "propose") return await this.propose(request);
      if (kind === "status") return [[], await this.status(request)];
      if (kind === "drain") return await this.drain(request);
      return await this.reconcile();
    } catch (error) {
      if (error instanceof ProtocolError) throw error;
      throw new ProtocolError(CRASH, `${kind}: ${describe(error)}`);
    }
  };

  /** The intent table, for tests and tools (undefined before `init`). */
  get intents(): IntentTable | undefined {
    return this.table;
  }

  // ---- init ----------------------------------------------------------------------------

  private async init(request: JsonObject): Promise<Fields> {
    if (this.table !== undefined) throw new ProtocolError(MALFORMED, "init was already received");
    const checked = parseInit(request);
    this.workerId = checked.workerId;
    this.limits = { pass_pause_ms: 20, ...checked.limits };
    const stateDir = String(checked.stateDir);
    try {
      mkdirSync(stateDir, { recursive: true });
      this.table = new IntentTable(join(stateDir, TABLE_FILE));
      await this.app.configure?.(checked);
      await this.engine.launch(checked, this.app, stateDir);
      const started = this.tableRows().filter((r) => r.state === null);
      await this.engine.recover?.(started.map((r) => [r.id, this.work(r.action), steps.jobParams(r)]));
      await this.startMissing();
      for (const view of await this.views()) this.known.set(view.id, view.state);
    } catch (error) {
      // A failed init leaves nothing half-started: a second init may try again.
      this.table = undefined;
      if (error instanceof ProtocolError) throw error;
      throw new ProtocolError(CRASH, `cannot start ${this.engine.name} in ${stateDir}: ${describe(error)}`);
    }
    return {
      executor: { name: `${this.engine.name}-${this.appName}`, version: "0.1.0" },
      actions: Object.keys(this.app.actions).sort(),
      features: [steps.FEATURE],
    };
  }

  // ---- jobs ----------------------------------------------------------------------------

  private work(action: string): W {
    if (!Object.hasOwn(this.app.actions, action)) throw new Error(`the app has no work for ${action}`);
    return this.app.actions[action] as W;
  }

  private async start(row: IntentRow): Promise<void> {
    await this.app.onStart?.(row.id);
    await this.engine.start(row.id, this.work(row.action), steps.jobParams(row));
  }

  /** Starts the jobs of intents recorded (and released) by a life that died before. */
  private async startMissing(): Promise<void> {
    const rows = this.tableRows().filter((r) => r.state === null);
    if (rows.length === 0) return;
    const have = await this.records(rows.map((r) => r.id));
    for (const row of rows) {
      if (!have.has(row.id)) await this.start(row);
    }
  }

  private tableRows(ids?: readonly string[] | null): IntentRow[] {
    if (this.table === undefined) throw new Error("no intent table before init");
    return this.table.rows(ids);
  }

  // ---- propose -------------------------------------------------------------------------

  private checkedIntent(request: JsonObject): Proposed {
    const intent = request.intent;
    if (!isObject(intent)) throw new ProtocolError(MALFORMED, "propose needs an intent object");
    const unknown = Object.keys(intent)
      .filter((k) => !["id", "action", "params", "replaces", "after"].includes(k))
      .sort();
    if (unknown.length > 0) throw new ProtocolError(MALFORMED, `intent: unknown field ${repr(unknown[0])}`);
    const { id, action, params } = intent;
    const replaces = intent.replaces ?? null;
    if (typeof id !== "string" || id === "") throw new ProtocolError(MALFORMED, "intent.id must be a non-empty string");
    if (typeof action !== "string") throw new ProtocolError(MALFORMED, "intent.action must be a string");
    if (!Object.hasOwn(this.app.actions, action)) {
      const supported = Object.keys(this.app.actions).sort().join(", ");
      throw new ProtocolError(NOT_SUPPORTED, `action ${repr(action)} is not supported; supported: ${supported}`);
    }
    if (replaces !== null && typeof replaces !== "string") {
      throw new ProtocolError(MALFORMED, "intent.replaces must be a string or null");
    }
    checkParams(action, this.app.actions[action], params);
    const recorded = new Map(this.tableRows().map((r) => [r.id, r.action]));
    const after = steps.check(id, action, params, intent.after, recorded);
    return { id, action, params, replaces, after };
  }

  private async propose(request: JsonObject): Promise<[Event[], Fields]> {
    const intent = this.checkedIntent(request);
    const table = this.table as IntentTable;
    const existing = table.find(intent.id);
    if (existing !== undefined) return this.proposedAgain(existing, intent);
    if (intent.replaces !== null && table.find(intent.replaces) === undefined) {
      throw new ProtocolError(
        MALFORMED,
        `intent ${intent.id} replaces ${intent.replaces}, which this executor has never recorded`,
      );
    }
    let state: string | null = null;
    let evidence: JsonObject = {};
    if (intent.replaces !== null || intent.after.length > 0) {
      [state, evidence] = (await this.release({ ...intent, evidence: {} })) ?? ["blocked", {}];
      if (state === "recorded") {
        state = null;
        await this.tellChanges(); // what released it is told before it runs
      }
    }
    try {
      const { id, action, params, replaces, after } = intent;
      if (!table.insert(id, action, params, replaces, state, evidence, after)) {
        // Another worker recorded this id a moment before: its record is the intent.
        return this.proposedAgain(table.find(id) as IntentRow, intent);
      }
      if (state === null) await this.start(this.tableRows([id])[0] as IntentRow);
    } catch (error) {
      if (error instanceof ProtocolError) throw error;
      throw new ProtocolError(CRASH, `could not record ${intent.id}: ${describe(error)}`);
    }
    return [await this.changes([]), { intent: await this.viewOf(intent.id) }];
  }

  /** `propose` of an id recorded already: the intent as it is now, if it is the same one. */
  private async proposedAgain(existing: IntentRow, intent: Proposed): Promise<[Event[], Fields]> {
    const same = existing.action === intent.action && canonical(existing.params) === canonical(intent.params);
    if (!same || canonical(existing.after) !== canonical(intent.after)) {
      throw new ProtocolError(
        EXISTS,
        `intent id ${intent.id} was already recorded with another action, payload or after`,
      );
    }
    await this.startMissing();
    return [await this.changes([]), { intent: await this.viewOf(intent.id) }];
  }

  private async viewOf(intentId: string): Promise<IntentView> {
    const view = (await this.views([intentId]))[0] as IntentView;
    this.known.set(intentId, view.state);
    return view;
  }

  // ---- replacements and steps ----------------------------------------------------------

  /**
   * What intent `intentId`, replacing `replaces`, may do now: `["recorded", {}]` to run,
   * `["failed", ...]` cancelled, `["escalated", ...]`, or undefined (stay blocked). An
   * escalation names the key its job would have run under (the intent id: every engine's
   * handle on it), so that a person can look for it.
   */
  private async released(replaces: string, intentId: string): Promise<steps.Release | undefined> {
    const views = new Map((await this.views()).map((v) => [v.id, v]));
    const seen = new Set<string>();
    let escalate = false;
    for (let current: string | undefined = replaces; current !== undefined && !seen.has(current); ) {
      seen.add(current);
      const v = views.get(current);
      if (v === undefined) {
        const reason = `the intent it replaces (${current}) is missing`;
        return ["escalated", { reason, could_duplicate: false, key: intentId }];
      }
      if (v.state === "confirmed") {
        const where = current === replaces ? "" : `${current}, in the lineage of `;
        return ["failed", { reason: `cancelled: ${where}the intent it replaces (${replaces}) is confirmed` }];
      }
      if (v.state === "escalated" && v.evidence.could_duplicate !== false) escalate = true;
      else if (v.state !== "escalated" && v.state !== "failed") return undefined;
      current = v.replaces;
    }
    if (escalate) {
      const reason = `the lineage of ${replaces} is escalated; executing this one could do it twice`;
      return ["escalated", { reason, could_duplicate: false, key: intentId }];
    }
    return ["recorded", {}];
  }

  /**
   * What a blocked intent may do now: a step once what it comes after is settled (its
   * references resolved), then a replacement once its lineage is; undefined: still blocked.
   */
  private async release(row: Omit<IntentRow, "seq" | "state">): Promise<steps.Release | undefined> {
    let evidence: JsonObject = {};
    if (row.after.length > 0) {
      const views = new Map((await this.views(row.after)).map((v) => [v.id, v]));
      const got = steps.released(row.id, row.after, row.params, views);
      if (got === undefined || got[0] !== "recorded") return got;
      evidence = got[1];
    }
    if (row.replaces !== null) {
      const got = await this.released(row.replaces, row.id);
      if (got === undefined || got[0] !== "recorded") return got;
    }
    return ["recorded", evidence];
  }

  /** Decides every blocked intent that may now run, or end; whether any was. */
  private async releasePass(): Promise<boolean> {
    const table = this.table as IntentTable;
    let changed = false;
    for (const row of this.tableRows()) {
      if (row.state !== "blocked") continue;
      const got = await this.release(row);
      if (got === undefined) continue;
      changed = true;
      const [state, evidence] = got;
      if (state === "recorded") {
        // The resolved values are durable before the job starts (docs/protocol.md §3.2).
        table.set(row.id, null, evidence);
        await this.tellChanges(); // what released it is told before it runs
        await this.start({ ...row, state: null, evidence });
      } else {
        table.set(row.id, state, evidence);
      }
    }
    return changed;
  }

  // ---- views ---------------------------------------------------------------------------

  /** The engine's record of each job in `ids` it knows; an ended one is read once. */
  private async records(ids: readonly string[]): Promise<Map<string, JobRecord>> {
    const found = new Map<string, JobRecord>();
    for (const id of ids) {
      const ended = this.ended.get(id);
      if (ended !== undefined) found.set(id, ended);
    }
    const fresh = await this.engine.records(ids.filter((id) => !this.ended.has(id)));
    for (const [id, record] of fresh) {
      found.set(id, record);
      if (record.status !== "pending") this.ended.set(id, record);
    }
    return found;
  }

  private async views(ids?: readonly string[] | null): Promise<IntentView[]> {
    const rows = this.tableRows(ids);
    if (rows.length === 0) return [];
    const records = await this.records(rows.map((r) => r.id));
    const views: IntentView[] = [];
    for (const row of rows) views.push(await this.view(row, records.get(row.id)));
    return views;
  }

  private async view(row: IntentRow, record: JobRecord | undefined): Promise<IntentView> {
    const [state, evidence] = this.stateOf(row, record);
    Object.assign(evidence, row.evidence);
    const view: IntentView = {
      id: row.id,
      action: row.action,
      params: row.params,
      state,
      attempts: this.app.attempts !== undefined ? await this.app.attempts(row.id) : 0,
      evidence: Object.fromEntries(Object.entries(evidence).filter(([, v]) => !isBlank(v))),
    };
    if (row.replaces !== null) view.replaces = row.replaces;
    if (row.after.length > 0) view.after = row.after;
    return view;
  }

  private stateOf(row: IntentRow, record: JobRecord | undefined): [string, JsonObject] {
    const decided = row.state;
    if (record === undefined) {
      const kept = ["blocked", "failed", "escalated", "confirmed"].includes(decided as string);
      return [kept ? (decided as string) : "recorded", {}];
    }
    // Decided by the app's reconcile.
    if (decided === "confirmed" || decided === "escalated" || decided === "failed") return [decided, {}];
    const evidence: JsonObject = { engine_status: record.engineStatus ?? "" };
    if (record.status === "pending") return ["submitted", evidence];
    if (record.status === "failed") {
      evidence.last_error = (record.error ?? "").slice(0, 300);
      const raised = this.app.raised ?? "failed";
      return [isState(raised) ? raised : "failed", evidence];
    }
    const found = { ...(this.app.readOutput ?? readOutput)(record.output) };
    const state = "state" in found ? found.state : "confirmed";
    delete found.state;
    Object.assign(evidence, found);
    return [isState(state) ? state : "unknown", evidence];
  }

  // ---- events --------------------------------------------------------------------------

  /**
   * Writes the events of every change since last told at once (before this request's reply,
   * as docs/protocol.md §5 allows), so the timeline has them before what follows.
   */
  private async tellChanges(): Promise<void> {
    for (const event of await this.changes([])) emit(this.out, { type: "event", ...event });
  }

  /** Appends an event for each intent whose state changed since last told; returns them. */
  private async changes(events: Event[]): Promise<Event[]> {
    for (const v of await this.views()) {
      const before = this.known.get(v.id);
      if (before === v.state) continue;
      const event: Event = { intent_id: v.id, state: v.state };
      if (before !== undefined) event.from = before;
      if (truthy(v.evidence.reason)) event.note = v.evidence.reason;
      events.push(event);
      this.known.set(v.id, v.state);
    }
    return events;
  }

  // ---- drain, reconcile, status --------------------------------------------------------

  private async drain(request: JsonObject): Promise<[Event[], Fields]> {
    const timeoutMs = request.timeout_ms === undefined ? DRAIN_MS_MAX : request.timeout_ms;
    if (typeof timeoutMs !== "number" || !Number.isInteger(timeoutMs) || timeoutMs < 0 || timeoutMs > DRAIN_MS_MAX) {
      throw new ProtocolError(MALFORMED, `timeout_ms must be an integer from 0 to ${DRAIN_MS_MAX}`);
    }
    const deadline = performance.now() + timeoutMs;
    const pauseMs = Math.max(integer(this.limits.pass_pause_ms, "limits.pass_pause_ms"), 20);
    let mine = 0;
    let total = 0;
    for (;;) {
      // Pending first, then the blocked ones: a job that ends in between has released what
      // waits for it by the time the loop may end.
      const unended = this.tableRows()
        .map((r) => r.id)
        .filter((id) => !this.ended.has(id));
      [mine, total] = await this.engine.pending(unended, this.workerId);
      const released = await this.releasePass();
      await this.startMissing();
      if (released) continue;
      if (mine === 0 || performance.now() >= deadline) break;
      await sleep(pauseMs);
    }
    const events = await this.changes([]);
    if (total > 0) {
      const others = total - mine;
      const whose = others ? ` (${others} of them another worker's: this worker does not take them over)` : "";
      throw new ProtocolError(TIMEOUT, `${total} jobs still pending after ${timeoutMs} ms${whose}`, events);
    }
    return [events, {}];
  }

  private async reconcile(): Promise<[Event[], Fields]> {
    let lookedUp = 0;
    await this.releasePass();
    await this.startMissing();
    const lookUp = this.app.reconcile;
    if (lookUp !== undefined) {
      const records = await this.records(this.tableRows().map((r) => r.id));
      for (const v of await this.views()) {
        if (v.state !== "unknown") continue;
        lookedUp += 1;
        const endedMs = records.get(v.id)?.endedMs || nowMs();
        let found: JsonObject | null | undefined;
        try {
          found = await lookUp(v, endedMs);
        } catch (error) {
          // The lookup failed: the intent stays unknown, and the next pass asks again.
          process.stderr.write(`twice-kit/engines: reconcile of ${v.id} failed: ${describe(error)}\n`);
          continue;
        }
        if (!isObject(found) || !isState(found.state)) continue;
        this.settle(v.id, found.state, found);
      }
      await this.releasePass();
    }
    return [await this.changes([]), { sent: 0, looked_up: lookedUp }];
  }

  /** Records what the app's lookup found: its state, and its evidence fields (no others). */
  private settle(intentId: string, state: string, found: JsonObject): void {
    const row = this.tableRows([intentId])[0] as IntentRow;
    const evidence = { ...row.evidence };
    for (const key of EVIDENCE_FIELDS) if (key in found) evidence[key] = found[key];
    (this.table as IntentTable).set(intentId, state, evidence);
  }

  private async status(request: JsonObject): Promise<Fields> {
    const ids = request.ids ?? null;
    if (ids !== null && (!Array.isArray(ids) || !ids.every((i) => typeof i === "string"))) {
      throw new ProtocolError(MALFORMED, "ids must be a list of strings");
    }
    return { intents: await this.views(ids as string[] | null) };
  }
}

/** `value` as an integer, as Python's `int()` takes a limit (text of digits too). */
function integer(value: unknown, what: string): number {
  const n = typeof value === "number" || typeof value === "string" ? Math.trunc(Number(value)) : Number.NaN;
  if (!Number.isFinite(n)) throw new TypeError(`${what} must be an integer, not ${JSON.stringify(value)}`);
  return n;
}

/** `--app` names nothing usable. */
export class AppNotFound extends Error {
  override readonly name = "AppNotFound";
}

/** How an adapter's command reads its `--app`: the app and a short name for it. */
export type AppLoader<W> = (spec: string) => [App<W>, string] | Promise<[App<W>, string]>;

export interface MainOptions<W> {
  /** The command line without the program (default: this process's). */
  argv?: readonly string[];
  /** What `--help` says above the options. */
  description?: string;
  /** Reads `--app`. */
  load: AppLoader<W>;
}

const USAGE = (prog: string) => `usage: ${prog} [-h] --app APP [--path PATH]`;

/** The command line, or the exit it asks for (help, or a usage error: status 2). */
function parseCommandLine(prog: string, argv: readonly string[], description: string): { app: string } {
  let values: { app?: string; help?: boolean };
  try {
    ({ values } = parseArgs({
      args: [...argv],
      options: {
        app: { type: "string" },
        // The Python kit's import path; accepted so that a command line works with either kit.
        path: { type: "string", multiple: true },
        help: { type: "boolean", short: "h" },
      },
    }));
  } catch (error) {
    process.stderr.write(`${USAGE(prog)}\n${prog}: error: ${(error as Error).message}\n`);
    process.exit(2);
  }
  if (values.help) {
    process.stderr.write(`${USAGE(prog)}\n\n${description}\n\n  --app APP    the app the adapter runs\n`);
    process.exit(0);
  }
  if (values.app === undefined) {
    process.stderr.write(`${USAGE(prog)}\n${prog}: error: the following arguments are required: --app\n`);
    process.exit(2);
  }
  return { app: values.app };
}

/**
 * The adapter's command line: `--app APP` (what `load` reads). Serves twice/1 on stdio until
 * shutdown or the end of input, then exits at once: everything acknowledged is durable.
 */
export async function main<W>(engine: Engine<W>, options: MainOptions<W>): Promise<never> {
  const out = protocolOutput(); // before anything that may print
  const prog = `twice-engine-${engine.name}`;
  const args = parseCommandLine(prog, options.argv ?? process.argv.slice(2), options.description ?? "");
  let app: App<W>;
  let appName: string;
  try {
    [app, appName] = await options.load(args.app);
  } catch (error) {
    process.stderr.write(`error: ${error instanceof AppNotFound ? error.message : describe(error)}\n`);
    process.exit(2);
  }
  let code = 0;
  try {
    await serve(new Adapter(engine, app, appName, out).handle, { out });
  } catch (error) {
    // stdout gone (twice stopped reading): nothing more can be answered.
    process.stderr.write(`${prog}: ${describe(error)}\n`);
    code = 1;
  }
  try {
    await engine.close?.();
  } finally {
    process.exit(code);
  }
}
