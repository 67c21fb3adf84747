/**
 * The durable intent log: one SQLite file, `intents.sqlite`, in the state directory.
 *
 * Several workers (processes) share the file, so:
 *
 * - WAL mode, so that readers never wait for the writer;
 * - `synchronous=FULL`, so that a commit survives power loss, not only a crash: `propose_ok`
 *   and every "submitted" promise durability (docs/protocol.md §8);
 * - a busy timeout, so that a writer waits for another process's transaction instead of
 *   failing at once;
 * - every write is conditional on the row's `version` (compare-and-set), so that a worker
 *   whose view is stale (it was paused, another worker took over) changes nothing;
 * - writes begin with `BEGIN IMMEDIATE`: the write lock is taken first, so a transaction never
 *   fails half-way when it tries to upgrade a read lock another process's commit made stale.
 *
 * better-sqlite3 is synchronous: a transaction runs start to end without yielding to the event
 * loop, so the concurrent turns of one pass can never interleave inside one.
 *
 * A transfer's nonce is claimed in the `nonces` table in the same transaction as the row that
 * records its signed bytes: one nonce, one intent, however many workers sign.
 */

import Database from "better-sqlite3";
import * as bugs from "./bugs";

/** How long a writer waits for another process's lock before the write fails. */
export const BUSY_TIMEOUT_MS = 5_000;

/** States in which an intent is not finished. */
export const ACTIVE_STATES = ["recorded", "blocked", "submitted", "unknown"] as const;

export type Evidence = Record<string, unknown>;

/** One row of the log. */
export interface Intent {
  id: string;
  action: string;
  params: string; // canonical JSON, exactly as recorded
  paramsHash: string;
  key: string; // the idempotency key in use
  state: string;
  attempts: number; // write requests sent, over the intent's whole life
  replaces: string | null;
  evidence: Evidence;
  // An earlier send may have taken effect (its answer was lost or ambiguous), so a definite
  // refusal of a later send does not prove that nothing happened.
  maybeExecuted: boolean;
  leaseOwner: string | null; // "worker_id#incarnation"
  leaseEpoch: number; // grows with every new owner; it is also the fencing token
  leaseUntilMs: number;
  version: number; // every write is conditional on it
  createdMs: number;
  updatedMs: number;
  keyFirstSentMs: number | null; // the key's retention runs from about then
  lastSentMs: number | null;
  // The intents this one comes after (a step of a workflow): authorised with the parameters,
  // covered by the payload hash, never changed. The values its references resolved to are
  // evidence.resolved, written with its first "submitted" and kept by every later write.
  afterIds: string[];
}

export function newIntent(fields: Partial<Intent> & Pick<Intent, "id" | "action" | "params" | "paramsHash" | "key" | "state">): Intent {
  return {
    attempts: 0,
    replaces: null,
    evidence: {},
    maybeExecuted: false,
    leaseOwner: null,
    leaseEpoch: 0,
    leaseUntilMs: 0,
    version: 0,
    createdMs: 0,
    updatedMs: 0,
    keyFirstSentMs: null,
    lastSentMs: null,
    afterIds: [],
    ...fields,
  };
}

/**
 * An intent waiting for its event (docs/protocol.md §3.2, "Intents an event starts"): its id,
 * the event, and the proposal that arms it (`{"action", "params", "on_event"}` as JSON, the
 * parameters in canonical form), from which it is started once.
 */
export interface Trigger {
  intentId: string;
  eventType: string;
  objectId: string;
  proposal: string;
}

/** A webhook event kept as received. */
export interface ReceivedEvent {
  eventId: string;
  eventType: string;
  objectId: string;
}

/**
 * A worker's webhook endpoint: its id, its `whsec_` secret and the URL it was registered at;
 * id and secret empty while the registration is in flight.
 */
export interface Endpoint {
  id: string;
  secret: string;
  url: string;
}

/** The row kept before a registration leaves: the URL, no id and no secret yet. */
export function inFlightEndpoint(url: string): Endpoint {
  return { id: "", secret: "", url };
}

/** Whether the service's answer to the registration made it: an id and a secret. */
export function isRegistered(endpoint: Endpoint): boolean {
  return endpoint.id !== "" && endpoint.secret !== "";
}

/** A deep copy: a turn changes its copy, and the log's row stays what was read. */
export function copyIntent(intent: Intent): Intent {
  return { ...intent, evidence: structuredClone(intent.evidence), afterIds: [...intent.afterIds] };
}

