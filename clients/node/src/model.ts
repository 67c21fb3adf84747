/**
 * What serve answers, as typed values (a scenario's description, its steps, the verdict), and
 * what a test sends (claims).
 *
 * Each parsed type keeps the JSON it was read from in `raw`, so a field serve adds later is
 * never out of reach; the typed fields are those a test needs to drive an application. Field
 * names are camelCase; the JSON that is handed back as it came (ledgers, journals, contracts,
 * limits, `raw`) keeps serve's snake_case.
 *
 * @module
 */

/** A JSON object as serve sends it. */
export type JsonObject = Record<string, unknown>;

/** The states a claim may name (`docs/protocol.md` §7 says what each promises). */
export const STATES = ["recorded", "blocked", "submitted", "confirmed", "failed", "unknown", "escalated"] as const;

/** One of `STATES`. */
export type State = (typeof STATES)[number];

/** Whether `value` is one of `STATES`. */
export function isState(value: unknown): value is State {
  return typeof value === "string" && (STATES as readonly string[]).includes(value);
}

/**
 * What the application says of one intent at the end of a test.
 *
 * `id` and `action` must be a scenario intent's; `state` one of `STATES`; `attempts` the sends
 * it made; `evidence` keys, external ids, the last error, as it knows them. `params` and
 * `replaces`, if given, must be the intent's. Unset fields are left out of what is sent.
 */
export interface Claim {
  id: string;
  action: string;
  state: State;
  attempts?: number;
  evidence?: JsonObject;
  params?: JsonObject;
  replaces?: string | null;
}

function asObject(value: unknown): JsonObject {
  return value !== null && typeof value === "object" && !Array.isArray(value) ? (value as JsonObject) : {};
}

function optionalString(value: unknown): string | undefined {
  return value === undefined || value === null ? undefined : String(value);
}

/**
 * One thing the scenario asks the application to do: `action` (`payments.refund`, ...) with
 * `params`; `replaces` names the intent it replaces, where there is lineage. `onEvent`, where
 * there is one, is the webhook that authorises it: the application does the work when that
 * event reaches the endpoint it registered with the payments fake, once however often it
 * arrives, and never for a forged one (docs/webhooks.md).
 */
export interface Intent {
  readonly id: string;
  readonly action: string;
  readonly params: JsonObject;
  readonly replaces?: string;
  readonly onEvent?: Trigger;
}

/** The webhook that authorises an intent (serve's `on_event`). */
export interface Trigger {
  /** `payment_intent.succeeded`. */
  readonly type: string;
  readonly paymentIntent: string;
  /** The payment never happens: an attacker's forged event claims it did. */
  readonly forged: boolean;
}

/** An intent as serve describes it. */
export function parseIntent(value: unknown): Intent {
  const json = asObject(value);
  const intent: { id: string; action: string; params: JsonObject; replaces?: string; onEvent?: Trigger } = {
    id: String(json.id),
    action: String(json.action),
    params: { ...asObject(json.params) },
  };
  const replaces = optionalString(json.replaces);
  if (replaces !== undefined) intent.replaces = replaces;
  if (json.on_event !== undefined && json.on_event !== null) {
    const trigger = asObject(json.on_event);
    intent.onEvent = {
      type: String(trigger.type),
      paymentIntent: String(trigger.payment_intent),
      forged: trigger.forged === true,
    };
  }
  return intent;
}

/** Where a step is: `pending` (its point not reached), `reached` (a request held), `done`. */
export type StepProgress = "pending" | "reached" | "done";

/**
 * One of the scenario's process events, as a step.
 *
 * `do` is `crash`, `pause`, `start_worker`, `reconcile` (the test's, `by === "test"`) or
 * `heal`, `clock_jump` (serve's own). `progress` is `pending`, `reached` or `done`; `how` says
 * in words what to do.
 */
export class Step {
  readonly index: number;
  readonly do: string;
  readonly event: JsonObject;
  /** Its point: `{service, method, path, nth}` for a request point, else as the scenario says. */
  readonly at: unknown;
  /** `test` (the test performs it on the application) or `serve` (serve performs it). */
  readonly by: string;
  readonly serveSeesThePoint: boolean;
  readonly progress: StepProgress;
  readonly how: string;
  /** The request held at its point, once reached (`POST /v1/refunds at payments`). */
  readonly request?: string;
  readonly reachedAtMs?: number;
  readonly raw: JsonObject;

