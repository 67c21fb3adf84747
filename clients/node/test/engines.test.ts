/**
 * `twice-kit/engines`, what every engine adapter shares: the intent table, the claims read from
 * an engine's record, `replaces`, steps, `drain`, `reconcile`. The engine here is a small one
 * that runs each job as a task of this process and keeps its record in memory, so that the
 * adapter's own logic is tested without an engine (the Restate engine is tested against a fake
 * restate-server in restate.test.ts). Mirrors the Python kit's tests/test_engines.py.
 */

import { existsSync, readFileSync, appendFileSync } from "node:fs";
import { join } from "node:path";

import { afterAll, describe, expect, test } from "vitest";

import {
  Adapter,
  type App,
  type Engine,
  IntentTable,
  type IntentView,
  type JobRecord,
  readOutput,
  TABLE_FILE,
  type Work,
} from "../src/engines/index.js";
import { EXISTS, type JsonObject, MALFORMED, NOT_SUPPORTED, ProtocolError, TIMEOUT } from "../src/protocol.js";
import { tempDir as tempFolder } from "./helpers.js";

const removals: (() => Promise<void>)[] = [];
afterAll(async () => {
  await Promise.all(removals.map((remove) => remove()));
});

/** A temporary directory, removed after the file's tests. */
async function tempDir(): Promise<string> {
  const { path, remove } = await tempFolder("twice-kit-engines-");
  removals.push(remove);
  return path;
}

/** A unit of work of the fake engine: a function of the params, which it names. */
interface TaskWork extends Work {
  params: string[];
  run(params: JsonObject): unknown;
}

const work = (params: string[], run: (p: JsonObject) => unknown): TaskWork => ({ params, run });

/** Each job a task of this process; its record in memory. `hold()` keeps new jobs pending
 * until `release()`. */
class TaskEngine implements Engine<TaskWork> {
  readonly name = "tasks";
  readonly record = new Map<string, JobRecord>();
  readonly starts = new Map<string, number>();
  private gate: Promise<void> = Promise.resolve();
  private open: () => void = () => {};

  hold(): void {
    this.gate = new Promise((resolve) => (this.open = resolve));
  }

  release(): void {
    this.open();
    this.gate = Promise.resolve();
  }

  async launch(): Promise<void> {}

  async start(intentId: string, job: TaskWork, params: JsonObject): Promise<void> {
    this.starts.set(intentId, (this.starts.get(intentId) ?? 0) + 1);
    if (this.record.has(intentId)) return;
    this.record.set(intentId, { status: "pending", engineStatus: "RUNNING" });
    const gate = this.gate;
    void (async () => {
      await gate;
      try {
        const output = await job.run(params);
        this.record.set(intentId, { status: "succeeded", output, endedMs: 1000, engineStatus: "DONE" });
      } catch (error) {
        this.record.set(intentId, { status: "failed", error: String(error), endedMs: 1000, engineStatus: "ERROR" });
      }
    })();
  }

  async records(ids: readonly string[]): Promise<Map<string, JobRecord>> {
    return new Map(ids.filter((i) => this.record.has(i)).map((i) => [i, this.record.get(i) as JobRecord]));
  }

  async pending(ids: readonly string[]): Promise<[number, number]> {
    const n = ids.filter((i) => this.record.get(i)?.status === "pending").length;
    return [n, n];
  }
}

const refund = work(["amount", "payment_intent"], ({ payment_intent, amount }) => {
  if (amount === 403) throw new Error("refused");
  if (amount === 7) return { state: "unknown", key: "k-7" };
  return { id: `re_${payment_intent}` };
});
const workspace = work(["external_id", "name"], ({ external_id, name }) => {
  if (String(name).endsWith("403")) throw new Error("refused");
  return { id: `ws_${external_id}` };
});
const put = work(["body", "bucket", "key"], ({ body }) => ({ state: "confirmed", external_id: `"etag-of-${body}"` }));

/** Protocol lines written outside replies (events told before a job runs). */
class Lines {
  readonly lines: JsonObject[] = [];
  write(text: string): void {
    this.lines.push(JSON.parse(text));
  }
}

const INIT = (stateDir: string) => ({ protocol: "twice/1", worker_id: "w1", state_dir: stateDir });

