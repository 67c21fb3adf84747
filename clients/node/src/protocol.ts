/**
 * `twice/1` for an executor written in Node: the stdio plumbing every executor repeats.
 *
 * `twice run --executor CMD` starts CMD once per worker and speaks to it in JSON lines: a
 * request per line on stdin, events and one reply per request on stdout (docs/protocol.md).
 * What does not depend on what an executor does lives here, on Node's standard library alone:
 *
 * - `protocolOutput()`: a writer of protocol lines on file descriptor 1, while
 *   `process.stdout` and `console.log` go to stderr, so that a stray `console.log` or a
 *   library's log line can never break the framing;
 * - `ProtocolError` and the error codes of docs/protocol.md §4;
 * - `parseInit()`: an `init` request checked (protocol, worker, state directory, services,
 *   secrets, limits) into an `Init`;
 * - `serve()`: the loop. Each line is read (at most 1 MiB: a longer one is refused and
 *   skipped), parsed and checked for an integer `msg_id`, handed to the handler (awaited before
 *   the next line is looked at), and answered with the handler's events and then its reply,
 *   in order; `shutdown` and the end of input end it.
 *
 * A handler is any function `handle(kind, request) => [events, fields]` (or a promise of it):
 * `fields` are the reply's (its `type` and `in_reply_to` are added), each event an object
 * (`intent_id`, `from`, `state`, `note`, ...). It throws `ProtocolError` for an error reply;
 * any other exception is answered as a crash (code 13), and the loop goes on:
 *
 * ```ts
 * import { NOT_SUPPORTED, ProtocolError, parseInit, protocolOutput, serve } from "twice-kit/protocol";
 *
 * const out = protocolOutput();
 * await serve((kind, request) => {
 *   if (kind === "init") {
 *     parseInit(request);
 *     return [[], { executor: { name: "mine", version: "1" }, actions: ["payments.refund"] }];
 *   }
 *   if (kind === "shutdown") return [[], {}];
 *   throw new ProtocolError(NOT_SUPPORTED, `unknown request type ${JSON.stringify(kind)}`);
 * }, { out });
 * ```
 *
 * This mirrors the Python kit's `twice.protocol`.
 *
 * @module
 */

import { writeSync } from "node:fs";

/** `drain` ran out of time with intents unresolved (indefinite). */
export const TIMEOUT = 0;
/** An unknown request type, another protocol version, an action not announced (definite). */
export const NOT_SUPPORTED = 10;
/** A request before `init` (definite). */
export const UNAVAILABLE = 11;
/** Not JSON, not an object, no integer `msg_id`, a line over 1 MiB, a bad field (definite). */
export const MALFORMED = 12;
/** The executor failed inside (indefinite). */
export const CRASH = 13;
/** `propose` of an id already recorded with another action or payload (definite). */
export const EXISTS = 21;

/** The longest request line read, not counting its newline (docs/protocol.md §1). */
export const LINE_BYTES_MAX = 1_048_576;

/** A JSON object, as requests, replies and events are. */
export type JsonObject = { [key: string]: unknown };
/** An event (`intent_id`, `from`, `state`, `note`); `type` is added when it is written. */
export type Event = JsonObject;
/** A reply's own fields; `type` and `in_reply_to` are added when it is written. */
export type Fields = JsonObject;
/** What a handler answers: the events to send first, then the reply's fields. */
export type Answer = [events: Event[], fields: Fields];
/** Answers one request (of type `kind`), or throws `ProtocolError` for an error reply. */
export type Handler = (kind: string, request: JsonObject) => Answer | Promise<Answer>;

/** Where protocol lines go: anything with a `write(text)` (a stream, `protocolOutput()`). */
export interface LineOutput {
  write(text: string): unknown;
}

/**
 * An error reply: `code` and `text`, and the events to send before it (a `drain` that made
 * progress and then failed says what it did).
 */
export class ProtocolError extends Error {
  override readonly name = "ProtocolError";
  readonly events: Event[];

  constructor(
    readonly code: number,
    readonly text: string,
    events: Iterable<Event> = [],
  ) {
    super(text);
    this.events = [...events];
  }
}

/** A service as `init` configures it: its base URL and what it promises. */
export interface ServiceConfig {
  url: string;
  contract?: JsonObject;
  [key: string]: unknown;
}

/** An `init` request, checked. `services` maps a service to its `url` and `contract`. */
export class Init {
  constructor(
    readonly workerId: string,
    readonly stateDir: string | null,
    readonly services: Record<string, ServiceConfig>,
    readonly secrets: Record<string, string>,
    readonly limits: JsonObject,
    readonly request: JsonObject = {},
  ) {}

