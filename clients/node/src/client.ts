/**
 * The client of a running `twice serve`: its control endpoint (scenario, steps, check, reset)
 * and each fake's own control API (rules, seeds, clock, ledger, journal).
 *
 * Everything is HTTP on loopback with Node's global `fetch`, so the client needs no dependency;
 * every request has a timeout (`AbortSignal.timeout`) and every wait a bound.
 *
 * @module
 */

import { readFile, stat } from "node:fs/promises";
import { resolve as resolvePath } from "node:path";
import { fileURLToPath } from "node:url";

import { TwiceError, TwiceHTTPError, TwiceTimeout, TwiceUnsettled, TwiceViolation } from "./errors.js";
import {
  type ArmedRule,
  type Claim,
  type Clock,
  type Effect,
  type JournalEntry,
  type JsonObject,
  type Rule,
  Scenario,
  Step,
  Verdict,
} from "./model.js";

/** How long one control request may take before the client gives up on it. */
export const REQUEST_TIMEOUT_MS_DEFAULT = 30_000;
/** How long `waitStep` waits for a step's point when the caller does not say, in seconds. */
export const STEP_WAIT_S_DEFAULT = 30;
/**
 * How long `waitWebhooks` waits by default: past the payments fake's last retry (1 + 2 + 4 s
 * after a first attempt that waited up to 10 s for an answer).
 */
export const WEBHOOKS_WAIT_S_DEFAULT = 30;
/**
 * The longest serve holds one long poll of `GET /__twice/steps/N` (its `STEP_WAIT_MS_MAX`);
 * a longer wait asks again.
 */
const STEP_POLL_MS_MAX = 60_000;
/** Extra time a long poll's request gets beyond what serve was asked to wait. */
const POLL_SLACK_MS = 5_000;
/**
 * The longest serve's check waits for the world to settle before it judges (its
 * `SETTLE_WAIT_MS_MAX`: the longest settle bound a scenario may announce, plus a margin); a
 * check's request may take that long beyond the client's own timeout.
 */
export const CHECK_SETTLE_WAIT_MS_MAX = 1_201_000;

/**
 * `twice check`'s exit code for a check asked not to wait that found nothing violated in a
 * world still unsettled: no verdict yet.
 */
export const EXIT_UNSETTLED = 3;

/** Options of `Twice.check`. */
export interface CheckOptions {
  /**
   * Throw `TwiceViolation` when an invariant was violated, and `TwiceUnsettled` when none was
   * but the check did not wait and the world had not settled (default true).
   */
  raiseOnViolation?: boolean;
  /**
   * Wait for the world to settle before judging (default true); `false` judges at once, and a
   * verdict judged with something still pending says so.
   */
  wait?: boolean;
}

/** A funded account of serve's dev chain, from the URLs file's `accounts` entry. */
export interface Account {
  readonly address: string;
  readonly privateKey: string;
  readonly balanceWei: bigint;
}

/**
 * The serve a client was started with, when the kit started it (`twiceServe`): its process id,
 * the end of its output, and how to stop it.
 */
export interface ServeHandle {
  readonly pid: number | undefined;
  readonly workdir: string;
  logTail(): Promise<string>;
  stop(): Promise<number | null>;
}

/** Options of a `Twice` client. */
export interface TwiceOptions {
  /** How long one control request may take; 30 000 ms unless given. */
  requestTimeoutMs?: number;
}

/**
 * A client of one `twice serve`, given what it wrote to `--urls-file`.
 *
 * `urls` holds each service's base URL (`payments`, `workspaces`, `files`, `chain`,
 * `messages`) and `control`, serve's own endpoint. Point the application's SDK at
 * `url("payments")` and the like; drive the world through the methods below.
 */
export class Twice implements AsyncDisposable {
  /** Every URL serve wrote: the services' and `control`, without a trailing slash. */
  readonly urls: Readonly<Record<string, string>>;
  /** The dev chain's funded accounts (empty when serve wrote none). */
  readonly accounts: readonly Account[];
  readonly requestTimeoutMs: number;
  /**
   * The serve this client was started with, when the kit started it (`twiceServe`, the
   * fixtures); undefined for a serve started elsewhere.
   */
  serve: ServeHandle | undefined;