async function adapter(
  dir: string,
  engine: TaskEngine = new TaskEngine(),
  app: Partial<App<TaskWork>> = {},
): Promise<Adapter<TaskWork>> {
  const adapted = new Adapter(engine, { actions: { "payments.refund": refund }, ...app }, "test", new Lines());
  await adapted.handle("init", INIT(join(dir, "state")));
  return adapted;
}

async function stepAdapter(dir: string, engine: TaskEngine): Promise<Adapter<TaskWork>> {
  const actions = { "workspaces.create": workspace, "files.put": put, "payments.refund": refund };
  const adapted = new Adapter(engine, { actions }, "test", new Lines());
  await adapted.handle("init", INIT(join(dir, "state")));
  return adapted;
}

async function propose(a: Adapter<TaskWork>, id: string, amount = 100, more: JsonObject = {}): Promise<IntentView> {
  const intent = { id, action: "payments.refund", params: { payment_intent: "pi_1", amount }, ...more };
  return (await a.handle("propose", { intent }))[1].intent as IntentView;
}

async function settled(a: Adapter<TaskWork>): Promise<Record<string, IntentView>> {
  await a.handle("drain", { timeout_ms: 5000 });
  const views = (await a.handle("status", {}))[1].intents as IntentView[];
  return Object.fromEntries(views.map((v) => [v.id, v]));
}

/** The ProtocolError `promise` rejects with. */
async function refusal(promise: Promise<unknown>): Promise<ProtocolError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  if (!(error instanceof ProtocolError)) throw new Error(`expected a ProtocolError, got ${String(error)}`);
  return error;
}

describe("the adapter", () => {
  test("announces the app's actions, and a job that returned is confirmed", async () => {
    const dir = await tempDir();
    const a = new Adapter(new TaskEngine(), { actions: { "payments.refund": refund } }, "test", new Lines());
    const [, reply] = await a.handle("init", INIT(dir));
    expect(reply).toEqual({
      executor: { name: "tasks-test", version: "0.1.0" },
      actions: ["payments.refund"],
      features: ["workflows"],
    });
    expect(existsSync(join(dir, TABLE_FILE))).toBe(true);
    await propose(a, "r1");
    const view = (await settled(a)).r1 as IntentView;
    expect([view.state, view.evidence.external_id, view.params]).toEqual([
      "confirmed",
      "re_pi_1",
      { amount: 100, payment_intent: "pi_1" },
    ]);
    expect(Object.keys(view.params)).toEqual(["amount", "payment_intent"]); // canonical order
  });

  test("reads a job that raised as failed, or as the app says", async () => {
    const dir = await tempDir();
    const plain = await adapter(join(dir, "a"));
    await propose(plain, "r1", 403);
    expect((await settled(plain)).r1?.state).toBe("failed");
    const careful = await adapter(join(dir, "b"), new TaskEngine(), { raised: "unknown" });
    await propose(careful, "r1", 403);
    const view = (await settled(careful)).r1 as IntentView;
    expect(view.state).toBe("unknown");
    expect(view.evidence.last_error).toContain("refused");
  });

  test("starts nothing new for the same proposal twice, and refuses other params with 21", async () => {
    const engine = new TaskEngine();
    const a = await adapter(await tempDir(), engine);
    const first = await propose(a, "r1");
    // The same params in another key order are the same canonical payload.
    const again = (
      await a.handle("propose", {
        intent: { id: "r1", action: "payments.refund", params: { amount: 100, payment_intent: "pi_1" } },
      })
    )[1].intent as IntentView;
    expect(again.id).toBe(first.id);
    expect(engine.starts.get("r1")).toBe(1);
    expect((await refusal(propose(a, "r1", 200))).code).toBe(EXISTS);
  });

  test("gives bad proposals the protocol's codes", async () => {
    const a = await adapter(await tempDir());
    const cases: [JsonObject, number, string][] = [
      [{ id: "x", action: "files.put", params: {} }, NOT_SUPPORTED, "action 'files.put' is not supported"],
      [
        { id: "x", action: "payments.refund", params: { payment_intent: "pi", amount: 1, currency: "eur" } },
        MALFORMED,
        "unexpected keyword argument 'currency'",
      ],
      [{ id: "x", action: "payments.refund", params: { payment_intent: "pi" } }, MALFORMED, "missing a required argument: 'amount'"],
      [{ id: "", action: "payments.refund", params: {} }, MALFORMED, "intent.id"],
      [{ id: "x", action: "payments.refund", params: [] }, MALFORMED, "intent.params must be an object"],
      [{ id: "x", action: "payments.refund", params: {}, colour: 1 }, MALFORMED, "unknown field 'colour'"],
      [
        { id: "x", action: "payments.refund", params: { payment_intent: "pi", amount: 1 }, replaces: "nothing" },
        MALFORMED,
        "replaces nothing, which this executor has never recorded",
      ],
    ];
    for (const [intent, code, words] of cases) {
      const refused = await refusal(a.handle("propose", { intent }));
      expect([refused.code, refused.text]).toEqual([code, expect.stringContaining(words)]);
    }
    expect((await a.handle("status", {}))[1].intents).toEqual([]);
  });

  test("answers 11 before init, 10 to an unknown type, 12 to a second init", async () => {
    const dir = await tempDir();
    const a = new Adapter(new TaskEngine(), { actions: { "payments.refund": refund } }, "test", new Lines());
    expect((await refusal(a.handle("status", {}))).code).toBe(11);
    expect((await refusal(a.handle("teleport", {}))).code).toBe(10);
    expect(await a.handle("shutdown", {})).toEqual([[], {}]);
    await a.handle("init", INIT(dir));
    expect((await refusal(a.handle("init", INIT(dir)))).code).toBe(12);
    expect((await refusal(a.handle("status", { ids: "r1" }))).code).toBe(12);
    expect((await refusal(a.handle("drain", { timeout_ms: -1 }))).code).toBe(12);
    expect((await refusal(a.handle("drain", { timeout_ms: null }))).code).toBe(12);
  });

  test("answers a crash (13) when the engine cannot start", async () => {
    const engine = new TaskEngine();
    engine.launch = async () => {
      throw new Error("no engine here");
    };
    const a = new Adapter(engine, { actions: { "payments.refund": refund } }, "test", new Lines());
    const refused = await refusal(a.handle("init", INIT(await tempDir())));
    expect([refused.code, refused.text]).toEqual([13, expect.stringContaining("cannot start tasks in")]);
    expect(refused.text).toContain("no engine here");
  });
});

