#!/usr/bin/env node
/**
 * A small executor for `twice`, in TypeScript: it turns an agent's intents into refunds,
 * workspaces, S3 objects, chain transfers and emails, and never does anything twice.
 *
 * It speaks the stdio protocol `twice/1` (docs/protocol.md) and has the design of the Python
 * example (examples/executors/python), which mirrors the reference executor:
 *
 * - every intent is written to a SQLite log (intentLog.ts) with one idempotency key before
 *   `propose_ok`, and marked `submitted` before the first byte of its request leaves;
 * - an answer that proves nothing (a timeout, a reset, a 5xx) makes the intent `unknown`,
 *   never `failed`: a timeout is not a "no";
 * - an uncertain intent is resolved from the service's own records (a lookup), except where
 *   the contract makes a resend under the same key a replay (keys honoured, acks reliable, the
 *   key still retained); a "not there" is believed only once nothing in flight can still land
 *   and no read can still lag;
 * - where acks may lie, a success is read back before it is believed, and an email is believed
 *   only once it is in the recipient's inbox;
 * - a refusal a person must act on (401, 403, 400, 422) is never sent again: the intent goes to
 *   a person (`escalated`) with the service's words and whether going on could write twice;
 * - leases with fencing tokens keep two workers off one intent; a replacement waits for the
 *   intent it replaces; what cannot be decided goes to a person (`escalated`) with evidence;
 * - a workflow step (`after`) waits for the intents it comes after, and resolves its parameter
 *   references once, from their recorded results, before its first send;
 * - an intent an event starts (`on_event`) is kept as a trigger until a genuine webhook about
 *   its payment arrives, and is then started once (webhooks.ts).
 *
 * Usage: node dist/executor.js [--bug NAME] [--actions ACTION,...] [--single-worker]
 */

import { randomUUID } from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import * as readline from "node:readline";
import * as actions from "./actions";
import * as bugs from "./bugs";
import * as sdks from "./sdks";
import { copyIntent, IntentLog, isLocked, newIntent, view, type Intent, type Trigger } from "./intentLog";
import {
  ABSENT,
  AMBIGUOUS,
  CONFLICT,
  DONE,
  FAILED,
  FENCED,
  FOUND,
  NEEDS_DECISION,
  NOT_EXECUTED,
  NotPrepared,
  REJECTED,
  SERVICES,
  SUPERSEDED,
  type Contract,
  type Lookup,
  type Outcome,
  type Payments,
  type Service,
} from "./services";
import { Webhooks } from "./webhooks";

const PROTOCOL = "twice/1";
/** Steps that build on steps: `after` and parameter references (docs/protocol.md §3.2). */
const FEATURE_WORKFLOWS = "workflows";
/** Intents an event starts: `on_event` (docs/protocol.md §3.2). */
const FEATURE_WEBHOOKS = "webhooks";
const EXECUTOR = { name: "twice-typescript-executor", version: "0.1.0" };
const LOG_FILE = "intents.sqlite";
/**
 * Added to every bound waited out before a negative answer is believed: our clock and the
 * service's may disagree a little.
 */
const SAFETY_MARGIN_MS = 100;
/** The lease of an intent when there are no leases (`--single-worker`): never runs out. */
const UNLEASED_UNTIL_MS = 2 ** 52;
/** Longest drain a caller may ask for, and longest request line read. */
const DRAIN_MS_MAX = 600_000;
const LINE_BYTES_MAX = 1024 * 1024;

// Protocol error codes (docs/protocol.md §4).
const TIMEOUT = 0;
const NOT_SUPPORTED = 10;
const UNAVAILABLE = 11;
const MALFORMED = 12;
const CRASH = 13;
const KEY_EXISTS = 21;

/** What a service promises when init leaves a term out: the cautious reading. */
const DEFAULT_CONTRACT: Contract = {
  idempotency_keys: "ignored",
  key_retention_ms: 0,
  reads: "strong",
  read_lag_ms_max: 0,
  acks: "reliable",
  settle_ms_max: 30_000,
  unique_business_key: false,
  fencing: false,
  conditional_writes: false,
};

interface Limits {
  request_timeout_ms: number;
  lease_ms: number;
  attempts_max: number;
  escalate_after_ms: number;
  pass_pause_ms: number;
  batch_max: number;
}

const DEFAULT_LIMITS: Limits = {
  request_timeout_ms: 2_000,
  lease_ms: 10_000,
  attempts_max: 5,
  escalate_after_ms: 60_000,
  pass_pause_ms: 20,
  batch_max: 64,
};

/** Logs go to stderr only: stdout carries the protocol. */
function warn(text: string): void {
  process.stderr.write(`twice-typescript-executor: ${text}\n`);
}

/** The executor's clock: every term of a contract is measured on it. */
function nowMs(): number {
  return Date.now();
}