  constructor(value: unknown) {
    const json = asObject(value);
    this.index = Number(json.index);
    this.do = String(json.do);
    this.event = { ...asObject(json.event) };
    this.at = json.at;
    this.by = String(json.by);
    this.serveSeesThePoint = Boolean(json.serve_sees_the_point);
    this.progress = String(json.progress) as StepProgress;
    this.how = String(json.how);
    this.request = optionalString(json.request);
    this.reachedAtMs = typeof json.reached_at_ms === "number" ? json.reached_at_ms : undefined;
    this.raw = json;
  }

  /** The worker the step happens to (`w1`, `w2`), for the test's own steps. */
  get worker(): string | undefined {
    return optionalString(this.event.worker);
  }
}

/**
 * A scenario set up on the fakes: what the application must carry out (`intents`), under which
 * promises (`contracts`, per service) and timing (`limits`, such as `request_timeout_ms`), what
 * a correct application ends with (`expect`: intent id to a state, or to the list of states
 * each honest there), and the `steps` the test performs on the application.
 */
export class Scenario {
  readonly name: string;
  readonly seed: number;
  readonly urls: Record<string, string>;
  readonly contracts: Record<string, JsonObject>;
  readonly limits: JsonObject;
  readonly intents: readonly Intent[];
  readonly expect: Record<string, string | string[]>;
  readonly steps: readonly Step[];
  readonly raw: JsonObject;

  constructor(value: unknown) {
    const json = asObject(value);
    this.name = String(json.name);
    this.seed = Number(json.seed);
    this.urls = Object.fromEntries(
      Object.entries(asObject(json.urls)).filter((entry): entry is [string, string] => typeof entry[1] === "string"),
    );
    this.contracts = Object.fromEntries(Object.entries(asObject(json.contracts)).map(([k, v]) => [k, asObject(v)]));
    this.limits = { ...asObject(json.limits) };
    this.intents = (Array.isArray(json.intents) ? json.intents : []).map(parseIntent);
    this.expect = Object.fromEntries(
      Object.entries(asObject(json.expect)).map(([id, want]) => [
        id,
        Array.isArray(want) ? want.map(String) : String(want),
      ]),
    );
    this.steps = (Array.isArray(json.steps) ? json.steps : []).map((s) => new Step(s));
    this.raw = json;
  }

  /** Whether the scenario accepts `state` for the intent (true where it expects nothing). */
  accepts(intentId: string, state: string): boolean {
    const want = this.expect[intentId];
    if (want === undefined) return true;
    return typeof want === "string" ? want === state : want.includes(state);
  }

  /** The intent with this id; an error naming the scenario's ids otherwise. */
  intent(intentId: string): Intent {
    const found = this.intents.find((i) => i.id === intentId);
    if (found === undefined) {
      const ids = this.intents.map((i) => JSON.stringify(i.id)).join(", ");
      throw new RangeError(`no intent ${JSON.stringify(intentId)} in ${this.name} (its intents: ${ids})`);
    }
    return found;
  }

  /**
   * The request timeout the scenario's timing assumes, in milliseconds (2000 unless its limits
   * say): an application that waits longer for an answer never sees the timeout the scenario
   * is about.
   */
  get requestTimeoutMs(): number {
    const ms = this.limits.request_timeout_ms;
    return typeof ms === "number" ? ms : 2000;
  }

  /** `requestTimeoutMs` in seconds. */
  get requestTimeoutS(): number {
    return this.requestTimeoutMs / 1000;
  }
}

/** How an invariant came out. */
export type VerdictStatus = "held" | "violated" | "not-judged";

/**
 * One thing a fake still had to do, when serve read the ledgers, that could change a ledger.
 * The fields are serve's own (snake_case).
 */
export interface Pending {
  readonly service: string;
  /** `request`, `late-commit`, `delivery`, `pooled-tx`, `queued-tx` or `held-at-step`. */
  readonly what: string;
  /** The request it comes from, as `METHOD path`. */
  readonly request?: string;
  readonly request_id?: string;
  /** Service time when it is due, where the fake knows it. */
  readonly due_ms?: number;
  readonly detail: string;
}

/**
 * How one invariant came out: `status` is `held`, `violated` or `not-judged`; `evidence` has
 * one line per problem, `reason` says why it was not judged.
 */
export interface VerdictLine {
  readonly invariant: string;
  readonly status: VerdictStatus;
  readonly evidence: readonly string[];
  readonly reason?: string;
}