describe("replacements", () => {
  test("wait for their lineage, and are cancelled when the first is confirmed", async () => {
    const engine = new TaskEngine();
    engine.hold(); // r1 stays pending until released
    const a = await adapter(await tempDir(), engine);
    await propose(a, "r1");
    expect((await propose(a, "r2", 100, { replaces: "r1" })).state).toBe("blocked");
    engine.release();
    const views = await settled(a);
    expect(views.r1?.state).toBe("confirmed");
    expect(views.r2?.state).toBe("failed");
    expect(views.r2?.evidence.reason).toBe("cancelled: the intent it replaces (r1) is confirmed");
    expect(views.r2?.replaces).toBe("r1");
    expect(engine.starts.has("r2")).toBe(false);
  });

  test("run once their lineage certainly had no effect", async () => {
    const engine = new TaskEngine();
    const a = await adapter(await tempDir(), engine);
    await propose(a, "r1", 403);
    await settled(a);
    const view = await propose(a, "r2", 100, { replaces: "r1" });
    expect(["submitted", "confirmed"]).toContain(view.state);
    expect(engine.starts.get("r2")).toBe(1);
    expect((await settled(a)).r2?.state).toBe("confirmed");
  });

  test("are escalated when their lineage is, naming their key", async () => {
    const a = await adapter(await tempDir());
    await propose(a, "r1", 7); // the job says unknown
    await settled(a);
    a.intents?.set("r1", "escalated", { could_duplicate: true });
    const view = await propose(a, "r2", 100, { replaces: "r1" });
    expect([view.state, view.evidence.could_duplicate, view.evidence.key]).toEqual(["escalated", false, "r2"]);
  });

  test("are told released before their job runs (an event ahead of the reply)", async () => {
    const engine = new TaskEngine();
    engine.hold();
    const out = new Lines();
    const a = new Adapter(engine, { actions: { "payments.refund": refund } }, "test", out);
    await a.handle("init", INIT(await tempDir()));
    await propose(a, "r1", 403);
    await propose(a, "r2", 100, { replaces: "r1" });
    engine.release();
    const [events] = await a.handle("drain", { timeout_ms: 5000 });
    // r1's failure and r2's release are written before r2 starts; the drain's reply carries
    // what came after.
    expect(out.lines).toEqual([
      { type: "event", intent_id: "r1", from: "submitted", state: "failed" },
      { type: "event", intent_id: "r2", from: "blocked", state: "recorded" },
    ]);
    expect(events).toEqual([{ intent_id: "r2", from: "recorded", state: "confirmed" }]);
  });
});

