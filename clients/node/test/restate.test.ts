/**
 * `twice-kit/engines/restate`: the mapping file (placeholders keep their types), and the whole
 * `twice-engine-restate` command (built: `npm run build` first) as twice runs it, against a fake
 * `restate-server` that the adapter finds in the app's `node_modules` as it would the real one:
 * the shared server started by a keeper of its own session, the endpoint registered, jobs sent
 * with their idempotency key, claims read from the server's SQL and outputs, a worker
 * SIGKILLed with its process group and started again on the same state, the keeper stopping
 * the server once the state is gone. The real restate-server runs under `twice run` (the
 * engines' matrix), not here.
 */

import { type ChildProcessWithoutNullStreams, spawn } from "node:child_process";
import { access, chmod, mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

import { afterAll, describe, expect, test } from "vitest";

import { AppNotFound, type IntentView } from "../src/engines/index.js";
import { fill, initValues, load, loadMapping } from "../src/engines/restate.js";
import { alive, freePort, keep, PORTS_DIR, reservedPort, reservedRange } from "../src/engines/servers.js";
import { Init, type JsonObject } from "../src/protocol.js";
import { tempDir as tempFolder } from "./helpers.js";

const removals: (() => Promise<void>)[] = [];
afterAll(async () => {
  await Promise.all(removals.map((remove) => remove()));
});

async function tempDir(): Promise<string> {
  const { path, remove } = await tempFolder("twice-kit-restate-");
  removals.push(remove);
  return path;
}

describe("a mapping file", () => {
  test("fills its placeholders, keeping the type of a value that is a whole string", () => {
    const init = new Init(
      "w1",
      "/tmp/s",
      { payments: { url: "http://127.0.0.1:9", contract: { settle_ms_max: 500, fencing: false } } },
      {},
      { request_timeout_ms: 700 },
    );
    const values = { ...initValues(init), "intent.id": "r1", "params.amount": 2500 };
    expect(fill({ amount: "{params.amount}", id: "order {intent.id}", n: 3, list: ["{worker_id}"] }, values)).toEqual({
      amount: 2500,
      id: "order r1",
      n: 3,
      list: ["w1"],
    });
    expect(fill("{payments.contract.settle_ms_max|30000}/{payments.contract.read_lag_ms_max|0}", values)).toBe("500/0");
    expect(fill("{limits.request_timeout_ms}", values)).toBe(700);
    expect(fill("{payments.contract.fencing}", values)).toBe(false);
    // In a longer string a value is written as Python's str() writes it: the same env either kit.
    expect(fill("fencing={payments.contract.fencing}", values)).toBe("fencing=False");
    expect(fill("{files.url|}", values)).toBe("");
    expect(() => fill("{params.currency}", values)).toThrow("{params.currency} has no value and no default");
  });

  test("is an app whose handlers take exactly the params their input names", async () => {
    const dir = await tempDir();
    const mapping = join(dir, "twice-app.json");
    await writeFile(
      mapping,
      JSON.stringify({
        command: ["node", "app.mjs"],
        actions: {
          "payments.refund": {
            handler: "Refunds/refund",
            input: { pi: "{params.payment_intent}", amount: "{params.amount}", order: "{intent.id}" },
          },
        },
        claim: { external_id: "refund_id" },
        raised: "escalated",
      }),
    );
    const app = loadMapping(mapping);
    expect(app.actions["payments.refund"]).toEqual({
      handler: "Refunds/refund",
      input: { pi: "{params.payment_intent}", amount: "{params.amount}", order: "{intent.id}" },
      params: ["amount", "payment_intent"],
    });
    expect([app.raised, app.folder]).toEqual(["escalated", dir]);
    expect(app.readOutput?.({ refund_id: "re_1", amount: 2500 })).toEqual({ state: "confirmed", external_id: "re_1" });
    // A renamed field that is absent is absent: the output's own `id` does not stand in.
    expect(app.readOutput?.({ id: "re_2" })).toEqual({ state: "confirmed" });
    expect(load(mapping)[1]).toBe("twice-app");
    await writeFile(join(dir, "broken.json"), '{"actions": {"payments.refund": {}}}');
    expect(() => load(join(dir, "broken.json"))).toThrow(AppNotFound);
    expect(() => load(join(dir, "broken.json"))).toThrow(/broken\.json/);
    expect(() => load(join(dir, "missing.json"))).toThrow(/--app .*missing\.json/);
  });
});

/** A stand-in for restate-server: the admin and ingress APIs the adapter uses, in memory. It
 * runs each invocation by calling the registered endpoint once (`POST /Service/handler`). */
const FAKE_SERVER = `
const http = require("node:http");
const invocations = new Map();
const byKey = new Map();
let endpoint = "";
const send = (res, status, body) => {
  res.writeHead(status, { "content-type": "application/json" });
  res.end(body === undefined ? "" : JSON.stringify(body));
};
const read = (req) => new Promise((done) => { let b = ""; req.on("data", (c) => (b += c)); req.on("end", () => done(b)); });
async function run(inv, path, body) {
  try {
    const res = await fetch(endpoint + path, { method: "POST", body, headers: { "content-type": "application/json" } });
    const text = await res.text();
    Object.assign(inv, res.ok ? { result: "success", output: JSON.parse(text) } : { result: "failure", failure: "[500] " + text });
  } catch (e) {
    Object.assign(inv, { result: "failure", failure: String(e) });
  }
}
const admin = async (req, res) => {
  const body = await read(req);
  if (req.url === "/health") return send(res, 200);
  if (req.url === "/deployments" && req.method === "POST") { endpoint = JSON.parse(body).uri; return send(res, 201, { id: "dp_1" }); }
  if (req.url === "/query" && req.method === "POST") {
    const ids = [...JSON.parse(body).query.matchAll(/'([^']+)'/g)].map((m) => m[1]);
    const rows = ids.filter((id) => invocations.has(id)).map((id) => {
      const inv = invocations.get(id);
      return { id, status: inv.result ? "completed" : "running", completion_result: inv.result ?? null,
               completion_failure: inv.failure ?? null, modified_at: 0 };
    });
    return send(res, 200, { rows });
  }
  send(res, 404, { message: "no " + req.url });
};
const ingress = async (req, res) => {
  const body = await read(req);
  if (req.url === "/restate/health") return send(res, 200, {});
  const output = /^\\/restate\\/invocation\\/([^/]+)\\/output$/.exec(req.url);
  if (output) return send(res, 200, invocations.get(output[1]).output);
  const sent = /^(\\/[^/]+\\/[^/]+)\\/send$/.exec(req.url);
  if (sent && req.method === "POST") {
    const key = req.headers["idempotency-key"];
    if (byKey.has(key)) return send(res, 200, { invocationId: byKey.get(key), status: "PreviouslyAccepted" });
    const id = "inv_" + (invocations.size + 1);
    const inv = {};
    invocations.set(id, inv);
    byKey.set(key, id);
    void run(inv, sent[1], body);
    return send(res, 202, { invocationId: id, status: "Accepted" });
  }
  send(res, 404, { message: "no " + req.url });
};
const listen = (handler, address) => {
  const [host, port] = address.split(":");
  http.createServer(handler).listen(Number(port), host);
};
listen(ingress, process.env.RESTATE_INGRESS__BIND_ADDRESS);
listen(admin, process.env.RESTATE_ADMIN__BIND_ADDRESS);
process.on("SIGTERM", () => process.exit(0));
`;

/** The team's endpoint: a refund that says what it was configured with; 403 is refused. */
const FAKE_ENDPOINT = `
import http from "node:http";
http.createServer((req, res) => {
  let body = "";
  req.on("data", (c) => (body += c));
  req.on("end", () => {
    const input = JSON.parse(body);
    if (input.amount === 403) { res.writeHead(500); return res.end("refused"); }
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ state: "confirmed", refund_id: "re_" + input.order_id,
                             reason: "settle=" + process.env.SETTLE_MS + " url=" + process.env.PAYMENTS_URL }));
  });
}).listen(Number(process.env.PORT), "127.0.0.1");
`;

const MAPPING = {
  command: ["node", "app.mjs"],
  port_env: "PORT",
  env: { PAYMENTS_URL: "{payments.url}", SETTLE_MS: "{payments.contract.settle_ms_max|30000}" },
  actions: {
    "payments.refund": {
      handler: "Refunds/refund",
      input: { order_id: "{intent.id}", payment_intent: "{params.payment_intent}", amount: "{params.amount}" },
    },
  },
  claim: { external_id: "refund_id" },
  raised: "escalated",
};

/** An app folder with its mapping, its endpoint and the fake server in its node_modules. */
async function fakeApp(dir: string): Promise<string> {
  const app = join(dir, "app");
  const bin = join(app, "node_modules", "@restatedev", `restate-server-${process.platform}-${process.arch}`, "bin");
  await mkdir(bin, { recursive: true });
  await writeFile(join(bin, "restate-server"), `#!${process.execPath}\n${FAKE_SERVER}`);
  await chmod(join(bin, "restate-server"), 0o755);
  await writeFile(join(app, "app.mjs"), FAKE_ENDPOINT);
  await writeFile(join(app, "twice-app.json"), JSON.stringify(MAPPING));
  return join(app, "twice-app.json");
}

const COMMAND = fileURLToPath(new URL("../bin/twice-engine-restate.js", import.meta.url));
const BUILT = fileURLToPath(new URL("../dist/engines/restate.js", import.meta.url));
const REPLY_MS_MAX = 20_000;

/** One life of a worker, as twice runs it: its own process group, twice's marker, JSON lines. */
class Worker {
  private readonly lines: string[] = [];
  private waiting: (() => void) | undefined;
  readonly stderr: string[] = [];
  readonly exited: Promise<number | null>;

  private constructor(readonly child: ChildProcessWithoutNullStreams) {
    createInterface({ input: child.stdout }).on("line", (line) => {
      this.lines.push(line);
      this.waiting?.();
    });
    child.stderr.on("data", (chunk: Buffer) => this.stderr.push(chunk.toString()));
    this.exited = new Promise((done) => child.on("exit", (code) => done(code)));
  }

  static start(mapping: string): Worker {
    const env = { ...process.env, TWICE_EXECUTOR_PROCESS: `test.${process.pid}` };
    return new Worker(spawn(process.execPath, [COMMAND, "--app", mapping], { env, detached: true }));
  }

  /** The events and the reply of one request. */
  async request(msgId: number, type: string, fields: JsonObject = {}): Promise<[JsonObject[], JsonObject]> {
    this.child.stdin.write(`${JSON.stringify({ type, msg_id: msgId, ...fields })}\n`);
    const events: JsonObject[] = [];
    const deadline = Date.now() + REPLY_MS_MAX;
    for (;;) {
      const line = this.lines.shift();
      if (line === undefined) {
        if (Date.now() > deadline) throw new Error(`no reply to ${type} within ${REPLY_MS_MAX} ms: ${this.stderr.join("")}`);
        await new Promise<void>((done) => {
          this.waiting = done;
          setTimeout(done, 100);
        });
        continue;
      }
      const message = JSON.parse(line) as JsonObject;
      if (message.type !== "event") return [events, message];
      events.push(message);
    }
  }

  /** SIGKILL to its process group, as twice crashes a worker. */
  async kill(): Promise<void> {
    process.kill(-(this.child.pid as number), "SIGKILL");
    await this.exited;
  }
}

async function waitUntil(what: string, ok: () => boolean | Promise<boolean>, ms = 15_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await ok())) {
    if (Date.now() > deadline) throw new Error(`${what} within ${ms} ms`);
    await new Promise((done) => setTimeout(done, 100));
  }
}