  /**
   * A client of the serve whose URLs file says `urls`: each string value is a URL, `accounts`
   * the chain's funded accounts, and any other entry is left alone (a newer serve may write
   * more than this kit knows).
   */
  constructor(urls: Readonly<Record<string, unknown>>, options: TwiceOptions = {}) {
    const strings: Record<string, string> = {};
    for (const [name, value] of Object.entries(urls)) {
      if (typeof value === "string") strings[name] = value.replace(/\/+$/, "");
    }
    if (strings.control === undefined) {
      throw new TwiceError(
        `the URLs have no 'control' entry (${Object.keys(urls).sort().join(", ")}): ` +
          "they must be what `twice serve --urls-file` writes",
      );
    }
    this.urls = Object.freeze(strings);
    this.accounts = Object.freeze(parseAccounts(urls.accounts));
    this.requestTimeoutMs = options.requestTimeoutMs ?? REQUEST_TIMEOUT_MS_DEFAULT;
    this.serve = undefined;
  }

  /** A client of the serve that wrote `path` (`twice serve --urls-file PATH`). */
  static async fromUrlsFile(path: string | URL, options: TwiceOptions = {}): Promise<Twice> {
    const file = path instanceof URL ? fileURLToPath(path) : path;
    let text: string;
    try {
      text = await readFile(file, "utf8");
    } catch (error) {
      throw new TwiceError(`cannot read the URLs file ${file}: ${describe(error)}`, { cause: error });
    }
    let urls: unknown;
    try {
      urls = JSON.parse(text);
    } catch (error) {
      throw new TwiceError(`${file}: not JSON (${describe(error)})`, { cause: error });
    }
    if (urls === null || typeof urls !== "object" || Array.isArray(urls)) {
      throw new TwiceError(`${file}: expected a JSON object of URLs, got ${Array.isArray(urls) ? "an array" : typeof urls}`);
    }
    return new Twice(urls as Record<string, unknown>, options);
  }

  // -- URLs -----------------------------------------------------------------------------

  /** Serve's own control endpoint. */
  get control(): string {
    return this.urls.control as string;
  }

  /** The base URL of `service` (`payments`, `workspaces`, `files`, `chain`, `messages`). */
  url(service: string): string {
    const found = Object.hasOwn(this.urls, service) ? this.urls[service] : undefined;
    if (found === undefined) {
      const known = Object.keys(this.urls)
        .filter((name) => name !== "control")
        .sort()
        .join(", ");
      throw new TwiceError(`no service ${JSON.stringify(service)} (serve has: ${known})`);
    }
    return found;
  }

  /** `GET /__twice/health` of serve: `{"service": "serve", "ok": true, "urls"}`. */
  health(): Promise<JsonObject> {
    return this.request("GET", `${this.control}/__twice/health`) as Promise<JsonObject>;
  }

  // -- Scenario -------------------------------------------------------------------------

  /**
   * Sets up a scenario's world on every fake (after resetting them) and returns its
   * description: intents to carry out, contracts, limits, steps.
   *
   * `scenario` is a catalog name (`"lost_refund_reply"`), a path to a scenario file (a file
   * `URL`, or a string ending in `.toml`), or a scenario's TOML text (a string with a
   * newline). When the kit started serve itself (`twiceServe`, the fixtures), a file is posted
   * as its absolute path; otherwise its text is posted (serve may not see this machine's disk)
   * with the path as its origin. Either way the verdict's replay line names it. TOML text is
   * kept by serve in a file of its own, which the replay line names.
   */
  async loadScenario(scenario: string | URL): Promise<Scenario> {
    let body: Record<string, string>;
    if (scenario instanceof URL || (!scenario.includes("\n") && scenario.endsWith(".toml"))) {
      const path = scenario instanceof URL ? fileURLToPath(scenario) : resolvePath(scenario);
      if (this.serve !== undefined) {
        const isFile = await stat(path).then(
          (s) => s.isFile(),
          () => false,
        );
        if (!isFile) throw new TwiceError(`no scenario file ${path}`);
        body = { file: path };
      } else {
        let toml: string;
        try {
          toml = await readFile(path, "utf8");
        } catch (error) {
          throw new TwiceError(`cannot read the scenario file ${path}: ${describe(error)}`, { cause: error });
        }
        body = { toml, origin: path };
      }
    } else if (scenario.includes("\n")) {
      body = { toml: scenario };
    } else {
      body = { name: scenario };
    }
    return new Scenario(await this.request("POST", `${this.control}/__twice/scenario`, body));
  }