function welcome(after = "create", ref: JsonObject = {}): JsonObject {
  const body = { from: after, field: "id", format: "Welcome to {}", ...ref };
  return { intent: { id: "welcome", action: "files.put", after: [after], params: { bucket: "docs", key: "welcome.txt", body } } };
}

const CREATE = { intent: { id: "create", action: "workspaces.create", params: { external_id: "acme", name: "Acme" } } };

describe("steps", () => {
  test("wait, then run once with their reference resolved and recorded", async () => {
    const dir = await tempDir();
    const engine = new TaskEngine();
    engine.hold();
    const a = await stepAdapter(dir, engine);
    await a.handle("propose", CREATE);
    expect(((await a.handle("propose", welcome()))[1].intent as IntentView).state).toBe("blocked");
    expect(engine.starts.has("welcome")).toBe(false);
    engine.release();
    const view = (await settled(a)).welcome as IntentView;
    expect(view.state).toBe("confirmed");
    expect(view.evidence.resolved).toEqual({ body: "Welcome to ws_acme" });
    expect(view.after).toEqual(["create"]);
    expect(view.evidence.external_id).toBe('"etag-of-Welcome to ws_acme"');
    expect(view.params.body).toEqual({ from: "create", field: "id", format: "Welcome to {}" });
    // A new life starts nothing again, and knows the values it resolved.
    const again = await stepAdapter(dir, engine);
    expect((await settled(again)).welcome?.evidence.resolved).toEqual({ body: "Welcome to ws_acme" });
    expect(engine.starts.get("welcome")).toBe(1);
    // The same step proposed again is the same intent; another `after` is another one.
    expect(((await again.handle("propose", welcome()))[1].intent as IntentView).state).toBe("confirmed");
    const other = { intent: { ...(welcome().intent as JsonObject), after: ["create", "welcome"] } };
    expect((await refusal(again.handle("propose", other))).code).toBe(EXISTS);
  });

  test("are cancelled after a failed intent, and escalated after an escalated one", async () => {
    const dir = await tempDir();
    const a = await stepAdapter(join(dir, "failed"), new TaskEngine());
    await a.handle("propose", { intent: { id: "create", action: "workspaces.create", params: { external_id: "x", name: "x403" } } });
    await a.handle("propose", welcome());
    const view = (await settled(a)).welcome as IntentView;
    expect([view.state, view.evidence.reason]).toEqual(["failed", "cancelled: the intent it comes after (create) failed"]);

    const b = await stepAdapter(join(dir, "escalated"), new TaskEngine());
    await propose(b, "r7", 7); // the job says unknown; reconcile has no lookup: it stays so
    await b.handle("propose", {
      intent: {
        id: "after-r7",
        action: "workspaces.create",
        after: ["r7"],
        params: { external_id: "y", name: { from: "r7", field: "id" } },
      },
    });
    expect((await settled(b))["after-r7"]?.state).toBe("blocked");
    b.intents?.set("r7", "escalated", { could_duplicate: true });
    await b.handle("reconcile", {});
    const escalated = (await settled(b))["after-r7"] as IntentView;
    expect([escalated.state, escalated.evidence.could_duplicate, escalated.evidence.reason]).toEqual([
      "escalated",
      false,
      "waits for r7, which is escalated",
    ]);
  });

  test("are escalated when what they read was confirmed without the value", async () => {
    const dir = await tempDir();
    const engine = new TaskEngine();
    const actions = {
      "workspaces.create": work(["external_id", "name"], () => ({ state: "confirmed" })),
      "files.put": put,
    };
    const a = new Adapter(engine, { actions }, "test", new Lines());
    await a.handle("init", INIT(dir));
    await a.handle("propose", CREATE);
    await settled(a);
    const view = ((await a.handle("propose", welcome()))[1].intent as IntentView);
    expect([view.state, view.evidence.reason]).toEqual(["escalated", "create is confirmed but recorded no id"]);
    expect(engine.starts.has("welcome")).toBe(false);
  });

  test("resolve a reference without a format to the value itself, `$` and all", async () => {
    const engine = new TaskEngine();
    const actions = {
      "workspaces.create": work(["external_id", "name"], () => ({ id: "ws_$&1" })),
      "files.put": put,
    };
    const a = new Adapter(engine, { actions }, "test", new Lines());
    await a.handle("init", INIT(await tempDir()));
    await a.handle("propose", CREATE);
    await settled(a);
    await a.handle("propose", welcome("create", { format: "[{}]" }));
    expect((await settled(a)).welcome?.evidence.resolved).toEqual({ body: "[ws_$&1]" });
  });

  test("that are malformed are refused, naming the problem", async () => {
    const a = await stepAdapter(await tempDir(), new TaskEngine());
    await a.handle("propose", { intent: { id: "create", action: "workspaces.create", params: { external_id: "a", name: "A" } } });
    const cases: Record<string, JsonObject> = {
      "never recorded": welcome("nobody"),
      "is not in `after`": { intent: { ...(welcome().intent as JsonObject), after: [] } },
      "exactly once": welcome("create", { format: "no placeholder" }),
      "unknown key 'extra'": welcome("create", { extra: 1 }),
      "has no result field 'etag'": welcome("create", { field: "etag" }),
      "cannot take a reference": {
        intent: {
          id: "k",
          action: "files.put",
          after: ["create"],
          params: { bucket: "b", body: "x", key: { from: "create", field: "id" } },
        },
      },
      "twice": { intent: { ...(welcome().intent as JsonObject), after: ["create", "create"] } },
      "must be a list": { intent: { ...(welcome().intent as JsonObject), after: "create" } },
    };
    for (const [words, request] of Object.entries(cases)) {
      const refused = await refusal(a.handle("propose", request));
      expect([refused.code, refused.text]).toEqual([MALFORMED, expect.stringContaining(words)]);
    }
  });
});