describe("a keeper", () => {
  test("serves while a registered worker lives, then stops its server after the grace", async () => {
    const dir = await tempDir();
    await mkdir(join(dir, "workers"));
    const port = await freePort();
    const server = `require("node:net").createServer().listen(${port}, "127.0.0.1")`;
    // A worker that lives, for a while; then none does.
    const worker = spawn(process.execPath, ["-e", "setTimeout(() => {}, 600)"]);
    await writeFile(join(dir, "workers", String(worker.pid)), "0");
    const started = Date.now();
    const kept = keep(dir, "fake", port, [process.execPath, "-e", server], { graceMs: 300, pollMs: 50, info: { more: 1 } });
    await waitUntil("the server is announced", () => access(join(dir, "fake.json")).then(() => true, () => false));
    const announced = JSON.parse(await readFile(join(dir, "fake.json"), "utf8")) as JsonObject;
    expect(announced).toMatchObject({ port, more: 1, keeper: process.pid });
    expect(await kept).toBe(0);
    expect(Date.now() - started).toBeGreaterThanOrEqual(600 + 300 - 100);
    expect(alive(Number(announced.pid))).toBe(false);
  });
});

describe("twice-engine-restate", () => {
  test("runs an app's handlers on a shared server that outlives a killed worker", async () => {
    await access(BUILT).catch(() => {
      throw new Error(`${BUILT} is missing: \`npm run build\` first`);
    });
    const dir = await tempDir();
    const mapping = await fakeApp(dir);
    const stateDir = join(dir, "state");
    const init = {
      protocol: "twice/1",
      worker_id: "w1",
      state_dir: stateDir,
      services: { payments: { url: "http://127.0.0.1:9", contract: { settle_ms_max: 500 } } },
    };
    let worker = Worker.start(mapping);
    try {
      const [, ready] = await worker.request(1, "init", init);
      expect(ready).toMatchObject({ type: "init_ok", executor: { name: "restate-twice-app" }, features: ["workflows"] });
      const refund = (id: string, amount: number) => ({
        intent: { id, action: "payments.refund", params: { payment_intent: "pi_1", amount } },
      });
      expect((await worker.request(2, "propose", refund("r1", 100)))[1].type).toBe("propose_ok");
      expect((await worker.request(3, "propose", refund("r2", 403)))[1].type).toBe("propose_ok");
      const refused = (await worker.request(4, "propose", { intent: { id: "x", action: "payments.refund", params: {} } }))[1];
      expect([refused.code, refused.text]).toEqual([12, "payments.refund: missing a required argument: 'amount'"]);
      expect((await worker.request(5, "drain", { timeout_ms: 10_000 }))[1].type).toBe("drain_ok");
      const views = (await worker.request(6, "status"))[1].intents as IntentView[];
      expect(views.map((v) => [v.id, v.state])).toEqual([
        ["r1", "confirmed"],
        ["r2", "escalated"],
      ]);
      expect(views[0]?.evidence).toEqual({
        engine_status: "completed",
        external_id: "re_r1",
        reason: "settle=500 url=http://127.0.0.1:9",
      });
      expect(views[1]?.evidence.last_error).toContain("refused");

      // twice's SIGKILL of the worker's group spares the server: the keeper is of its own session.
      const server = JSON.parse(await readFile(join(stateDir, "restate.json"), "utf8")) as JsonObject;
      await worker.kill();
      expect([alive(Number(server.keeper)), alive(Number(server.pid))]).toEqual([true, true]);

      // A new life of the same worker: the same server, the same claims, nothing sent again.
      worker = Worker.start(mapping);
      expect((await worker.request(1, "init", init))[1].type).toBe("init_ok");
      const again = (await worker.request(2, "propose", refund("r1", 100)))[1].intent as IntentView;
      expect([again.state, again.evidence.external_id]).toEqual(["confirmed", "re_r1"]);
      expect(JSON.parse(await readFile(join(stateDir, "restate.json"), "utf8"))).toEqual(server);
      const sent = (await readFile(join(stateDir, "restate-sent.jsonl"), "utf8")).match(/intent_id/g);
      expect(sent).toHaveLength(2);
      expect((await worker.request(3, "shutdown"))[1].type).toBe("shutdown_ok");
      expect(await worker.exited).toBe(0);

      // The state gone, the keeper stops the server and ends.
      await rm(stateDir, { recursive: true, force: true });
      await waitUntil("the keeper and its server end", () => !alive(Number(server.keeper)) && !alive(Number(server.pid)));
    } finally {
      if (worker.child.exitCode === null) await worker.kill();
    }
  });

  test("says what is wrong with its command line, with status 2", async () => {
    await access(BUILT).catch(() => {
      throw new Error(`${BUILT} is missing: \`npm run build\` first`);
    });
    const run = (args: string[]) =>
      new Promise<[number | null, string]>((done) => {
        const child = spawn(process.execPath, [COMMAND, ...args]);
        let stderr = "";
        child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
        child.on("exit", (code) => done([code, stderr]));
      });
    const [noApp, noAppText] = await run([]);
    expect([noApp, noAppText]).toEqual([2, expect.stringContaining("the following arguments are required: --app")]);
    const [missing, missingText] = await run(["--app", "/nonexistent/twice-app.json"]);
    expect([missing, missingText]).toEqual([2, expect.stringContaining("error: --app /nonexistent/twice-app.json")]);
  });
});

describe("an endpoint's port", () => {
  test("is reserved below the ephemeral range while its case lives", async () => {
    const first = await tempFolder("case-1-");
    const second = await tempFolder("case-2-");
    removals.push(second.remove);
    const [low, high] = reservedRange();
    // A port the kernel never hands out for port 0, and another case never gets while the first
    // lives, even with nothing listening on it.
    const taken = await reservedPort(first.path);
    expect(taken).toBeGreaterThanOrEqual(low);
    expect(taken).toBeLessThan(high);
    expect(await readFile(join(PORTS_DIR, String(taken)), "utf8")).toContain("case-1-");
    const others = new Set<number>();
    for (let i = 0; i < 20; i++) others.add(await reservedPort(second.path));
    expect(others.has(taken)).toBe(false);
    expect(others.size).toBe(20);
    await first.remove();
  });
});