  /** The scenario set up now, with its steps as they are (`GET /__twice/scenario`). */
  async scenario(): Promise<Scenario> {
    return new Scenario(await this.request("GET", `${this.control}/__twice/scenario`));
  }

  /**
   * Resets every fake (state, rules, ledgers, journals, keys, contracts), forgets the scenario
   * and lets go of every held request.
   */
  async reset(): Promise<void> {
    await this.request("POST", `${this.control}/__twice/reset`);
  }

  // -- Steps ----------------------------------------------------------------------------

  /** The scenario's steps as they are now. */
  async steps(): Promise<Step[]> {
    const answer = await this.request("GET", `${this.control}/__twice/steps`);
    return (Array.isArray(answer) ? answer : []).map((s) => new Step(s));
  }

  /**
   * Step `n` once its point is reached (or it is done), waiting at most `timeoutS` seconds.
   *
   * At a request point the request that reached it is held unanswered until `stepDone(n)`.
   * Throws `TwiceTimeout`, with the step's own words on what reaches it, if the point is not
   * reached in time.
   */
  async waitStep(n: number, timeoutS: number = STEP_WAIT_S_DEFAULT): Promise<Step> {
    const deadline = performance.now() + timeoutS * 1000;
    for (;;) {
      const waitMs = Math.min(STEP_POLL_MS_MAX, Math.max(0, Math.floor(deadline - performance.now())));
      const answer = await this.request("GET", `${this.control}/__twice/steps/${n}?wait_ms=${waitMs}`, undefined, {
        timeoutMs: waitMs + POLL_SLACK_MS,
      });
      const step = new Step(answer);
      if (step.progress !== "pending") return step;
      if (performance.now() >= deadline) {
        throw new TwiceTimeout(
          `step ${n} (${step.do}) still pending after ${timeoutS} s: its point ` +
            `${JSON.stringify(step.at)} was not reached. The step says: ${step.how}`,
        );
      }
    }
  }

  /**
   * Tells serve the test performed step `n`: serve applies it if it is serve's own and lets go
   * of the request held at its point.
   */
  async stepDone(n: number): Promise<Step> {
    return new Step(await this.request("POST", `${this.control}/__twice/steps/${n}/done`));
  }

  // -- Verdict --------------------------------------------------------------------------

  /**
   * Judges what the application claims against the fakes' ledgers and journals.
   *
   * Serve judges once the world has settled, as `twice run` does: it first waits until no
   * fake has anything left that could change a ledger by itself (a request still being
   * worked on, a late commit, a delivery still due, a transaction a block will take), at most
   * the scenario's settle bound plus a margin, and `verdict.ledgersReadAtMs` says when it read
   * them. A request held at a step the test never said it performed cannot settle without the
   * test: the verdict is then a single `world-unsettled`, violated, naming the step and how to
   * release it. `{ wait: false }` judges at once; a verdict judged with something still
   * pending says so (`verdict.settled` is false, `verdict.pending` lists what, and the summary
   * says "judged before the world settled").
   *
   * Returns the verdict when every invariant held on a settled world. When one was violated,
   * throws `TwiceViolation` whose message is the verdict's summary; when none was but the world
   * had not settled (`{ wait: false }` with something pending: `exitCode` 3), throws
   * `TwiceUnsettled`: no verdict yet. Neither is thrown when `raiseOnViolation` is false. A
   * claim serve refuses (an unknown intent, a misspelt state) throws `TwiceHTTPError` naming
   * the field and the value.
   */
  async check(claims: Iterable<Claim>, options: CheckOptions = {}): Promise<Verdict> {
    const body = { claims: Array.from(claims, claimJson) };
    const wait = options.wait ?? true;
    const url = `${this.control}/__twice/check${wait ? "" : "?wait=false"}`;
    const timeoutMs = this.requestTimeoutMs + (wait ? CHECK_SETTLE_WAIT_MS_MAX : 0);
    const verdict = new Verdict(await this.request("POST", url, body, { timeoutMs }));
    const raise = options.raiseOnViolation ?? true;
    if (raise && !verdict.held) throw new TwiceViolation(verdict);
    if (raise && verdict.exitCode === EXIT_UNSETTLED) throw new TwiceUnsettled(verdict);
    return verdict;
  }

  // -- Each fake's control API ----------------------------------------------------------