describe("reconcile, drain and a new life", () => {
  test("reconcile settles what a job left unknown through the app's lookup", async () => {
    const seen: [string, number][] = [];
    const lookUp = (intent: IntentView, endedMs: number) => {
      seen.push([intent.id, endedMs]);
      return { state: "confirmed", external_id: "re_found", reason: "found by lookup", ignored: 1 };
    };
    const a = await adapter(await tempDir(), new TaskEngine(), { reconcile: lookUp });
    await propose(a, "r1", 7);
    expect((await settled(a)).r1?.state).toBe("unknown");
    const [events, reply] = await a.handle("reconcile", {});
    expect(reply).toEqual({ sent: 0, looked_up: 1 });
    expect(seen).toEqual([["r1", 1000]]);
    expect(events).toEqual([{ intent_id: "r1", from: "unknown", state: "confirmed", note: "found by lookup" }]);
    const view = (await settled(a)).r1 as IntentView;
    expect(view.evidence.external_id).toBe("re_found");
    expect(view.evidence).not.toHaveProperty("ignored");
  });

  test("a reconcile that finds it failed is believed over the job's record", async () => {
    const lookUp = () => ({ state: "failed", reason: "refused, for good" });
    const a = await adapter(await tempDir(), new TaskEngine(), { reconcile: lookUp });
    await propose(a, "r1", 7);
    await a.handle("reconcile", {});
    const view = (await settled(a)).r1 as IntentView;
    expect([view.state, view.evidence.reason]).toEqual(["failed", "refused, for good"]);
  });

  test("a failed init leaves nothing half-started", async () => {
    let tries = 0;
    const engine = new TaskEngine();
    const launch = engine.launch.bind(engine);
    engine.launch = async (...args: Parameters<TaskEngine["launch"]>) => {
      tries += 1;
      if (tries === 1) throw new Error("the server did not answer");
      return launch(...args);
    };
    const a = new Adapter(engine, { actions: { "payments.refund": refund } }, "test", new Lines());
    const dir = await tempDir();
    expect((await refusal(a.handle("init", INIT(join(dir, "state"))))).text).toContain("the server did not answer");
    await refusal(a.handle("status", {})); // not initialised: "send init first"
    await a.handle("init", INIT(join(dir, "state")));
    expect((await a.handle("status", {}))[1]).toEqual({ intents: [] });
  });

  test("a lookup that fails leaves the intent unknown", async () => {
    const lookUp = () => {
      throw new Error("the service is down");
    };
    const a = await adapter(await tempDir(), new TaskEngine(), { reconcile: lookUp });
    await propose(a, "r1", 7);
    await settled(a);
    expect((await a.handle("reconcile", {}))[1]).toEqual({ sent: 0, looked_up: 1 });
    expect((await settled(a)).r1?.state).toBe("unknown");
  });

  test("a new life on the same state knows every intent, and starts what its engine lost", async () => {
    const dir = await tempDir();
    const a = await adapter(dir);
    await propose(a, "r1");
    await settled(a);
    const engine = new TaskEngine();
    const again = await adapter(dir, engine);
    // The new engine had no record of r1: the adapter started it again, under the same id.
    expect(engine.starts.get("r1")).toBe(1);
    expect((await settled(again)).r1?.state).toBe("confirmed");
  });

  test("drain is bounded and says what is still pending", async () => {
    const engine = new TaskEngine();
    engine.hold();
    const a = await adapter(await tempDir(), engine);
    await propose(a, "r1");
    const started = performance.now();
    const refused = await refusal(a.handle("drain", { timeout_ms: 200 }));
    expect(refused.code).toBe(TIMEOUT);
    expect(refused.text).toContain("1 jobs still pending after 200 ms");
    expect(refused.events).toEqual([]); // propose_ok told it submitted already
    expect(performance.now() - started).toBeLessThan(5000);
    engine.release();
  });

  test("status lists the intents asked for, in the order they were recorded", async () => {
    const a = await adapter(await tempDir());
    for (const id of ["b", "a", "c"]) await propose(a, id);
    const listed = (await a.handle("status", { ids: ["c", "b", "nope"] }))[1].intents as IntentView[];
    expect(listed.map((v) => v.id)).toEqual(["b", "c"]);
  });
});