/** The intent view of docs/protocol.md §6: what propose_ok and status_ok carry. */
export function view(intent: Intent): Record<string, unknown> {
  const evidence: Evidence = {};
  for (const [k, v] of Object.entries(intent.evidence)) {
    if (v === null || v === undefined || v === "" || (Array.isArray(v) && v.length === 0)) continue;
    evidence[k] = v;
  }
  const out: Record<string, unknown> = {
    id: intent.id,
    action: intent.action,
    params: JSON.parse(intent.params),
    state: intent.state,
    attempts: intent.attempts,
    evidence,
  };
  if (intent.replaces !== null) out.replaces = intent.replaces;
  if (intent.afterIds.length > 0) out.after = [...intent.afterIds];
  return out;
}

/**
 * Whether a transfer keeps its claimed nonce: all but one that failed, or was escalated for a
 * person's decision, with no send that may have reached the node, whose nonce is unused and
 * goes back to the pool of free ones (else every later transfer would wait for ever behind a
 * nonce nobody will use).
 */
export function holdsNonce(intent: Intent): boolean {
  const escalatedUnsent = intent.state === "escalated" && intent.evidence.could_duplicate === false;
  return !(intent.state === "failed" || escalatedUnsent) || intent.maybeExecuted;
}

const SCHEMA = `
CREATE TABLE IF NOT EXISTS intents (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    action TEXT NOT NULL,
    params TEXT NOT NULL,
    params_hash TEXT NOT NULL,
    idem_key TEXT NOT NULL,
    state TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    replaces TEXT,
    evidence TEXT NOT NULL,
    maybe_executed INTEGER NOT NULL,
    lease_owner TEXT,
    lease_epoch INTEGER NOT NULL,
    lease_until_ms INTEGER NOT NULL,
    version INTEGER NOT NULL,
    created_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL,
    key_first_sent_ms INTEGER,
    last_sent_ms INTEGER,
    after_ids TEXT NOT NULL DEFAULT '[]'
);
CREATE INDEX IF NOT EXISTS intents_state ON intents(state);
CREATE TABLE IF NOT EXISTS nonces (
    account TEXT NOT NULL,
    nonce INTEGER NOT NULL,
    intent_id TEXT NOT NULL,
    PRIMARY KEY (account, nonce)
);
CREATE TABLE IF NOT EXISTS history (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    intent_id TEXT NOT NULL,
    at_ms INTEGER NOT NULL,
    from_state TEXT,
    to_state TEXT NOT NULL,
    owner TEXT,
    epoch INTEGER NOT NULL,
    note TEXT
);
CREATE TABLE IF NOT EXISTS triggers (
    intent_id TEXT PRIMARY KEY,
    event_type TEXT NOT NULL,
    object_id TEXT NOT NULL,
    proposal TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS webhook_events (
    event_id TEXT PRIMARY KEY,
    event_type TEXT NOT NULL,
    object_id TEXT NOT NULL,
    received_ms INTEGER NOT NULL,
    started_ms INTEGER
);
CREATE TABLE IF NOT EXISTS webhook_endpoints (
    worker_id TEXT PRIMARY KEY,
    endpoint_id TEXT NOT NULL,
    secret TEXT NOT NULL,
    url TEXT NOT NULL
);
`;

/** The columns every write sets, bar id and version, in the order of rowValues. */
const WRITE_COLUMNS = [
  "action",
  "params",
  "params_hash",
  "idem_key",
  "state",
  "attempts",
  "replaces",
  "evidence",
  "maybe_executed",
  "lease_owner",
  "lease_epoch",
  "lease_until_ms",
  "created_ms",
  "updated_ms",
  "key_first_sent_ms",
  "last_sent_ms",
  "after_ids",
];
const SELECT = `SELECT id, version, ${WRITE_COLUMNS.join(", ")} FROM intents`;

interface Row {
  id: string;
  action: string;
  params: string;
  params_hash: string;
  idem_key: string;
  state: string;
  attempts: number;
  replaces: string | null;
  evidence: string;
  maybe_executed: number;
  lease_owner: string | null;
  lease_epoch: number;
  lease_until_ms: number;
  version: number;
  created_ms: number;
  updated_ms: number;
  key_first_sent_ms: number | null;
  last_sent_ms: number | null;
  after_ids: string;
}