function newKey(): string {
  return randomUUID();
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * Whether a signed transaction holds a nonce for the intent. Such an intent is never given up
 * for want of attempts: every later transfer of the account waits behind its nonce, and its
 * bytes can be broadcast again any number of times and still land at most once.
 */
function holdsANonce(intent: Intent): boolean {
  return Boolean(intent.evidence.raw_tx);
}

/**
 * Result field `field` of a confirmed intent, as it recorded it: the id the service gave the
 * effect (a refund, a workspace, the ETag of a put) is external_id, a transfer's hash tx_hash.
 */
function resultValue(intent: Intent, field: string): string | undefined {
  if (intent.action === "chain.transfer" && field === "tx_hash") return intent.evidence.tx_hash as string | undefined;
  if (field === "id" || (intent.action === "files.put" && field === "etag")) {
    return intent.evidence.external_id as string | undefined;
  }
  return undefined;
}

/** A step's reference cannot be resolved though its predecessors are confirmed. */
class Unresolvable extends Error {}

class ProtocolError extends Error {
  constructor(
    readonly code: number,
    readonly text: string,
  ) {
    super(text);
  }
}

/** What one pass did. */
class Tally {
  sent = 0;
  lookedUp = 0;
  changes = 0;
}

type Released = [state: string, reason: string, couldDuplicate: boolean | null];

interface Decision {
  status: number;
  error: string;
}

function cancelled(old: string, by: string): string {
  if (old === by) return `cancelled: the intent it replaces (${old}) is confirmed`;
  return `cancelled: ${by}, in the lineage of the intent it replaces (${old}), is confirmed`;
}

function validPrivateKey(text: unknown): boolean {
  return typeof text === "string" && /^0x[0-9a-fA-F]{64}$/.test(text) && BigInt(text) !== 0n;
}

function workerOf(owner: string): string {
  const at = owner.lastIndexOf("#");
  return at < 0 ? owner : owner.slice(0, at);
}

class Executor {
  /**
   * A fresh incarnation per process: the leases of an earlier life of this worker (same id,
   * another incarnation) are recognised as dead and taken over at once.
   */
  readonly owner: string;
  readonly services: Record<string, Service> = {};
  readonly log: IntentLog;
  /** Triggers, the endpoint, deliveries and the events' work (webhooks.ts). */
  readonly webhooks: Webhooks;
  readonly safetyMarginMs = SAFETY_MARGIN_MS;

  constructor(
    readonly workerId: string,
    stateDir: string,
    serviceConfig: Record<string, { url: string; contract: Contract }>,
    readonly secrets: Record<string, string>,
    readonly limits: Limits,
    readonly announced: readonly string[],
    readonly emit: (event: Record<string, unknown>) => void,
  ) {
    this.owner = `${workerId}#${randomUUID().replace(/-/g, "").slice(0, 12)}`;
    for (const [name, cfg] of Object.entries(serviceConfig)) {
      const Kind = SERVICES[name];
      if (Kind !== undefined) this.services[name] = new Kind(cfg.url, cfg.contract, secrets, limits.request_timeout_ms);
    }
    fs.mkdirSync(stateDir, { recursive: true });
    this.log = new IntentLog(path.join(stateDir, LOG_FILE));
    this.webhooks = new Webhooks(this);
  }

  /** The payments service of init, which webhooks come from. */
  payments(): Payments | undefined {
    return this.services.payments as Payments | undefined;
  }

  warn(text: string): void {
    warn(text);
  }

  get timeoutMs(): number {
    return this.limits.request_timeout_ms;
  }

  // -- propose and status ---------------------------------------------------------------

  propose(message: unknown): Record<string, unknown> {
    if (!actions.isObject(message)) throw new ProtocolError(MALFORMED, "propose needs an intent object");
    const intentId = message.id;
    const action = message.action;
    const replaces = message.replaces ?? null;
    if (typeof intentId !== "string" || intentId === "") {
      throw new ProtocolError(MALFORMED, "intent.id must be a non-empty string");
    }
    if (typeof action !== "string") throw new ProtocolError(MALFORMED, "intent.action must be a string");
    if (replaces !== null && typeof replaces !== "string") {
      throw new ProtocolError(MALFORMED, "intent.replaces must be a string or null");
    }
    if (!this.announced.includes(action)) {
      throw new ProtocolError(NOT_SUPPORTED, `action "${action}" is not supported; supported: ${this.announced.join(", ")}`);
    }
    const service = actions.SERVICE_OF[action];
    if (!(service in this.services)) {
      throw new ProtocolError(NOT_SUPPORTED, `action ${action} needs service "${service}", which init did not configure`);
    }
    if (action === "chain.transfer" && !validPrivateKey(this.secrets[actions.CHAIN_KEY_SECRET])) {
      // Refused now rather than recorded and never sendable.
      throw new ProtocolError(NOT_SUPPORTED, `action ${action} needs the secret "${actions.CHAIN_KEY_SECRET}"`);
    }
    const after = message.after ?? [];
    if (!Array.isArray(after) || !after.every((a) => typeof a === "string" && a !== "")) {
      throw new ProtocolError(MALFORMED, "intent.after: invalid type, expected a list of intent ids (or null)");
    }
    const afterIds = after as string[];
    const onEvent = message.on_event ?? null;
    if (onEvent !== null) {
      if (
        !actions.isObject(onEvent) ||
        typeof onEvent.type !== "string" ||
        typeof onEvent.payment_intent !== "string"
      ) {
        throw new ProtocolError(MALFORMED, `intent ${intentId}: on_event must be an object with a string type and payment_intent`);
      }
      if (afterIds.length > 0 || replaces !== null) {
        throw new ProtocolError(
          MALFORMED,
          `intent ${intentId}: an intent an event starts comes after nothing and replaces nothing`,
        );
      }
    }
    const params = message.params;
    // A step (it comes after something, or a parameter is an object, which only a reference
    // may be) is refused naming the intent, as the reference executor does.
    const step = afterIds.length > 0 || (actions.isObject(params) && Object.values(params).some(actions.isObject));
    let checked: actions.Params;
    try {
      const refs = actions.references(params);
      // Everything but the references is checked now; the references below, and they are
      // replaced by their values only when the step is first sent.
      checked = actions.check(action, refs.length > 0 ? actions.withPlaceholders(params as actions.Params) : params);
      this.checkAfter(action, afterIds, refs);
      for (const [name, reference] of refs) checked[name] = reference; // the authorised form keeps the reference
    } catch (problem) {
      if (problem instanceof actions.Malformed) {
        throw new ProtocolError(MALFORMED, step ? `intent ${intentId}: ${problem.message}` : problem.message);
      }
      throw problem;
    }
    const canonical = actions.canonicalJson(checked);
    if (actions.isObject(onEvent)) {
      return this.arm(intentId, action, canonical, onEvent.type as string, onEvent.payment_intent as string);
    }

    let state = "recorded";
    let reason: string | null = null;
    let couldDuplicate: boolean | null = null;
    if (replaces !== null && this.log.get(replaces) === null) {
      throw new ProtocolError(MALFORMED, `intent ${intentId} replaces ${replaces}, which this executor has never recorded`);
    }
    if (replaces !== null || afterIds.length > 0) {
      const released = this.released(replaces, afterIds);
      if (released === null || released[0] === "escalated") {
        // Waits; an escalated predecessor escalates it at the next pass, with an event.
        state = "blocked";
      } else if (released[0] === "failed") {
        [state, reason, couldDuplicate] = released;
      }
    }
    const key = newKey();
    const now = nowMs();
    const evidence: Record<string, unknown> = { key };
    if (reason) evidence.reason = reason;
    if (couldDuplicate !== null) evidence.could_duplicate = couldDuplicate;
    const intent = newIntent({
      id: intentId,
      action,
      params: canonical,
      paramsHash: actions.payloadHash(actions.payloadText(canonical, afterIds)),
      key,
      state,
      replaces,
      afterIds,
      evidence,
      createdMs: now,
      updatedMs: now,
    });
    // Durable (synchronous=FULL) before we answer: propose_ok promises it survives SIGKILL.
    const [result, stored] = this.log.record(intent);
    if (result === "conflict") {
      throw new ProtocolError(KEY_EXISTS, `intent id ${intentId} was already recorded with another action or payload`);
    }
    return view(stored);
  }

  /**
   * Keeps a checked proposal that an event starts, as a trigger: nothing is sent for it, and
   * `status` does not list it, until a genuine event starts it. The same id kept with another
   * payload is a conflict; a trigger whose event was taken before starts at once.
   */
  private arm(intentId: string, action: string, canonical: string, eventType: string, objectId: string): Record<string, unknown> {
    const trigger: Trigger = {
      intentId,
      eventType,
      objectId,
      // The event is part of what was authorised: the same id with another event is a conflict.
      proposal: JSON.stringify({ action, params: canonical, on_event: { type: eventType, payment_intent: objectId } }),
    };
    if (this.log.arm(trigger) === "conflict") {
      throw new ProtocolError(KEY_EXISTS, `intent id ${intentId} was already kept with another action, payload or event`);
    }
    this.webhooks.arm();
    if (this.log.eventStartedFor(eventType, objectId)) return this.fire(trigger);
    // Not recorded, so no key yet: the intent as proposed.
    return view(newIntent({ id: intentId, action, params: canonical, paramsHash: "", key: "", state: "recorded" }));
  }

  /**
   * Turns `trigger` into a plain intent, recorded as any proposal is: the log holds its id
   * once, so a second start (another delivery, another worker, a restart) finds it there.
   */
  fire(trigger: Trigger): Record<string, unknown> {
    const kept = JSON.parse(trigger.proposal) as { action: string; params: string };
    const existing = this.log.get(trigger.intentId);
    if (existing !== null && bugs.BUG === "webhook-no-dedupe") {
      // The bug: every delivery is new work, so the intent begins afresh under a new key, as
      // if it had never been started (and sent).
      const afresh = copyIntent(existing);
      afresh.key = newKey();
      afresh.state = "recorded";
      afresh.attempts = 0;
      afresh.maybeExecuted = false;
      afresh.keyFirstSentMs = null;
      afresh.lastSentMs = null;
      afresh.evidence = { key: afresh.key };
      this.commit(existing, afresh, "started again by a delivery of its event", new Tally());
      return view(afresh);
    }
    return this.propose({ id: trigger.intentId, action: kept.action, params: JSON.parse(kept.params) as unknown });
  }

  /**
   * A step's `after` names intents this log recorded, each once, and every reference reads a
   * result field of one of them from a parameter that may take one.
   */
  private checkAfter(action: string, after: string[], refs: Array<[string, actions.Reference]>): void {
    after.forEach((before, i) => {
      if (after.slice(0, i).includes(before)) throw new actions.Malformed(`"after" lists ${before} twice`);
      if (this.log.get(before) === null) {
        throw new actions.Malformed(`comes after ${before}, which this executor has never recorded`);
      }
    });
    for (const [name, reference] of refs) {
      const source = this.log.get(reference.from);
      actions.checkReference(action, name, reference, source?.action ?? null, after.includes(reference.from));
    }
  }

  status(ids: Set<string> | null): Array<Record<string, unknown>> {
    return this.log
      .all()
      .filter((i) => ids === null || ids.has(i.id))
      .map(view);
  }

  // -- passes ------------------------------------------------------------------------------

  /**
   * One pass over the unfinished intents. The blocked ones go first, one by one, so that what
   * their lineage says is what the pass started with (a released one is sent in the next pass,
   * once the event that released it is out); then every other intent takes its turn at the
   * same time as the others: a held request does not hold the other intents, or their leases,
   * back.
   */
  async runPass(): Promise<Tally> {
    const tally = new Tally();
    // A worker that listens for webhooks has its endpoint before it waits for one, and starts
    // what the events it received ask for before it looks at its intents.
    await this.webhooks.ensureEndpoint();
    await this.webhooks.startReceived();
    const active = this.log.active().slice(0, this.limits.batch_max);
    for (const intent of active) {
      if (intent.state === "blocked") await this.turnUnlessLocked(intent, tally);
    }
    // Every turn ends before the reply (allSettled: no turn is still running, or emitting
    // events, once a failed one is reported); then what a turn threw (a log failure) is thrown here.
    const turns = await Promise.allSettled(
      active.filter((i) => i.state !== "blocked").map((i) => this.turnUnlessLocked(i, tally)),
    );
    for (const turn of turns) {
      if (turn.status === "rejected") throw turn.reason;
    }
    return tally;
  }

  /**
   * Passes until no intent is recorded or submitted (blocked and unknown ones do not hold a
   * drain), within timeoutMs.
   */
  async drain(timeoutMs: number): Promise<void> {
    const deadline = nowMs() + timeoutMs;
    for (;;) {
      const tally = await this.runPass();
      const busy = this.log.active().filter((i) => i.state === "recorded" || i.state === "submitted").length;
      // A step whose last predecessor this pass confirmed is released by the next one.
      if (busy === 0 && !(tally.changes > 0 && this.aStepCanBeReleased())) return;
      if (busy === 0 && nowMs() >= deadline) return; // only released steps are left
      if (nowMs() >= deadline) {
        throw new ProtocolError(TIMEOUT, `${busy} intents still recorded or submitted after ${timeoutMs} ms`);
      }
      // Straight on while passes make progress; pause when one changed nothing (it waits for a
      // lease, a backoff or a settle bound to pass).
      if (tally.sent === 0 && tally.changes === 0) await sleep(this.limits.pass_pause_ms);
    }
  }

  private async turnUnlessLocked(intent: Intent, tally: Tally): Promise<void> {
    try {
      await this.turn(intent, tally);
    } catch (error) {
      if (!isLocked(error)) throw error;
      // Another worker held the log's write lock past the busy timeout (it may be stopped in
      // mid-commit). Skipping the turn loses nothing: a "submitted" that was not committed was
      // not sent, and a sent request whose outcome was not committed is looked up in a later
      // pass, as after a crash.
      warn(`intent ${intent.id}: the intent log is locked; skipped this pass (${String(error)})`);
    }
  }

  /** One intent's turn in a pass. */
  private async turn(intent: Intent, tally: Tally): Promise<void> {
    const now = nowMs();
    const leased = this.lease(intent, now);
    if (leased === null) return; // another live worker owns it
    let payload: actions.Params;
    try {
      payload = this.checkedPayload(intent);
    } catch (problem) {
      // Not executed now; an earlier send of it may have been, if it went out.
      leased.evidence.could_duplicate = intent.maybeExecuted || intent.state === "submitted" || intent.state === "unknown";
      this.escalate(intent, leased, `not executed: ${(problem as Error).message}`, tally);
      return;
    }
    if (intent.state === "blocked") {
      this.release(intent, leased, tally);
      return;
    }
    if (intent.state === "recorded") {
      // A send that certainly did not execute (no connection, 429) is retried after a pause
      // that grows with each attempt, not on the very next pass.
      const last = intent.lastSentMs;
      if (last !== null && now < last + this.timeoutMs * intent.attempts) return;
    }
    const refs = actions.references(payload);
    const resolvedNow = refs.length > 0 && !leased.evidence.resolved && intent.state === "recorded";
    if (resolvedNow) {
      // A step's references are resolved here, once, from what its predecessors recorded, and
      // written with its "submitted" (or with the row that says why it was not sent): no later
      // send, after a crash or by another worker, resolves them again.
      try {
        leased.evidence.resolved = this.resolveReferences(refs);
      } catch (problem) {
        if (!(problem instanceof Unresolvable)) throw problem;
        leased.evidence.could_duplicate = false;
        this.escalate(intent, leased, problem.message, tally);
        return;
      }
    }
    let params: actions.Params;
    try {
      const resolved = (leased.evidence.resolved ?? {}) as Record<string, string>;
      params = actions.check(intent.action, actions.withResolved(payload, resolved));
    } catch (problem) {
      if (!(problem instanceof actions.Malformed)) throw problem;
      if (resolvedNow) {
        // Nothing was sent, and nothing will be.
        leased.state = "failed";
        const note = `never sent: the values resolved from the intents it comes after do not fit: ${problem.message}`;
        leased.evidence.reason = note;
        this.commit(intent, leased, note, tally);
      } else {
        this.escalate(intent, leased, `not executed: ${problem.message}`, tally);
      }
      return;
    }
    if (intent.state === "recorded") await this.send(intent, leased, params, "sent", tally);
    else if (intent.state === "submitted" || intent.state === "unknown") await this.resolve(intent, leased, params, tally);
  }

  private escalate(before: Intent, leased: Intent, note: string, tally: Tally): void {
    leased.state = "escalated";
    leased.evidence.reason = note;
    this.commit(before, leased, note, tally);
  }

  /**
   * The authorised parameters (with their references), if they and `after` still match their
   * hash: a row changed behind our back is never executed.
   */
  private checkedPayload(intent: Intent): actions.Params {
    if (actions.payloadHash(actions.payloadText(intent.params, intent.afterIds)) !== intent.paramsHash) {
      throw new Error("the stored payload does not match its hash");
    }
    return JSON.parse(intent.params) as actions.Params;
  }

  /**
   * The value of each reference, from the result its predecessor recorded (every one is
   * confirmed by now). A missing result is never guessed.
   */
  private resolveReferences(refs: Array<[string, actions.Reference]>): Record<string, string> {
    const values: Record<string, string> = {};
    for (const [name, reference] of refs) {
      const source = this.log.get(reference.from);
      if (source === null || source.state !== "confirmed") {
        const state = source === null ? "missing" : source.state;
        throw new Unresolvable(`parameter "${name}" reads from ${reference.from}, which is ${state}`);
      }
      const value = resultValue(source, reference.field);
      if (!value) {
        throw new Unresolvable(
          `${source.id} is confirmed but recorded no "${reference.field}" for parameter "${name}"; not guessing it`,
        );
      }
      values[name] = actions.render(reference, value);
    }
    return values;
  }

  /**
   * The intent with our lease on it (in memory: it is written with the next change), or null
   * while another live worker holds it. A new owner bumps the epoch, which is the fencing
   * token the services see.
   */
  private lease(intent: Intent, now: number): Intent | null {
    if (bugs.SINGLE_WORKER || bugs.BUG === "constant-fencing-token") {
      // The only worker needs no lease: the intent is ours for as long as we act on it.
      const leased = copyIntent(intent);
      leased.leaseUntilMs = UNLEASED_UNTIL_MS;
      return leased;
    }
    const owner = intent.leaseOwner;
    const mine = owner === this.owner;
    const earlierLife = owner !== null && workerOf(owner) === this.workerId;
    if (!(owner === null || intent.leaseUntilMs < now || mine || earlierLife)) return null;
    const leased = copyIntent(intent);
    if (!mine) {
      leased.leaseOwner = this.owner;
      leased.leaseEpoch += 1;
    }
    leased.leaseUntilMs = now + this.limits.lease_ms;
    return leased;
  }

  /**
   * Writes `next` if the row is still as `before` was read; sends the event of a state change
   * at once, so that the timeline shows it before anything it allows happens.
   */
  private commit(before: Intent, next: Intent, note: string, tally: Tally): boolean {
    next.updatedMs = nowMs();
    if (!this.log.write(next, before.version, before.state, note)) return false; // another worker changed it first
    if (next.state !== before.state) {
      tally.changes += 1;
      this.emit({ intent_id: next.id, from: before.state, state: next.state, note });
    }
    return true;
  }

  // -- sending ------------------------------------------------------------------------------

  /** Marks the intent submitted (durably), sends it, and records what the answer means. */
  private async send(
    before: Intent,
    leased: Intent,
    params: actions.Params,
    note: string,
    tally: Tally,
    { rotateKey = false, believeAnswer = false } = {},
  ): Promise<void> {
    const service = this.services[actions.SERVICE_OF[before.action]];
    const next = copyIntent(leased);
    if (service.needsPreparation(next)) {
      // A put's precondition or a transfer's signed bytes: read and recorded with the
      // "submitted" below, before the first send; never again after it.
      try {
        Object.assign(next.evidence, await service.prepare(next, params, this.log));
      } catch (problem) {
        if (!(problem instanceof NotPrepared)) throw problem;
        this.notPrepared(before, leased, problem.message, tally);
        return;
      }
    }
    const now = nowMs();
    if (bugs.BUG === "key-per-attempt" && next.attempts > 0) {
      // The bug: a new key for every attempt, so the service cannot tell a resend from a new request.
      rotateKey = true;
    }
    if (rotateKey) {
      // Correctly, only once a lookup proved that nothing landed under the old key and nothing
      // can any more.
      const previous = (next.evidence.previous_keys as string[] | undefined) ?? [];
      next.evidence.previous_keys = [...previous, next.key];
      next.key = newKey();
      next.keyFirstSentMs = null;
    }
    next.state = "submitted";
    next.attempts += 1;
    next.keyFirstSentMs = next.keyFirstSentMs ?? now;
    next.lastSentMs = now;
    next.evidence.key = next.key;
    next.evidence.last_sent_ms = now;
    if (next.evidence.first_sent_ms === undefined) next.evidence.first_sent_ms = now;
    // Whether an earlier send may have landed: a refusal of this one says nothing of it.
    const maybeLanded = leased.maybeExecuted || believeAnswer;
    if (believeAnswer) {
      // The service replays the first answer under this key if the first send landed, so what
      // comes back is the intent's answer.
      next.maybeExecuted = false;
    }
    if (!this.commit(before, next, note, tally)) return;
    // From here on the request may leave the process: "submitted" is durable, so a crash now
    // leads to a lookup, never to a blind resend.
    if (nowMs() >= next.leaseUntilMs) return; // slow past our lease since the commit: another worker may own it
    tally.sent += 1;
    const result = await service.write(next, params, next.leaseEpoch);
    let readBack: Lookup | null = null;
    if (
      (result.kind === DONE && service.readsBackSuccess()) ||
      result.kind === CONFLICT ||
      (result.kind === NEEDS_DECISION && maybeLanded)
    ) {
      // A success that may be hollow, a refusal our own earlier send may have caused, or a
      // refusal of a resend whose earlier send may have landed.
      readBack = await service.lookup(next, params);
    }
    if (nowMs() > next.leaseUntilMs) return; // the lease ran out while the request was out: our view is stale
    await this.recordOutcome(next, params, service, result, readBack, tally, maybeLanded);
  }

  private async recordOutcome(
    sent: Intent,
    params: actions.Params,
    service: Service,
    result: Outcome,
    readBack: Lookup | null,
    tally: Tally,
    maybeLanded: boolean,
  ): Promise<void> {
    const next = copyIntent(sent);
    const { kind, error } = result;
    if (error) next.evidence.last_error = error;
    if (
      kind === AMBIGUOUS &&
      sent.action === "chain.transfer" &&
      sent.attempts < this.limits.attempts_max &&
      bugs.BUG === "re-sign-after-timeout"
    ) {
      // The bug, the nonce trap: "the node never got it", so the transfer is signed anew with
      // the nonce the node now reports as next, and sent at once. The first one may well be
      // mined already: two transfers.
      next.maybeExecuted = true;
      for (const field of ["raw_tx", "tx_hash", "nonce", "from"]) delete next.evidence[field];
      await this.send(sent, next, params, "signed again with the next nonce", tally);
      return;
    }
    if (kind === FENCED) return; // a newer worker owns the intent; its decision stands
    let state: string;
    let note: string;
    const found = readBack !== null && readBack.kind === FOUND;
    const foundMatching = found && readBack.paramsMatch !== false;
    if (kind === DONE) {
      if (readBack === null || foundMatching) {
        next.evidence.external_id = result.externalId;
        delete next.evidence.last_error;
        [state, note] = ["confirmed", "confirmed by the service"];
      } else {
        next.maybeExecuted = true;
        const seen = `${readBack.kind} ${readBack.detail ?? ""}`.trim();
        next.evidence.last_error = `a success the read-back did not show (${seen})`;
        [state, note] = ["unknown", "a success the read-back did not show"];
      }
    } else if (kind === NEEDS_DECISION) {
      // Never sent again: a person must fix the permission or the input and propose again.
      // The first such refusal is kept, whatever later lookups say.
      if (next.evidence.decision === undefined) next.evidence.decision = { status: result.status, error: result.words };
      const decision = next.evidence.decision as Decision;
      const refused = `refused with ${decision.status}: ${decision.error}`;
      if (!maybeLanded) {
        next.evidence.could_duplicate = false;
        [state, note] = ["escalated", `${refused}; a person must decide, and nothing was done`];
      } else if (foundMatching) {
        next.evidence.external_id = readBack!.externalId;
        delete next.evidence.last_error;
        delete next.evidence.decision;
        [state, note] = ["confirmed", `confirmed by a read-back: an earlier send of it landed (${refused})`];
      } else if (found) {
        next.evidence.external_id = readBack!.externalId;
        next.evidence.could_duplicate = true;
        [state, note] = ["escalated", `${refused}; an effect exists with parameters other than the authorised ones`];
      } else {
        // The earlier send may still land, or not show yet: looked up until that is settled
        // (see decide), never sent again.
        next.maybeExecuted = true;
        [state, note] = ["unknown", `${refused}; an earlier send may have landed, so it is looked up first`];
      }
    } else if (kind === REJECTED) {
      if (sent.maybeExecuted) [state, note] = ["unknown", `refused, but an earlier send may have landed: ${error}`];
      else [state, note] = ["failed", `refused: ${error}`];
    } else if (kind === NOT_EXECUTED) {
      if (sent.maybeExecuted) {
        [state, note] = ["unknown", `not executed, but an earlier send may have landed: ${error}`];
      } else if (sent.attempts >= this.limits.attempts_max && !holdsANonce(sent)) {
        [state, note] = ["failed", `never executed in ${sent.attempts} attempts: ${error}`];
      } else {
        [state, note] = ["recorded", `not executed, will retry: ${error}`];
      }
    } else if (kind === AMBIGUOUS) {
      next.maybeExecuted = true;
      [state, note] = ["unknown", `no definite answer: ${error}`];
    } else {
      // CONFLICT: the object or the account moved on; the read-back says whether by us. A
      // refusal is final only if the read-back proves another version (or transaction) took
      // our place, reads cannot lag, and no earlier send may have landed.
      const final = result.definite === true && service.contract.reads === "strong" && !sent.maybeExecuted;
      if (foundMatching) {
        next.evidence.external_id = readBack!.externalId;
        delete next.evidence.last_error;
        [state, note] = ["confirmed", `confirmed by a read-back: an earlier send of it landed (${error})`];
      } else if (readBack !== null && readBack.kind === SUPERSEDED && final) {
        [state, note] = ["failed", `refused: ${error}; ${readBack.detail}`];
      } else {
        [state, note] = ["unknown", `refused, and the read-back cannot tell why yet: ${error}`];
      }
    }
    next.state = state;
    next.evidence.reason = note;
    this.commit(sent, next, note, tally);
  }

  /**
   * A first send whose reads failed is not sent: it counts the try and waits as after a
   * connection that could not be made; after attempts_max tries it is failed (never sent).
   */
  private notPrepared(before: Intent, leased: Intent, problem: string, tally: Tally): void {
    const next = copyIntent(leased);
    next.attempts += 1;
    next.lastSentMs = nowMs(); // drives the pause before the next try; nothing was sent
    next.evidence.last_error = problem;
    let note: string;
    if (next.attempts >= this.limits.attempts_max) {
      next.state = "failed";
      note = `never sent: what its first send needs could not be read: ${problem}`;
    } else {
      next.state = "recorded";
      note = `not sent yet: ${problem}`;
    }
    next.evidence.reason = note;
    this.commit(before, next, note, tally);
  }

  // -- resolving uncertain intents ------------------------------------------------------------

  /**
   * Whether a resend under the intent's key is a replay of the first send, if that landed: the
   * service honours keys, its successes cannot be hollow, and it still retains the key when
   * the resend arrives (allowing for the request's own time and a margin).
   */
  private keyProtects(intent: Intent, service: Service, now: number): boolean {
    const contract = service.contract;
    const retained =
      intent.keyFirstSentMs !== null &&
      now + this.timeoutMs + SAFETY_MARGIN_MS < intent.keyFirstSentMs + contract.key_retention_ms;
    return contract.idempotency_keys === "honored" && !service.successMayBeHollow() && retained;
  }

  /** The first resend goes at once (the request before it is over on our side); each later one waits one more request timeout. */
  private resendPauseOver(intent: Intent, now: number): boolean {
    const last = intent.lastSentMs;
    return last === null || now >= last + this.timeoutMs * (intent.attempts - 1);
  }

  /** An intent that may have taken effect: `submitted` by a worker that died before recording the answer, or `unknown`. */
  private async resolve(before: Intent, leased: Intent, params: actions.Params, tally: Tally): Promise<void> {
    const service = this.services[actions.SERVICE_OF[before.action]];
    if (service === undefined) return;
    const now = nowMs();
    const refused = "decision" in before.evidence; // never sent again: see decide
    if (this.keyProtects(before, service, now) && !refused && before.attempts < this.limits.attempts_max) {
      if (this.resendPauseOver(before, now)) {
        const note = "sent again under its key: the service replays the first answer if it landed";
        await this.send(before, leased, params, note, tally, { believeAnswer: true });
        return;
      }
    }
    // Otherwise only the service's records can tell; reads are free.
    tally.lookedUp += 1;
    const lookedAtMs = nowMs();
    const found = await service.lookup(before, params);
    await this.decide(before, params, service, found, lookedAtMs, tally);
  }

  /** What a lookup sent at `lookedAtMs` proves (executor/src/intent_engine/reconcile.rs, `decide`). */
  private async decide(
    before: Intent,
    params: actions.Params,
    service: Service,
    found: Lookup,
    lookedAtMs: number,
    tally: Tally,
  ): Promise<void> {
    const now = nowMs();
    const leased = this.lease(before, now); // again: the lookup took time
    if (leased === null) return;
    if (before.state === "submitted") {
      // Its sender died after marking it: it may have been sent. Until a lookup proves
      // otherwise, a resend's definite refusal does not make that send unsent.
      leased.maybeExecuted = true;
    }
    const contract = service.contract;
    const limits = this.limits;
    const write = (state: string, note: string): void => {
      leased.state = state;
      leased.evidence.reason = note;
      this.commit(before, leased, note, tally);
    };
    // "Not there" is final once every request sent could no longer land and every read could
    // no longer lag.
    let settledAt: number | null = null;
    if (before.lastSentMs !== null) {
      settledAt = before.lastSentMs + contract.settle_ms_max + contract.read_lag_ms_max + this.timeoutMs + SAFETY_MARGIN_MS;
    }
    // As of when the lookup was sent: a worker paused before it read the answer must not take
    // an old "not there" for a final one.
    const settled = settledAt === null || lookedAtMs >= settledAt;
    // Escalate what stays unknowable too long, never before a negative answer could have
    // become final twice over.
    const firstSent = before.evidence.first_sent_ms as number | undefined;
    const overdue =
      firstSent !== undefined &&
      now >= firstSent + Math.max(limits.escalate_after_ms, 2 * ((settledAt ?? 0) - (before.lastSentMs ?? 0)));
    // The service refused a resend with a status a person must act on: looked up until an
    // earlier send is found or proven absent, never sent again.
    const decision = before.evidence.decision as Decision | undefined;
    if (found.kind === FOUND) {
      leased.evidence.external_id = found.externalId;
      if (found.paramsMatch !== false) {
        // What was refused was a resend.
        delete leased.evidence.last_error;
        delete leased.evidence.decision;
        write("confirmed", "confirmed by lookup");
      } else {
        leased.evidence.could_duplicate = true;
        write("escalated", "an effect exists with parameters other than the authorised ones");
      }
    } else if (found.kind === ABSENT && settled && decision !== undefined) {
      leased.maybeExecuted = false;
      leased.evidence.could_duplicate = false;
      const refused = `refused with ${decision.status}: ${decision.error}`;
      write("escalated", `${refused}; no send of it took effect, and none can any more: a person must decide`);
    } else if (found.kind === ABSENT && settled) {
      if (before.attempts >= limits.attempts_max && !holdsANonce(before)) {
        leased.maybeExecuted = false;
        write("failed", `no effect after ${before.attempts} attempts, and none can appear any more`);
        return;
      }
      // Nothing landed and nothing can: a new attempt is safe. Where a success may be hollow
      // (acks that may lie, a message the inbox never showed), with a fresh key: the service
      // may have saved a silent no-op's success under the old one.
      leased.maybeExecuted = false;
      const rotateKey = service.successMayBeHollow() && before.lastSentMs !== null;
      await this.send(before, leased, params, "absent for good: sent again", tally, { rotateKey });
    } else if (found.kind === SUPERSEDED && settled) {
      leased.maybeExecuted = false;
      write("failed", `it can no longer take effect: ${found.detail}`);
    } else if (
      found.kind === ABSENT &&
      decision === undefined &&
      service.resendIsGuarded() &&
      (before.attempts < limits.attempts_max || holdsANonce(before)) &&
      this.resendPauseOver(before, now)
    ) {
      // A conditional put or a signed transaction lands at most once however often it is sent,
      // so it need not wait for the settle bound.
      const note =
        before.action === "chain.transfer" ? "broadcast again: the same signed bytes" : "sent again under its precondition";
      await this.send(before, leased, params, note, tally);
    } else if (found.kind === FAILED && overdue) {
      leased.evidence.last_error = found.detail;
      leased.evidence.could_duplicate = true;
      write("escalated", `unresolved past its deadline; the lookup failed: ${found.detail}`);
    } else if (before.state === "submitted") {
      // Its sender died before recording the answer, and nothing is known yet.
      leased.maybeExecuted = true;
      if (found.kind === FAILED) leased.evidence.last_error = found.detail;
      write("unknown", "the worker that sent it stopped before recording the answer");
    }
    // Otherwise it stays unknown, and a later pass asks again.
  }

  // -- lineage -------------------------------------------------------------------------------

  /**
   * A blocked intent, once nothing it waits for (the lineage of the intent it replaces, the
   * intents it comes after) is unresolved.
   */
  private release(before: Intent, leased: Intent, tally: Tally): void {
    const released = this.released(before.replaces, before.afterIds);
    if (released === null) return;
    const [state, note, couldDuplicate] = released;
    leased.state = state;
    leased.evidence.reason = note;
    if (couldDuplicate !== null) leased.evidence.could_duplicate = couldDuplicate;
    this.commit(before, leased, note, tally);
  }

  /**
   * [state, reason, couldDuplicate] for an intent that replaces `replaces` and comes after
   * `after`, or null while something it waits for is unresolved. A failed or escalated
   * predecessor decides at once: nothing could change that outcome.
   */
  private released(replaces: string | null, after: string[]): Released | null {
    let unresolved = false;
    for (const beforeId of after) {
      const before = this.log.get(beforeId);
      if (before === null) return ["escalated", `waits for ${beforeId} (missing from the log)`, false];
      if (before.state === "failed") return ["failed", `cancelled: the intent it comes after (${beforeId}) failed`, null];
      // Nothing of this step was ever sent: continuing cannot write twice.
      if (before.state === "escalated") return ["escalated", `waits for ${beforeId}, which is escalated`, false];
      if (before.state !== "confirmed") unresolved = true;
    }
    let note: string | null = null;
    if (replaces !== null) {
      const [verdict, by] = this.lineage(replaces);
      if (verdict === "executed") return ["failed", cancelled(replaces, by!), null];
      if (verdict === "escalated") {
        // Never sent: going on with it cannot repeat anything of its own.
        return ["escalated", `${by}, in the lineage of ${replaces}, is escalated; executing this one could do it twice`, false];
      }
      if (verdict === "unresolved") return null;
      note = `unblocked: nothing in the lineage of ${replaces} took effect`;
    }
    if (unresolved) return null;
    return ["recorded", note ?? `unblocked: ${after.join(", ")} confirmed`, null];
  }

  /** Whether a blocked step could be decided now (its last predecessor was confirmed in the pass that just ran). */
  private aStepCanBeReleased(): boolean {
    return this.log
      .active()
      .some((i) => i.state === "blocked" && i.afterIds.length > 0 && this.released(i.replaces, i.afterIds) !== null);
  }

  /**
   * What the chain of intents ending at `intentId` (following `replaces`) established:
   * ["executed", by] if one took effect (every action is exclusive: one refund per payment,
   * one workspace per external id, one version per object, one transfer per recipient),
   * ["nothing"] if none took effect or can (each failed, or was escalated with could_duplicate
   * false: refused for a person's decision, which the replacement is), ["escalated", by] if
   * one needs a person and may have taken effect, and ["unresolved"] while one may still take
   * effect.
   */
  private lineage(intentId: string): [string, string | null] {
    let escalated: string | null = null;
    let current = intentId;
    const length = this.log.all().length;
    for (let step = 0; step <= length; step++) {
      // A chain is no longer than the log.
      const intent = this.log.get(current);
      if (intent === null) return ["escalated", `${current} (missing from the log)`];
      if (intent.state === "confirmed") return ["executed", intent.id];
      if (intent.state === "escalated" && intent.evidence.could_duplicate === false) {
        // Refused for a decision, certainly without effect: as good as failed.
      } else if (intent.state === "escalated") {
        escalated = escalated ?? intent.id;
      } else if (intent.state === "unknown" && bugs.BUG === "replacement-while-unknown") {
        // The bug: an unknown predecessor is taken as one that did nothing.
      } else if (intent.state !== "failed") {
        return ["unresolved", null];
      }
      if (intent.replaces === null) break;
      current = intent.replaces;
    }
    return escalated !== null ? ["escalated", escalated] : ["nothing", null];
  }
}

// -- the protocol ----------------------------------------------------------------------------

/**
 * `given` over `defaults`, refusing a term we do not know: a misspelt term must never be
 * silently replaced by its default.
 */
function terms<T extends object>(given: unknown, defaults: T, what: string): T {
  if (given === undefined || given === null) return { ...defaults };
  if (!actions.isObject(given)) throw new ProtocolError(MALFORMED, `init: ${what} must be an object`);
  const known = defaults as Record<string, unknown>;
  const unknown = Object.keys(given)
    .filter((k) => !(k in known))
    .sort();
  if (unknown.length > 0) throw new ProtocolError(MALFORMED, `init: unknown field '${unknown[0]}' in ${what}`);
  const out: Record<string, unknown> = { ...known };
  for (const [name, value] of Object.entries(given)) {
    const want = typeof known[name];
    // Numbers are integers: a limit of 1.5 ms is a mistake, not a value.
    if (typeof value !== want || (want === "number" && !Number.isSafeInteger(value))) {
      throw new ProtocolError(MALFORMED, `init: ${what}.${name} must be a ${want === "number" ? "int" : want}`);
    }
    out[name] = value;
  }
  return out as T;
}

/** Reads requests from stdin, one JSON object per line, and answers each exactly once. */
class Server {
  private executor: Executor | null = null;

  constructor(private readonly announced: readonly string[]) {}

  /** One line of JSON on stdout. A pipe's writes are synchronous in Node on Linux: in order, and out before exit. */
  private write(message: Record<string, unknown>): void {
    process.stdout.write(`${JSON.stringify(message)}\n`);
  }

  private error(inReplyTo: unknown, code: number, text: string): void {
    this.write({ type: "error", in_reply_to: inReplyTo ?? null, code, text });
  }

  /** Events go out as they happen, always before the reply. */
  private emitEvent = (event: Record<string, unknown>): void => {
    this.write({ type: "event", ...event });
  };

  /** Serves until end of input or shutdown; one request at a time, in order. */
  async serve(): Promise<void> {
    const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
    for await (const line of lines) {
      if (Buffer.byteLength(line, "utf8") > LINE_BYTES_MAX) {
        this.error(null, MALFORMED, "a line longer than 1 MiB");
        continue;
      }
      if (line.trim() === "") continue;
      let request: unknown;
      try {
        request = JSON.parse(line);
      } catch (e) {
        this.error(null, MALFORMED, `not JSON: ${(e as Error).message}`);
        continue;
      }
      if (!actions.isObject(request)) {
        this.error(null, MALFORMED, "a request is a JSON object");
        continue;
      }
      const msgId = request.msg_id;
      const kind = request.type;
      if (typeof msgId !== "number" || !Number.isSafeInteger(msgId) || msgId < 0) {
        this.error(msgId, MALFORMED, "a request needs a numeric msg_id");
        continue;
      }
      try {
        const body = await this.handle(kind, request);
        this.write({ ...body, type: `${String(kind)}_ok`, in_reply_to: msgId });
      } catch (e) {
        if (e instanceof ProtocolError) {
          this.error(msgId, e.code, e.text);
        } else {
          // The state could not be read or written, or a bug: say so.
          warn(`${String(kind)} failed: ${(e as Error).stack ?? String(e)}`);
          this.error(msgId, CRASH, `${(e as Error).name}: ${(e as Error).message}`);
        }
        continue;
      }
      if (kind === "shutdown") return;
    }
  }

  private async handle(kind: unknown, request: Record<string, unknown>): Promise<Record<string, unknown>> {
    if (kind === "init") return await this.init(request);
    if (!["propose", "status", "reconcile", "drain", "shutdown"].includes(kind as string)) {
      throw new ProtocolError(NOT_SUPPORTED, `unknown request type '${String(kind)}'`);
    }
    if (kind === "shutdown") return {};
    const executor = this.executor;
    if (executor === null) throw new ProtocolError(UNAVAILABLE, "send init first");
    if (kind === "propose") return { intent: executor.propose(request.intent) };
    if (kind === "status") {
      const ids = request.ids ?? null;
      if (ids !== null && (!Array.isArray(ids) || !ids.every((i) => typeof i === "string"))) {
        throw new ProtocolError(MALFORMED, "ids must be a list of strings");
      }
      return { intents: executor.status(ids === null ? null : new Set(ids as string[])) };
    }
    if (kind === "reconcile") {
      const tally = await executor.runPass();
      return { sent: tally.sent, looked_up: tally.lookedUp };
    }
    const timeoutMs = request.timeout_ms ?? DRAIN_MS_MAX;
    if (typeof timeoutMs !== "number" || !Number.isSafeInteger(timeoutMs) || timeoutMs < 0 || timeoutMs > DRAIN_MS_MAX) {
      throw new ProtocolError(MALFORMED, `timeout_ms must be an integer from 0 to ${DRAIN_MS_MAX}`);
    }
    await executor.drain(timeoutMs);
    return {};
  }

  private async init(request: Record<string, unknown>): Promise<Record<string, unknown>> {
    if (request.protocol !== PROTOCOL) {
      throw new ProtocolError(
        NOT_SUPPORTED,
        `protocol ${String(request.protocol)} is not supported; this executor speaks ${PROTOCOL}`,
      );
    }
    if (this.executor !== null) throw new ProtocolError(MALFORMED, "init was already received");
    const workerId = request.worker_id;
    const stateDir = request.state_dir;
    if (typeof workerId !== "string" || workerId === "") {
      throw new ProtocolError(MALFORMED, "init: worker_id must be a non-empty string");
    }
    if (typeof stateDir !== "string" || stateDir === "") throw new ProtocolError(MALFORMED, "init: no state_dir");
    const serviceConfig: Record<string, { url: string; contract: Contract }> = {};
    const given = request.services ?? {};
    if (!actions.isObject(given)) throw new ProtocolError(MALFORMED, "init: services must be an object");
    for (const [name, cfg] of Object.entries(given)) {
      if (!actions.isObject(cfg) || typeof cfg.url !== "string") {
        throw new ProtocolError(MALFORMED, `init: service ${name} needs a url`);
      }
      serviceConfig[name] = { url: cfg.url, contract: terms(cfg.contract, DEFAULT_CONTRACT, `${name}.contract`) };
    }
    const secrets = request.secrets ?? {};
    if (!actions.isObject(secrets) || !Object.values(secrets).every((v) => typeof v === "string")) {
      throw new ProtocolError(MALFORMED, "init: secrets must be an object of strings");
    }
    const limits = terms(request.limits, DEFAULT_LIMITS, "limits");
    try {
      this.executor = new Executor(
        workerId,
        stateDir,
        serviceConfig,
        secrets as Record<string, string>,
        limits,
        this.announced,
        this.emitEvent,
      );
    } catch (e) {
      throw new ProtocolError(CRASH, `cannot open the state in ${stateDir}: ${(e as Error).message}`);
    }
    try {
      // Deliveries reach this life on a loopback port of its own.
      await this.executor.webhooks.listen();
    } catch (e) {
      throw new ProtocolError(CRASH, `cannot listen for webhooks: ${(e as Error).message}`);
    }
    // `init_ok` goes out before the SDKs load (`sdks.ts` says why).
    sdks.preloadAfterAnswer(Object.keys(serviceConfig));
    return { executor: EXECUTOR, actions: [...this.announced], features: [FEATURE_WORKFLOWS, FEATURE_WEBHOOKS] };
  }
}

function usage(problem: string): never {
  process.stderr.write(
    `usage: executor.js [--bug NAME] [--actions ACTION,...] [--single-worker]\nerror: ${problem}\n` +
      `bugs: ${Object.keys(bugs.BUGS).sort().join(", ")}\n`,
  );
  process.exit(2);
}

async function main(argv: string[]): Promise<number> {
  let bug: string | null = null;
  let singleWorker = false;
  let announced: readonly string[] = actions.ACTIONS;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === "--bug" || arg === "--actions") {
      const value = argv[++i];
      if (value === undefined) usage(`${arg} needs a value`);
      if (arg === "--bug") {
        if (!(value in bugs.BUGS)) usage(`--bug: unknown bug ${value}`);
        bug = value;
      } else {
        announced = value.split(",").filter((a) => a !== "");
        const unknown = announced.filter((a) => !actions.ACTIONS.includes(a));
        if (unknown.length > 0) usage(`--actions: unknown action ${unknown[0]}; known: ${actions.ACTIONS.join(", ")}`);
      }
    } else if (arg === "--single-worker") {
      singleWorker = true;
    } else {
      usage(`unknown argument ${arg}`);
    }
  }
  bugs.configure(bug, singleWorker);
  // stdout is for the protocol only: whatever an SDK prints through the console goes to stderr,
  // so that it can never break the framing.
  const toStderr = (...args: unknown[]): void => {
    process.stderr.write(`${args.map(String).join(" ")}\n`);
  };
  console.log = toStderr;
  console.info = toStderr;
  console.debug = toStderr;
  await new Server(announced).serve();
  return 0;
}

main(process.argv.slice(2)).then(
  // Exit at once: no timer or idle socket of an SDK may keep the process alive; every answer
  // went out already, and the log commits before each one.
  (code) => process.exit(code),
  (error: unknown) => {
    warn(`fatal: ${(error as Error).stack ?? String(error)}`);
    process.exit(1);
  },
);
