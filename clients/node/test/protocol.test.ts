/**
 * `twice-kit/protocol`, the `twice/1` plumbing for executors written in Node: the loop's
 * framing and errors (docs/protocol.md §1 and §4) on in-memory streams, `init`'s checks, and
 * the protocol's own stdout in a real child process. Mirrors the Python kit's
 * tests/test_protocol.py.
 */

import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import ts from "typescript";
import { describe, expect, test } from "vitest";

import {
  CRASH,
  type Handler,
  type JsonObject,
  LINE_BYTES_MAX,
  MALFORMED,
  NOT_SUPPORTED,
  parseInit,
  ProtocolError,
  requestLines,
  serve,
} from "../src/protocol.js";

/** The lines `handle` writes for `input`, parsed. */
async function run(input: (string | Buffer)[], handle: Handler): Promise<JsonObject[]> {
  let written = "";
  const out = { write: (text: string) => (written += text) };
  expect(await serve(handle, { input: toChunks(input), out })).toBe(0);
  return written
    .split("\n")
    .filter((line) => line !== "")
    .map((line) => JSON.parse(line));
}

async function* toChunks(chunks: (string | Buffer)[]): AsyncGenerator<Buffer> {
  for (const chunk of chunks) yield Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk);
}

const echo: Handler = async (kind, request) => {
  if (kind === "drain") return [[{ intent_id: "a", from: "recorded", state: "confirmed" }], {}];
  if (kind === "boom") throw new Error("the state is gone");
  if (kind === "refuse") throw new ProtocolError(NOT_SUPPORTED, "no", [{ intent_id: "b", state: "failed" }]);
  return [[], { seen: request.n ?? null }];
};

describe("serve", () => {
  test("answers each request with its events, then one reply, in order", async () => {
    const got = await run(['{"type":"status","msg_id":1,"n":7}\n', "\n", '{"type":"drain","msg_id":2}\n'], echo);
    expect(got).toEqual([
      { type: "status_ok", in_reply_to: 1, seen: 7 },
      { type: "event", intent_id: "a", from: "recorded", state: "confirmed" },
      { type: "drain_ok", in_reply_to: 2 },
    ]);
  });

  test("reads lines split anywhere across chunks, and a last line without its newline", async () => {
    const got = await run(['{"type":"sta', 'tus","msg_id":1}\n{"type":"status",', '"msg_id":2}'], echo);
    expect(got.map((m) => m.in_reply_to)).toEqual([1, 2]);
  });

  test("gives bad lines error 12 and goes on", async () => {
    const got = await run(
      [
        "not json\n",
        "[1]\n",
        '{"type":"x","msg_id":"7"}\n',
        '{"type":"x","msg_id":-1}\n',
        '{"msg_id":3}\n',
        Buffer.from([0xff, 0xfe, 0x0a]),
        '{"type":"status","msg_id":4}\n',
      ],
      echo,
    );
    expect(got.map((m) => [m.type, m.code, m.in_reply_to])).toEqual([
      ["error", MALFORMED, null],
      ["error", MALFORMED, null],
      ["error", MALFORMED, "7"],
      ["error", MALFORMED, -1],
      ["error", MALFORMED, 3],
      ["error", MALFORMED, null],
      ["status_ok", undefined, 4],
    ]);
  });

  test("refuses a line over 1 MiB whole and skips it", async () => {
    const long = `{"type":"status","msg_id":1,"pad":"${"x".repeat(LINE_BYTES_MAX)}"}\n`;
    const got = await run([long.slice(0, 500_000), long.slice(500_000), '{"type":"status","msg_id":2}\n'], echo);
    expect([got[0]?.code, got[0]?.in_reply_to]).toEqual([MALFORMED, null]);
    expect(got[1]).toEqual({ type: "status_ok", in_reply_to: 2, seen: null });
  });

  test("sends an error's events, and answers a crash rather than hanging", async () => {
    const got = await run(
      ['{"type":"refuse","msg_id":1}\n', '{"type":"boom","msg_id":2}\n', '{"type":"status","msg_id":3}\n'],
      echo,
    );
    expect(got[0]).toEqual({ type: "event", intent_id: "b", state: "failed" });
    expect(got[1]).toEqual({ type: "error", in_reply_to: 1, code: NOT_SUPPORTED, text: "no" });
    expect([got[2]?.code, got[2]?.text]).toEqual([CRASH, "boom: Error: the state is gone"]);
    expect(got[3]?.type).toBe("status_ok");
  });

  test("answers shutdown and ends", async () => {
    const got = await run(['{"type":"shutdown","msg_id":1}\n', '{"type":"status","msg_id":2}\n'], () => [[], {}]);
    expect(got).toEqual([{ type: "shutdown_ok", in_reply_to: 1 }]);
  });
});