  /**
   * Arms one fault rule (or a list) on `service`; returns the rule ids. The rule format is
   * `docs/faults.md`'s: `{method, path, where, nth, times, probability, fault}`.
   */
  async addRule(service: string, rule: Rule | readonly Rule[]): Promise<string[]> {
    const answer = (await this.request("POST", `${this.url(service)}/__twice/rules`, rule)) as { ids: unknown[] };
    return answer.ids.map(String);
  }

  /** The rules armed on `service`, each with how often it `matched` and `fired`. */
  async rules(service: string): Promise<ArmedRule[]> {
    const answer = (await this.request("GET", `${this.url(service)}/__twice/rules`)) as { rules: ArmedRule[] };
    return answer.rules;
  }

  /** Disarms every rule on `service`, or only `ruleId`. */
  async clearRules(service: string, ruleId?: string): Promise<void> {
    const suffix = ruleId === undefined ? "" : `/${encodeURIComponent(ruleId)}`;
    await this.request("DELETE", `${this.url(service)}/__twice/rules${suffix}`);
  }

  /**
   * Seeds `service`: payments `{payment_intents: [{id, amount, currency}]}`, files
   * `{buckets, objects}`, chain `{accounts, chain_id, block_time_ms}`. Returns what was seeded.
   */
  async seed(service: string, body: JsonObject): Promise<JsonObject> {
    return (await this.request("POST", `${this.url(service)}/__twice/seed`, body)) as JsonObject;
  }

  /** `{now_ms, jumped_ms}` of `service`'s clock. */
  async clock(service: string): Promise<Clock> {
    return (await this.request("GET", `${this.url(service)}/__twice/clock`)) as Clock;
  }

  /** Moves `service`'s clock `ms` forward (time never moves back); returns the clock. */
  async jumpClock(service: string, ms: number): Promise<Clock> {
    if (!Number.isInteger(ms) || ms < 0) {
      throw new TwiceError(`jumpClock: ${ms} ms is negative or not whole; a service's time never moves back`);
    }
    return (await this.request("POST", `${this.url(service)}/__twice/clock/jump`, { by_ms: ms })) as Clock;
  }

  /** The contract `service` keeps now. */
  async contract(service: string): Promise<JsonObject> {
    return (await this.request("GET", `${this.url(service)}/__twice/contract`)) as JsonObject;
  }

  /**
   * The payments fake's webhooks: `secrets` (endpoint id to its `whsec_` secret),
   * `deliveries` (each event to each endpoint, with its `standing`: `due`, `sending`,
   * `delivered`, `gave_up`, `endpoint_gone`, `refused`), `attempts`, and the
   * `awaiting_payments` a scenario makes once the application listens.
   */
  async webhooks(): Promise<JsonObject> {
    return (await this.request("GET", `${this.url("payments")}/__twice/webhooks`)) as JsonObject;
  }