  /** The base URL of `service`, or undefined when `init` did not configure it. */
  url(service: string): string | undefined {
    return this.services[service]?.url;
  }

  /** What `service` promises (every term optional; docs/protocol.md §3.1). */
  contract(service: string): JsonObject {
    return { ...(this.services[service]?.contract ?? {}) };
  }
}

/** Whether `value` is a JSON object (not an array, not null). */
export function isObject(value: unknown): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** `value` as Python's `repr` would quote it in a message, so that texts match the Python kit's. */
export function repr(value: unknown): string {
  if (value === undefined || value === null) return "None";
  if (typeof value === "string") {
    return value.includes("'") && !value.includes('"') ? `"${value}"` : `'${value.replaceAll("'", "\\'")}'`;
  }
  if (typeof value === "boolean") return value ? "True" : "False";
  return JSON.stringify(value);
}

/**
 * Checks an `init` request as docs/protocol.md §3.1 says, throwing `ProtocolError` (10 for
 * another protocol, 12 for anything malformed); unknown top-level fields are ignored.
 */
export function parseInit(request: JsonObject, options: { stateDirRequired?: boolean } = {}): Init {
  if (request.protocol !== "twice/1") {
    throw new ProtocolError(
      NOT_SUPPORTED,
      `protocol ${repr(request.protocol)} is not supported; this executor speaks twice/1`,
    );
  }
  const workerId = request.worker_id;
  if (typeof workerId !== "string" || workerId === "") {
    throw new ProtocolError(MALFORMED, "init: worker_id must be a non-empty string");
  }
  const stateDir = request.state_dir ?? null;
  if (stateDir !== null && (typeof stateDir !== "string" || stateDir === "")) {
    throw new ProtocolError(MALFORMED, "init: state_dir must be a non-empty string");
  }
  if (stateDir === null && (options.stateDirRequired ?? true)) {
    throw new ProtocolError(MALFORMED, "init: no state_dir");
  }
  const services = objectField(request, "services");
  for (const [name, service] of Object.entries(services)) {
    if (!isObject(service) || typeof service.url !== "string") {
      throw new ProtocolError(MALFORMED, `init: services.${name} must be an object with a string url`);
    }
    if (service.contract !== undefined && !isObject(service.contract)) {
      throw new ProtocolError(MALFORMED, `init: services.${name}.contract must be an object`);
    }
  }
  const secrets = objectField(request, "secrets");
  if (!Object.values(secrets).every((v) => typeof v === "string")) {
    throw new ProtocolError(MALFORMED, "init: secrets must be an object of strings");
  }
  const limits = objectField(request, "limits");
  return new Init(
    workerId,
    stateDir,
    services as Record<string, ServiceConfig>,
    secrets as Record<string, string>,
    limits,
    request,
  );
}

/** An optional object field of `init`: absent or null is `{}`, anything but an object is 12. */
function objectField(request: JsonObject, name: string): JsonObject {
  const value = request[name];
  if (value === undefined || value === null) return {};
  if (!isObject(value)) throw new ProtocolError(MALFORMED, `init: ${name} must be an object`);
  return value;
}

/**
 * Protocol lines written straight to file descriptor 1, synchronously: a reply is on its way
 * before the next request is read, and a process that exits right after `shutdown_ok` loses
 * nothing (a stream's buffer would).
 */
class FdOutput implements LineOutput {
  constructor(private readonly fd: number) {}

  write(text: string): void {
    let buffer = Buffer.from(text, "utf8");
    while (buffer.length > 0) {
      try {
        buffer = buffer.subarray(writeSync(this.fd, buffer));
      } catch (error) {
        // A non-blocking pipe that is full: wait for the reader rather than lose the line.
        if ((error as NodeJS.ErrnoException).code !== "EAGAIN") throw error;
        Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 5);
      }
    }
  }
}

/**
 * A writer of protocol lines on file descriptor 1; `process.stdout` (and so `console.log`,
 * `console.info`) then goes to stderr, so that only protocol lines reach stdout. Call it
 * before importing libraries that may print, and start children with their stdout on fd 2.
 */
export function protocolOutput(): LineOutput {
  // Node has no dup2: the stdout stream is replaced before anything opens it, so that it
  // never makes fd 1 non-blocking and every `console.log` lands on stderr instead.
  Object.defineProperty(process, "stdout", {
    configurable: true,
    enumerable: true,
    get: () => process.stderr,
  });
  return new FdOutput(1);
}

/** `value` with every object's keys sorted, as the Python kit writes its lines. */
function sortedKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortedKeys);
  if (!isObject(value)) return value;
  const out: JsonObject = {};
  for (const key of Object.keys(value).sort()) out[key] = sortedKeys(value[key]);
  return out;
}