function parseVerdictLine(value: unknown): VerdictLine {
  const json = asObject(value);
  const status = json.status ?? (json.held ? "held" : "violated");
  const line: { invariant: string; status: VerdictStatus; evidence: string[]; reason?: string } = {
    invariant: String(json.invariant),
    status: String(status) as VerdictStatus,
    evidence: (Array.isArray(json.evidence) ? json.evidence : []).map(String),
  };
  const reason = optionalString(json.reason);
  if (reason !== undefined) line.reason = reason;
  return line;
}

/**
 * The verdict on a test's claims, as `twice run` gives it for a run.
 *
 * `exitCode` is `twice check`'s (0 every invariant held, 1 one was violated); `summary` the
 * terminal text; `lines` one `VerdictLine` per invariant; `results` the whole of `results.json`.
 */
export class Verdict {
  readonly exitCode: number;
  readonly held: boolean;
  readonly summary: string;
  readonly lines: readonly VerdictLine[];
  readonly results: JsonObject;

  constructor(value: unknown) {
    const json = asObject(value);
    this.exitCode = Number(json.exit_code);
    this.held = Boolean(json.held);
    this.summary = String(json.summary);
    this.results = asObject(json.results);
    const scenarios = Array.isArray(this.results.results) ? this.results.results : [];
    const verdicts = scenarios.length > 0 ? asObject(scenarios[0]).verdicts : [];
    this.lines = (Array.isArray(verdicts) ? verdicts : []).map(parseVerdictLine);
  }

  /** The invariants violated, in the checker's order. */
  get violated(): string[] {
    return this.lines.filter((line) => line.status === "violated").map((line) => line.invariant);
  }

  /** What serve observed of the scenario's world (`results.json`'s `observed`). */
  get observed(): JsonObject {
    const scenarios = Array.isArray(this.results.results) ? this.results.results : [];
    return scenarios.length > 0 ? asObject(asObject(scenarios[0]).observed ?? {}) : {};
  }

  /** Service time (ms since the Unix epoch) when serve read the ledgers it judged. */
  get ledgersReadAtMs(): number | undefined {
    const at = this.observed.ledgers_read_at_ms;
    return typeof at === "number" ? at : undefined;
  }

  /**
   * What could still change a ledger when serve read them (`service`, `what`: `request`,
   * `late-commit`, `delivery`, `pooled-tx`, `queued-tx` or `held-at-step`, `request`,
   * `request_id`, `due_ms`, `detail`); empty when the world had settled.
   */
  get pending(): Pending[] {
    const pending = this.observed.pending;
    return (Array.isArray(pending) ? pending : []).map((p) => asObject(p) as unknown as Pending);
  }

  /** Whether the world had settled when serve read the ledgers: nothing pending. */
  get settled(): boolean {
    return this.pending.length === 0;
  }

  /**
   * The verdict on one invariant (`no-duplicate-effect`, `honest-terminal-states`, ...); an
   * error naming those there are otherwise.
   */
  line(invariant: string): VerdictLine {
    const found = this.lines.find((line) => line.invariant === invariant);
    if (found === undefined) {
      const there = this.lines.map((line) => line.invariant).join(", ");
      throw new RangeError(`no verdict on ${JSON.stringify(invariant)} (there are: ${there})`);
    }
    return found;
  }
}

/**
 * One effect of a fake's ledger: what really happened there. The fields are serve's own
 * (snake_case); `params` holds the effect's parameters (amount, payment intent, ...).
 */
export interface Effect {
  seq: number;
  at_ms: number;
  kind: string;
  object_id: string;
  params: JsonObject;
  idempotency_key?: string | null;
  fencing_token?: number | null;
  request_id?: string;
  [field: string]: unknown;
}

/**
 * One request a fake received, with the faults applied to it and how it ended (`outcome`:
 * `answered`, `reset`, `closed`, `held`, `abandoned`). Fields as serve names them.
 */
export interface JournalEntry {
  method: string;
  path: string;
  outcome: string;
  replayed?: boolean;
  [field: string]: unknown;
}

/**
 * A fault rule (`docs/faults.md`): what it matches and the fault. `fault` is a fault's name
 * (`"drop_after_commit"`) or `{kind, ...parameters}`.
 */
export interface Rule {
  id?: string;
  method?: string;
  path?: string;
  where?: JsonObject;
  nth?: number;
  times?: number;
  probability?: number;
  fault: string | ({ kind: string } & JsonObject);
  [field: string]: unknown;
}

/** A rule as armed on a fake, with how often it `matched` and `fired`. */
export interface ArmedRule extends Rule {
  id: string;
  matched: number;
  fired: number;
}

/** A fake's clock: its time now, and how far it was jumped. */
export interface Clock {
  now_ms: number;
  jumped_ms: number;
  [field: string]: unknown;
}