/** The row's values in WRITE_COLUMNS order: evidence as JSON, the flag as an integer. */
function rowValues(intent: Intent): unknown[] {
  return [
    intent.action,
    intent.params,
    intent.paramsHash,
    intent.key,
    intent.state,
    intent.attempts,
    intent.replaces,
    JSON.stringify(intent.evidence),
    intent.maybeExecuted ? 1 : 0,
    intent.leaseOwner,
    intent.leaseEpoch,
    intent.leaseUntilMs,
    intent.createdMs,
    intent.updatedMs,
    intent.keyFirstSentMs,
    intent.lastSentMs,
    JSON.stringify(intent.afterIds),
  ];
}

function fromRow(row: Row): Intent {
  return {
    id: row.id,
    action: row.action,
    params: row.params,
    paramsHash: row.params_hash,
    key: row.idem_key,
    state: row.state,
    attempts: row.attempts,
    replaces: row.replaces,
    evidence: JSON.parse(row.evidence) as Evidence,
    maybeExecuted: row.maybe_executed !== 0,
    leaseOwner: row.lease_owner,
    leaseEpoch: row.lease_epoch,
    leaseUntilMs: row.lease_until_ms,
    version: row.version,
    createdMs: row.created_ms,
    updatedMs: row.updated_ms,
    keyFirstSentMs: row.key_first_sent_ms,
    lastSentMs: row.last_sent_ms,
    afterIds: JSON.parse(row.after_ids) as string[],
  };
}

/** Whether an error is SQLite's "another process holds the lock" past the busy timeout. */
export function isLocked(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === "string" && (code.startsWith("SQLITE_BUSY") || code.startsWith("SQLITE_LOCKED"));
}

/** How long to wait between two tries at switching a new log to WAL. */
const WAL_RETRY_MS = 10;

/**
 * Switch the log to WAL mode. Workers started together on a new state directory all ask at
 * once, and SQLite answers a concurrent switch with SQLITE_BUSY straight away, without waiting
 * out the busy timeout: so ask again until the file is WAL, within that same timeout. The
 * constructor is synchronous, hence the blocking wait.
 */
function wal(db: Database.Database): void {
  const deadline = Date.now() + BUSY_TIMEOUT_MS;
  const pause = new Int32Array(new SharedArrayBuffer(4));
  for (;;) {
    try {
      db.pragma("journal_mode = WAL");
      return;
    } catch (error) {
      if (!isLocked(error) || Date.now() >= deadline) throw error;
      Atomics.wait(pause, 0, 0, WAL_RETRY_MS);
    }
  }
}

export class IntentLog {
  private readonly db: Database.Database;

  constructor(path: string) {
    if (bugs.BUG === "memory-only") {
      // The bug: the intents live in this process only; a crash forgets them.
      path = ":memory:";
    }
    this.db = new Database(path, { timeout: BUSY_TIMEOUT_MS });
    wal(this.db);
    this.db.pragma("synchronous = FULL");
    // Create the tables only when they are missing. Opening an existing log must not need the
    // write lock: another worker may hold it, stopped (SIGSTOP) in mid-commit, and the harness
    // resumes it only after this worker's init is answered.
    const exists = this.db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'history'").get();
    if (exists === undefined) {
      this.db.transaction(() => this.db.exec(SCHEMA)).immediate();
    }
  }

  private select(where = "", args: unknown[] = []): Intent[] {
    const rows = this.db.prepare(`${SELECT} ${where} ORDER BY seq`).all(...args) as Row[];
    return rows.map(fromRow);
  }

  get(id: string): Intent | null {
    return this.select("WHERE id = ?", [id])[0] ?? null;
  }

  /** Every intent, in the order they were recorded. */
  all(): Intent[] {
    return this.select();
  }

  /** The intents that are not finished, in the order they were recorded. */
  active(): Intent[] {
    return this.select(`WHERE state IN (${ACTIVE_STATES.map(() => "?").join(", ")})`, [...ACTIVE_STATES]);
  }