/** Writes one protocol line, keys sorted. Events may be written this way before the reply. */
export function emit(out: LineOutput, message: JsonObject): void {
  out.write(`${JSON.stringify(sortedKeys(message))}\n`);
}

/**
 * Each request line of `input` without its newline, or null for a line over
 * `LINE_BYTES_MAX` (never held in memory beyond that, and skipped up to its newline).
 */
export async function* requestLines(input: AsyncIterable<Buffer | string>): AsyncGenerator<Buffer | null> {
  let parts: Buffer[] = [];
  let size = 0;
  let skipping = false;
  for await (const chunk of input) {
    let rest = typeof chunk === "string" ? Buffer.from(chunk, "utf8") : chunk;
    while (rest.length > 0) {
      const newline = rest.indexOf(0x0a);
      const piece = newline === -1 ? rest : rest.subarray(0, newline);
      if (!skipping && size + piece.length > LINE_BYTES_MAX) {
        skipping = true;
        parts = [];
        size = 0;
      }
      if (!skipping) {
        parts.push(piece);
        size += piece.length;
      }
      if (newline === -1) break;
      rest = rest.subarray(newline + 1);
      yield skipping ? null : Buffer.concat(parts, size);
      parts = [];
      size = 0;
      skipping = false;
    }
  }
  if (skipping) yield null;
  else if (size > 0) yield Buffer.concat(parts, size); // the last line, without a newline
}

const UTF8 = new TextDecoder("utf-8", { fatal: true });
/** A line of ASCII whitespace only, which is skipped (as Python's `bytes.strip` sees it). */
const BLANK = /^[ \t\n\r\v\f]*$/;

/** The `in_reply_to` of a request whose `msg_id` is unusable: the value if it is an id at all. */
function replyTo(msgId: unknown): number | string | null {
  if (typeof msgId === "string" || (typeof msgId === "number" && Number.isInteger(msgId))) return msgId;
  return null;
}

/** A line as a request, or the error reply it gets instead. */
function parseRequest(line: Buffer): { request: JsonObject } | { error: JsonObject } {
  const refuse = (text: string, inReplyTo: unknown = null) => ({
    error: { type: "error", in_reply_to: inReplyTo, code: MALFORMED, text },
  });
  let request: unknown;
  try {
    request = JSON.parse(UTF8.decode(line));
  } catch (error) {
    return refuse(`not JSON: ${(error as Error).message}`);
  }
  if (!isObject(request)) return refuse("a request is a JSON object");
  const msgId = request.msg_id;
  if (typeof msgId !== "number" || !Number.isInteger(msgId) || msgId < 0) {
    return refuse("a request needs a numeric msg_id", replyTo(msgId));
  }
  if (typeof request.type !== "string") return refuse("a request needs a string type", msgId);
  return { request };
}

/** The events and reply of one request: the handler's, its refusal, or a crash (13). */
async function answer(handle: Handler, request: JsonObject): Promise<[Event[], JsonObject]> {
  const kind = request.type as string;
  const msgId = request.msg_id;
  try {
    const [events, fields] = await handle(kind, request);
    return [events, { ...fields, type: `${kind}_ok`, in_reply_to: msgId }];
  } catch (error) {
    if (error instanceof ProtocolError) {
      return [error.events, { type: "error", in_reply_to: msgId, code: error.code, text: error.text }];
    }
    // An executor's fault is a reply, never a hang: the loop goes on.
    process.stderr.write(`${(error as Error)?.stack ?? String(error)}\n`);
    const what = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    return [[], { type: "error", in_reply_to: msgId, code: CRASH, text: `${kind}: ${what}` }];
  }
}

/**
 * Answers requests from `input` (default: this process's stdin) with `handle` on `out`
 * (default: `process.stdout`) until `shutdown` or the end of input; resolves to 0, the exit
 * code for both. Requests are answered one at a time, in order.
 */
export async function serve(
  handle: Handler,
  options: { input?: AsyncIterable<Buffer | string>; out?: LineOutput } = {},
): Promise<number> {
  const input = options.input ?? process.stdin;
  const out = options.out ?? process.stdout;
  for await (const line of requestLines(input)) {
    if (line === null) {
      emit(out, {
        type: "error",
        in_reply_to: null,
        code: MALFORMED,
        text: `a request line is over ${LINE_BYTES_MAX} bytes`,
      });
      continue;
    }
    if (BLANK.test(line.toString("latin1"))) continue;
    const parsed = parseRequest(line);
    if ("error" in parsed) {
      emit(out, parsed.error);
      continue;
    }
    const [events, reply] = await answer(handle, parsed.request);
    for (const event of events) emit(out, { ...event, type: "event" });
    emit(out, reply);
    if (reply.type === "shutdown_ok") break;
  }
  return 0;
}