  /**
   * Waits until the payments fake owes no webhook: every payment the application listens for
   * has been made, and every delivery has ended (answered 2xx, given up, or refused). Call it
   * before reading the application's record for its claims. Throws `TwiceTimeout` after
   * `timeoutS`, naming what is still owed.
   */
  async waitWebhooks(timeoutS: number = WEBHOOKS_WAIT_S_DEFAULT): Promise<JsonObject> {
    const deadline = Date.now() + timeoutS * 1000;
    for (;;) {
      const report = await this.webhooks();
      const payments = (report.awaiting_payments ?? []) as JsonObject[];
      const deliveries = (report.deliveries ?? []) as JsonObject[];
      const owed = [
        ...payments.filter((p) => p.due_ms !== null && p.due_ms !== undefined),
        ...deliveries.filter((d) => d.standing === "due" || d.standing === "sending"),
      ];
      if (owed.length === 0) return report;
      if (Date.now() >= deadline) {
        throw new TwiceTimeout(`the payments fake still owes webhooks after ${timeoutS} s: ${JSON.stringify(owed)}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }

  /**
   * What really happened at `service`: its effects, in order (`seq`, `at_ms`, `kind`,
   * `object_id`, `params`, `idempotency_key`, `fencing_token`, `request_id`).
   */
  async ledger(service: string): Promise<Effect[]> {
    const answer = (await this.request("GET", `${this.url(service)}/__twice/ledger`)) as { effects: Effect[] };
    return answer.effects;
  }

  /**
   * The newest requests `service` received, with the faults applied to each and how each
   * ended (`answered`, `reset`, `closed`, `held`, `abandoned`).
   */
  async journal(service: string): Promise<JournalEntry[]> {
    const answer = (await this.request("GET", `${this.url(service)}/__twice/journal`)) as { entries: JournalEntry[] };
    return answer.entries;
  }

  // -- The serve behind it ---------------------------------------------------------------

  /**
   * Stops the serve this client was started with (SIGTERM, then SIGKILL after 5 s); returns
   * its exit code. Does nothing for a serve started elsewhere. Idempotent.
   */
  async stop(): Promise<number | null> {
    return this.serve === undefined ? null : this.serve.stop();
  }

  /** `await using twice = await twiceServe()` stops serve at the end of the block. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }

  // -- HTTP -----------------------------------------------------------------------------

  private async request(
    method: string,
    url: string,
    body?: unknown,
    options: { timeoutMs?: number } = {},
  ): Promise<unknown> {
    const timeoutMs = options.timeoutMs ?? this.requestTimeoutMs;
    const init: RequestInit = { method, signal: AbortSignal.timeout(timeoutMs) };
    if (body !== undefined) {
      init.body = JSON.stringify(body);
      init.headers = { "Content-Type": "application/json" };
    }
    let status: number;
    let text: string;
    try {
      // The body is read under the same signal: a reply that stalls half-way is bounded too.
      const response = await fetch(url, init);
      status = response.status;
      text = await response.text();
    } catch (error) {
      if (isTimeout(error)) {
        throw new TwiceTimeout(
          `${method} ${url}: no answer within ${timeoutMs / 1000} s (is \`twice serve\` running, and are these its URLs?)`,
          { cause: error },
        );
      }
      throw new TwiceError(
        `${method} ${url}: ${describeFetchError(error)} (is \`twice serve\` running, and are these its URLs?)`,
        { cause: error },
      );
    }
    if (status < 200 || status >= 300) throw new TwiceHTTPError(method, url, status, errorMessage(text, status));
    if (text.trim() === "") return null;
    try {
      return JSON.parse(text) as unknown;
    } catch {
      throw new TwiceError(`${method} ${url}: expected JSON, got ${JSON.stringify(text.slice(0, 200))}`);
    }
  }
}

/** A claim as serve reads it: its fields without the unset ones. */
export function claimJson(claim: Claim): JsonObject {
  if (claim === null || typeof claim !== "object") {
    throw new TypeError(`a claim is an object ({id, action, state, ...}), not ${claim === null ? "null" : typeof claim}`);
  }
  const out: JsonObject = {};
  for (const [name, value] of Object.entries(claim)) {
    if (value !== undefined) out[name] = value;
  }
  return out;
}

/**
 * The URLs file's `accounts`: an array of `{address, private_key, balance_wei}`, or nothing.
 * Like the rest of the file, read leniently: an entry this kit cannot read is left out rather
 * than failing every test (a newer serve may write more than this kit knows).
 */
function parseAccounts(value: unknown): Account[] {
  if (!Array.isArray(value)) return [];
  const accounts: Account[] = [];
  for (const entry of value as unknown[]) {
    if (entry === null || typeof entry !== "object") continue;
    const { address, private_key: privateKey, balance_wei: balance } = entry as Record<string, unknown>;
    if (typeof address !== "string" || typeof privateKey !== "string") continue;
    if (typeof balance !== "string" && typeof balance !== "number") continue;
    try {
      accounts.push({ address, privateKey, balanceWei: BigInt(balance) });
    } catch {
      // not a whole number: left out
    }
  }
  return accounts;
}

/** The `{"error": {"message"}}` of serve and the fakes, or the body as it came. */
function errorMessage(text: string, status: number): string {
  try {
    const message = (JSON.parse(text) as { error?: { message?: unknown } }).error?.message;
    if (message !== undefined) return String(message);
  } catch {
    // not JSON: the body as it came
  }
  return text.slice(0, 500) || `HTTP ${status}`;
}

function isTimeout(error: unknown): boolean {
  return error instanceof Error && (error.name === "TimeoutError" || error.name === "AbortError");
}

/** What `fetch` says went wrong: its `TypeError("fetch failed")` hides the cause. */
function describeFetchError(error: unknown): string {
  const cause = error instanceof Error ? error.cause : undefined;
  return describe(cause ?? error);
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