test("a line exactly 1 MiB long is read; one byte more is not", async () => {
  const lines = async (text: string) => {
    const got: (number | null)[] = [];
    for await (const line of requestLines(toChunks([text]))) got.push(line === null ? null : line.length);
    return got;
  };
  expect(await lines(`${"x".repeat(LINE_BYTES_MAX)}\nab`)).toEqual([LINE_BYTES_MAX, 2]);
  expect(await lines(`${"x".repeat(LINE_BYTES_MAX + 1)}\nab`)).toEqual([null, 2]);
  expect(await lines("x".repeat(LINE_BYTES_MAX + 1))).toEqual([null]);
});

test("init is checked as the protocol says", () => {
  const init = parseInit({
    protocol: "twice/1",
    worker_id: "w1",
    state_dir: "/tmp/s",
    extra: true,
    services: { payments: { url: "http://127.0.0.1:1", contract: { reads: "strong" } } },
    secrets: { payments_api_key: "sk" },
    limits: { request_timeout_ms: 500 },
  });
  expect([init.workerId, init.stateDir, init.url("payments"), init.url("files")]).toEqual([
    "w1",
    "/tmp/s",
    "http://127.0.0.1:1",
    undefined,
  ]);
  expect(init.contract("payments")).toEqual({ reads: "strong" });
  expect(init.limits).toEqual({ request_timeout_ms: 500 });
  const bad: [JsonObject, number][] = [
    [{ protocol: "twice/2", worker_id: "w", state_dir: "d" }, NOT_SUPPORTED],
    [{ protocol: "twice/1", worker_id: "", state_dir: "d" }, MALFORMED],
    [{ protocol: "twice/1", worker_id: "w" }, MALFORMED],
    [{ protocol: "twice/1", worker_id: "w", state_dir: "d", services: [] }, MALFORMED],
    [{ protocol: "twice/1", worker_id: "w", state_dir: "d", services: { payments: {} } }, MALFORMED],
    [{ protocol: "twice/1", worker_id: "w", state_dir: "d", secrets: { k: 1 } }, MALFORMED],
    [{ protocol: "twice/1", worker_id: "w", state_dir: "d", limits: 5 }, MALFORMED],
  ];
  for (const [request, code] of bad) {
    expect(() => parseInit(request), JSON.stringify(request)).toThrow(expect.objectContaining({ code }));
  }
  expect(parseInit({ protocol: "twice/1", worker_id: "w" }, { stateDirRequired: false }).stateDir).toBeNull();
  expect(() => parseInit({ protocol: "twice/2", worker_id: "w" })).toThrow(
    "protocol 'twice/2' is not supported; this executor speaks twice/1",
  );
});

test("a stray console.log goes to stderr and the protocol keeps stdout", () => {
  // The module as plain JavaScript (it imports only node:fs), run by a child Node.
  const dir = mkdtempSync(join(tmpdir(), "twice-kit-protocol-"));
  try {
    const source = readFileSync(new URL("../src/protocol.ts", import.meta.url), "utf8");
    const compiled = ts.transpileModule(source, {
      compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 },
    });
    writeFileSync(join(dir, "protocol.mjs"), compiled.outputText);
    writeFileSync(
      join(dir, "main.mjs"),
      `import { protocolOutput, serve } from "./protocol.mjs";
const out = protocolOutput();
console.log("a library's chatter");
process.exit(await serve((kind) => { console.log("more chatter from", kind); return [[], { ok: true }]; }, { out }));
`,
    );
    const child = spawnSync(process.execPath, [join(dir, "main.mjs")], {
      input: '{"type":"status","msg_id":1}\n{"type":"shutdown","msg_id":2}\n',
      timeout: 30_000,
    });
    expect(child.status, child.stderr.toString()).toBe(0);
    const lines = child.stdout
      .toString()
      .split("\n")
      .filter((l) => l !== "")
      .map((l) => JSON.parse(l));
    expect(lines).toEqual([
      { type: "status_ok", in_reply_to: 1, ok: true },
      { type: "shutdown_ok", in_reply_to: 2, ok: true },
    ]);
    expect(child.stderr.toString()).toContain("a library's chatter");
    expect(child.stderr.toString()).toContain("more chatter from status");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