  /**
   * Inserts a new intent, durably, unless its id is taken. Returns ["new", intent],
   * ["existing", the stored one] for the same action and payload, or ["conflict", the stored
   * one] for another.
   */
  record(intent: Intent): ["new" | "existing" | "conflict", Intent] {
    return this.db
      .transaction((): ["new" | "existing" | "conflict", Intent] => {
        const row = this.db.prepare(`${SELECT} WHERE id = ?`).get(intent.id) as Row | undefined;
        if (row !== undefined) {
          const stored = fromRow(row);
          const same = stored.action === intent.action && stored.paramsHash === intent.paramsHash;
          return [same ? "existing" : "conflict", stored];
        }
        const columns = ["id", "version", ...WRITE_COLUMNS];
        this.db
          .prepare(`INSERT INTO intents (${columns.join(", ")}) VALUES (${columns.map(() => "?").join(", ")})`)
          .run(intent.id, intent.version, ...rowValues(intent));
        this.history(intent, null, "recorded");
        return ["new", intent];
      })
      .immediate();
  }

  /**
   * Writes `next` if its row still has `expectVersion` (and, for a signed transfer, if no other
   * intent holds its nonce), with its history, in one transaction. On success `next.version`
   * becomes the stored version and true is returned; false means another worker changed the
   * row first (or took the nonce), and nothing was written.
   */
  write(next: Intent, expectVersion: number, fromState: string, note: string): boolean {
    const written = this.db
      .transaction((): boolean => {
        const claim = this.claimNonce(next);
        if (claim === "taken") return false;
        let expected = expectVersion;
        if (bugs.BUG === "constant-fencing-token") {
          // The bug: with a fencing token on every write, the row's version seems not to
          // matter, so whoever writes last wins, whatever changed the row meanwhile.
          const row = this.db.prepare("SELECT version FROM intents WHERE id = ?").get(next.id) as
            | { version: number }
            | undefined;
          expected = row?.version ?? expected;
        }
        const assignments = WRITE_COLUMNS.map((c) => `${c} = ?`).join(", ");
        const changes = this.db
          .prepare(`UPDATE intents SET ${assignments}, version = version + 1 WHERE id = ? AND version = ?`)
          .run(...rowValues(next), next.id, expected).changes;
        if (changes > 0 && fromState !== next.state) this.history(next, fromState, note);
        if ((changes === 0 && claim === "new") || (changes > 0 && !holdsNonce(next))) this.releaseNonce(next);
        if (changes > 0) next.version = expected + 1;
        return changes > 0;
      })
      .immediate();
    return written;
  }

  /** The nonces of `account` that intents of this log have signed with. */
  claimedNonces(account: string): Set<number> {
    const rows = this.db.prepare("SELECT nonce FROM nonces WHERE account = ?").all(account) as Array<{ nonce: number }>;
    return new Set(rows.map((r) => r.nonce));
  }

  /** "none" (no signed transfer), "new", "held" (already this intent's) or "taken". */
  private claimNonce(intent: Intent): "none" | "new" | "held" | "taken" {
    const account = intent.evidence.from;
    const nonce = intent.evidence.nonce;
    if (typeof account !== "string" || typeof nonce !== "number" || !holdsNonce(intent)) return "none";
    const inserted = this.db
      .prepare("INSERT INTO nonces (account, nonce, intent_id) VALUES (?, ?, ?) ON CONFLICT DO NOTHING")
      .run(account, nonce, intent.id).changes;
    if (inserted > 0) return "new";
    const owner = this.db
      .prepare("SELECT intent_id FROM nonces WHERE account = ? AND nonce = ?")
      .get(account, nonce) as { intent_id: string };
    return owner.intent_id === intent.id ? "held" : "taken";
  }

  private releaseNonce(intent: Intent): void {
    const account = intent.evidence.from;
    const nonce = intent.evidence.nonce;
    if (typeof account === "string" && typeof nonce === "number") {
      this.db
        .prepare("DELETE FROM nonces WHERE account = ? AND nonce = ? AND intent_id = ?")
        .run(account, nonce, intent.id);
    }
  }

  // -- intents an event starts (webhooks.ts): the triggers, the events received, the endpoints --

  /**
   * Keeps `trigger` unless its intent id is kept already; "kept" (now, or before with the same
   * proposal) or "conflict" (kept with another). One statement: a concurrent arm of the same id
   * finds the first one's row.
   */
  arm(trigger: Trigger): "kept" | "conflict" {
    this.db
      .prepare("INSERT OR IGNORE INTO triggers (intent_id, event_type, object_id, proposal) VALUES (?, ?, ?, ?)")
      .run(trigger.intentId, trigger.eventType, trigger.objectId, trigger.proposal);
    const kept = this.db.prepare("SELECT proposal FROM triggers WHERE intent_id = ?").get(trigger.intentId) as {
      proposal: string;
    };
    return kept.proposal === trigger.proposal ? "kept" : "conflict";
  }