describe("the intent table", () => {
  test("is durable on return, shared by workers (the first record of an id wins), and skips torn lines", async () => {
    const path = join(await tempDir(), TABLE_FILE);
    const one = new IntentTable(path);
    const two = new IntentTable(path);
    expect(one.insert("r1", "payments.refund", { b: 1, a: 2 }, null, null, {})).toBe(true);
    expect(two.insert("r1", "payments.refund", { a: 3 }, null, null, {})).toBe(false);
    two.set("r1", "confirmed", { external_id: "re_1" });
    // A worker killed in the middle of a write leaves part of a line.
    appendFileSync(path, '\n{"op":"insert","id":"torn","act');
    expect(one.insert("r2", "payments.refund", {}, "r1", "blocked", {}, ["r1"])).toBe(true);
    const rows = new IntentTable(path).rows();
    expect(rows.map((r) => [r.seq, r.id, r.params, r.state, r.evidence, r.replaces, r.after])).toEqual([
      [1, "r1", { a: 2, b: 1 }, "confirmed", { external_id: "re_1" }, null, []],
      [2, "r2", {}, "blocked", {}, "r1", ["r1"]],
    ]);
    expect(one.find("r1")?.state).toBe("confirmed");
    expect(readFileSync(path, "utf8")).toContain('"torn"');
  });
});

test("outputs are read by convention", () => {
  expect(readOutput({ state: "escalated", could_duplicate: false, extra: 1 })).toEqual({
    state: "escalated",
    could_duplicate: false,
  });
  expect(readOutput({ external_id: "re_1" })).toEqual({ state: "confirmed", external_id: "re_1" });
  expect(readOutput({ id: "re_2" })).toEqual({ state: "confirmed", external_id: "re_2" });
  expect(readOutput("done")).toEqual({ state: "confirmed" });
  expect(readOutput({ state: "maybe" })).toEqual({ state: "confirmed" });
});