  /** The triggers an event of `eventType` about `objectId` starts, in the order armed. */
  triggersFor(eventType: string, objectId: string): Trigger[] {
    const rows = this.db
      .prepare(
        "SELECT intent_id, event_type, object_id, proposal FROM triggers WHERE event_type = ? AND object_id = ? ORDER BY rowid",
      )
      .all(eventType, objectId) as Array<{ intent_id: string; event_type: string; object_id: string; proposal: string }>;
    return rows.map((r) => ({ intentId: r.intent_id, eventType: r.event_type, objectId: r.object_id, proposal: r.proposal }));
  }

  /** Whether any trigger is kept: only then does a worker need an endpoint. */
  hasTriggers(): boolean {
    return this.db.prepare("SELECT 1 FROM triggers LIMIT 1").get() !== undefined;
  }

  /** Whether an event of `eventType` about `objectId` started its triggers (one armed after that starts at once). */
  eventStartedFor(eventType: string, objectId: string): boolean {
    const row = this.db
      .prepare("SELECT 1 FROM webhook_events WHERE event_type = ? AND object_id = ? AND started_ms IS NOT NULL")
      .get(eventType, objectId);
    return row !== undefined;
  }

  /**
   * Keeps event `eventId` as received, durably (synchronous=FULL), unless it was: a second
   * delivery of it changes nothing. True when it is new.
   */
  receiveEvent(eventId: string, eventType: string, objectId: string, atMs: number): boolean {
    const changes = this.db
      .prepare("INSERT OR IGNORE INTO webhook_events (event_id, event_type, object_id, received_ms) VALUES (?, ?, ?, ?)")
      .run(eventId, eventType, objectId, atMs).changes;
    return changes === 1;
  }

  /** The events received whose triggers have not started yet, oldest first. */
  eventsWaiting(): ReceivedEvent[] {
    const rows = this.db
      .prepare(
        "SELECT event_id, event_type, object_id FROM webhook_events WHERE started_ms IS NULL ORDER BY received_ms, event_id",
      )
      .all() as Array<{ event_id: string; event_type: string; object_id: string }>;
    return rows.map((r) => ({ eventId: r.event_id, eventType: r.event_type, objectId: r.object_id }));
  }

  /** Notes that event `eventId` started its triggers. */
  eventStarted(eventId: string, atMs: number): void {
    this.db.prepare("UPDATE webhook_events SET started_ms = ? WHERE event_id = ? AND started_ms IS NULL").run(atMs, eventId);
  }

  /**
   * Whether every trigger kept has started (its intent is in the log): until then a worker
   * that may have missed events reads them from the API at every pass.
   */
  allTriggersStarted(): boolean {
    return this.db.prepare("SELECT 1 FROM triggers WHERE intent_id NOT IN (SELECT id FROM intents) LIMIT 1").get() === undefined;
  }

  /**
   * Worker `workerId`'s endpoint, if it registered one; an empty id and secret while a
   * registration is in flight (or its answer never came: `isRegistered` says which).
   */
  endpoint(workerId: string): Endpoint | null {
    const row = this.db
      .prepare("SELECT endpoint_id, secret, url FROM webhook_endpoints WHERE worker_id = ?")
      .get(workerId) as { endpoint_id: string; secret: string; url: string } | undefined;
    return row === undefined ? null : { id: row.endpoint_id, secret: row.secret, url: row.url };
  }

  /** Keeps worker `workerId`'s endpoint: a new one, or the old one at a new URL. */
  keepEndpoint(workerId: string, endpoint: Endpoint): void {
    this.db
      .prepare(
        "INSERT INTO webhook_endpoints (worker_id, endpoint_id, secret, url) VALUES (?, ?, ?, ?) " +
          "ON CONFLICT (worker_id) DO UPDATE SET endpoint_id = excluded.endpoint_id, secret = excluded.secret, url = excluded.url",
      )
      .run(workerId, endpoint.id, endpoint.secret, endpoint.url);
  }

  private history(intent: Intent, fromState: string | null, note: string): void {
    this.db
      .prepare(
        "INSERT INTO history (intent_id, at_ms, from_state, to_state, owner, epoch, note) VALUES (?, ?, ?, ?, ?, ?, ?)",
      )
      // The owner is who made the change, for people reading the history.
      .run(intent.id, intent.updatedMs, fromState, intent.state, intent.leaseOwner, intent.leaseEpoch, note);
  }
}
