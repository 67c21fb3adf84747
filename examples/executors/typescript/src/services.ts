/**
 * How each action talks to its service, through the official Node SDKs: the write, what its
 * answer means, and the lookup that asks the service what really happened.
 *
 * - payments.refund, with `stripe`: guarded by the idempotency key; looked up among the
 *   refunds of the payment intent, by the intent id in metadata[twice_intent].
 * - workspaces.create, with plain fetch: guarded by the idempotency key and, where offered,
 *   the fencing token; looked up by external id.
 * - files.put, with `@aws-sdk/client-s3`: guarded by If-None-Match / If-Match of the version
 *   read before the first send (S3 has no idempotency key); looked up with HEAD (our ETag is
 *   the quoted MD5 of the body).
 * - chain.transfer, with `viem`: signed once, locally, with the account key (EIP-1559); guarded
 *   by the nonce of those bytes; looked up by the receipt of their hash, then the account's nonce.
 * - messages.send, with `resend`: guarded by the idempotency key; a 200 only says the API
 *   accepted the message, so it is always read back, and looked up, in the recipient's inbox
 *   (the messages service's test mailbox), by the intent id in the X-Twice-Intent header.
 *
 * Every SDK's own retries are off: the executor owns every resend, because only it knows
 * whether a resend is a replay (a key that still protects) or a second effect.
 *
 * Every answer becomes an `Outcome`; the one rule that matters most: **a timeout is never a
 * "no"**. Only what proves that nothing left the process (the connection was never made) is
 * "not executed"; everything after the first byte may have been sent is "ambiguous".
 */

import { createHash } from "node:crypto";
import * as http from "node:http";
// Types only: the SDKs themselves are loaded on first use (`./sdks`, which says why).
import type { PutObjectCommandInput, S3Client } from "@aws-sdk/client-s3";
import type { Resend } from "resend";
import type Stripe from "stripe";
import type { Hex, PublicClient } from "viem";
import type { PrivateKeyAccount } from "viem/accounts";
import { isObject, type Params } from "./actions";
import * as bugs from "./bugs";
import * as sdks from "./sdks";
import type { Evidence, Intent, IntentLog } from "./intentLog";

// What a write attempt established.
export const DONE = "done"; // the service says the effect exists (externalId says which)
export const REJECTED = "rejected"; // a definite refusal: this attempt did not execute
// A definite refusal a person must act on (401, 403: a credential or a permission; 400, 422:
// the input): this attempt did not execute, and resending it gets the same answer.
export const NEEDS_DECISION = "needs_decision";
/** The statuses of such a refusal (vocabulary::DECISION_STATUSES). */
const DECISION_STATUSES = [400, 401, 403, 422];
export const NOT_EXECUTED = "not_executed"; // certainly not executed, may be sent again (no connection, 429)
export const AMBIGUOUS = "ambiguous"; // may or may not have executed: timeout, reset, 5xx, ...
export const FENCED = "fenced"; // the service refused our fencing token: a newer worker owns the intent
export const CONFLICT = "conflict"; // the object or account moved on (412, nonce too low): perhaps by us

// What a lookup found.
export const FOUND = "found"; // the effect exists (paramsMatch: with exactly the authorised parameters)
export const ABSENT = "absent"; // not there (final only once nothing in flight can land, no read can lag)
export const SUPERSEDED = "superseded"; // not there and can no longer appear (another version, nonce used)
export const FAILED = "failed"; // the lookup itself failed

/**
 * The metadata key under which a refund carries the intent's id, so that a lookup can tell
 * this intent's refund from any other refund of the same payment intent.
 */
const INTENT_METADATA_KEY = "twice_intent";
/** Pages a lookup follows, at most. */
const LOOKUP_PAGES_MAX = 10;
/** Gas of a plain value transfer. */
const TRANSFER_GAS = 21_000n;

export interface Outcome {
  kind: string;
  error: string;
  externalId?: string;
  // CONFLICT only: the state certainly moved on (412, nonce too low), rather than a race lost
  // to a concurrent write (409, replacement underpriced).
  definite?: boolean;
  // NEEDS_DECISION only: the status, and the service's own code and message.
  status?: number;
  words?: string;
}

export interface Lookup {
  kind: string;
  externalId?: string;
  paramsMatch?: boolean;
  detail?: string;
}

export interface Contract {
  idempotency_keys: string;
  key_retention_ms: number;
  reads: string;
  read_lag_ms_max: number;
  acks: string;
  settle_ms_max: number;
  unique_business_key: boolean;
  fencing: boolean;
  conditional_writes: boolean;
}

/** What a first send must read and record (a precondition, a signature) could not be read: nothing is sent. */
export class NotPrepared extends Error {}

function outcome(kind: string, error = "", extra: Partial<Outcome> = {}): Outcome {
  return { kind, error, ...extra };
}

function describe(error: unknown): string {
  if (error instanceof Error) return `${error.name}: ${error.message}`;
  return String(error);
}

/** The error and every error it wraps (`cause`, and stripe's `detail`), outermost first. */
function chain(error: unknown): unknown[] {
  const seen: unknown[] = [];
  let current: unknown = error;
  while (current !== null && current !== undefined && !seen.includes(current) && seen.length < 10) {
    seen.push(current);
    const wrapper = current as { cause?: unknown; detail?: unknown };
    current = wrapper.cause ?? (wrapper.detail instanceof Error ? wrapper.detail : undefined);
  }
  return seen;
}

function codeOf(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === "string" ? code : undefined;
}

/**
 * True only when no byte of the request can have left the process: the connection was refused
 * (or what to send could not be prepared). A reset, a closed connection, a timeout: the request
 * may have been written, and read.
 */
function neverSent(error: unknown): boolean {
  return chain(error).some((e) => e instanceof NotPrepared || codeOf(e) === "ECONNREFUSED");
}

function timedOut(error: unknown): boolean {
  return chain(error).some((e) => {
    const name = (e as { name?: unknown } | null)?.name;
    return name === "TimeoutError" || codeOf(e) === "ETIMEDOUT" || codeOf(e) === "UND_ERR_HEADERS_TIMEOUT";
  });
}

/** What an exception from the HTTP stack means. */
function transportOutcome(error: unknown, timeoutMs: number): Outcome {
  if (neverSent(error)) return outcome(NOT_EXECUTED, `not sent: ${describe(error)}`);
  if (timedOut(error)) {
    if (bugs.BUG === "timeout-as-failure") {
      // The bug: no answer is taken as "it did not happen", a definite no.
      return outcome(REJECTED, `timed out after ${timeoutMs} ms, taken as a refusal`);
    }
    return outcome(AMBIGUOUS, `no answer within ${timeoutMs} ms`);
  }
  return outcome(AMBIGUOUS, describe(error));
}

/** A refusal that needs a person's decision, in the service's own words. */
function decisionOutcome(status: number, words: string): Outcome {
  if (bugs.BUG === "retry-403") {
    // The bug: a refusal is a bad moment, like a 429; once the permission is granted or the
    // input accepted, the retry goes through, and nobody decided anything.
    return outcome(NOT_EXECUTED, `HTTP ${status}: ${words}, retried`);
  }
  return outcome(NEEDS_DECISION, `HTTP ${status}: ${words}`, { status, words });
}

/** What an HTTP error status means, for the JSON services (Stripe-style error bodies). */
function httpOutcome(status: number, code: string | undefined, kind: string | undefined, message: string): Outcome {
  const error = `HTTP ${status}: ${message}`;
  if (status === 409) {
    if (code === "stale_fencing_token") return outcome(FENCED, error);
    // In flight under this key, or a create whose business id exists (perhaps ours): only a
    // lookup can tell.
    return outcome(AMBIGUOUS, error);
  }
  // Stripe saves no result for a 429: the request did not execute.
  if (status === 429) return outcome(NOT_EXECUTED, error);
  // The same key with other parameters: whose request the key holds, only a lookup tells.
  if (status === 408 || kind === "idempotency_error") return outcome(AMBIGUOUS, error);
  if (DECISION_STATUSES.includes(status)) {
    return decisionOutcome(status, code || kind ? `${code || kind}: ${message}` : message);
  }
  if (status >= 400 && status < 500) return outcome(REJECTED, error);
  return outcome(AMBIGUOUS, error);
}

/** S3's ETag for a simple PUT of `text`. */
function quotedMd5(text: string): string {
  return `"${createHash("md5").update(text, "utf8").digest("hex")}"`;
}

/** A fetch that gives up after `timeoutMs`: the abort is a timeout, never a "no". */
function fetchWithin(url: string, init: RequestInit, timeoutMs: number): Promise<Response> {
  return fetch(url, { ...init, signal: AbortSignal.timeout(timeoutMs) });
}

/** One service from init: its URL and contract, and what every action shares. */
export abstract class Service {
  readonly url: string;

  constructor(
    url: string,
    readonly contract: Contract,
    readonly secrets: Record<string, string>,
    readonly timeoutMs: number,
  ) {
    this.url = url.replace(/\/+$/, "");
  }

  /** [fencing tokens, conditional writes]: what the contract offers against a stale writer. Where offered, used. */
  guardsOffered(): [boolean, boolean] {
    if (bugs.BUG === "no-fencing") {
      // The bug: the guards are ignored, so a stale worker's write can win.
      return [false, false];
    }
    return [this.contract.fencing, this.contract.conditional_writes];
  }

  /**
   * Where acks may lie, a success may be a silent no-op: a key never replays what happened,
   * and once "not there" is final the intent goes again under a new key.
   */
  successMayBeHollow(): boolean {
    return this.contract.acks === "may_lie";
  }

  /** A success that may be hollow is believed only once a read-back shows it. */
  readsBackSuccess(): boolean {
    if (bugs.BUG === "trust-200") {
      // The bug: a 200 is taken at its word.
      return false;
    }
    return this.successMayBeHollow();
  }

  /** Whether the first send must read and record something first. */
  needsPreparation(_intent: Intent): boolean {
    return false;
  }

  /** Reads and returns what the first send needs recorded (a precondition, signed bytes). */
  async prepare(_intent: Intent, _params: Params, _log: IntentLog): Promise<Evidence> {
    return {};
  }

  /** Whether a resend can land at most once without an idempotency key. */
  resendIsGuarded(): boolean {
    return false;
  }

  /** One write attempt under `key`. */
  protected abstract send(intent: Intent, params: Params, key: string, fencingToken: number): Promise<unknown>;
  /** What an error thrown by send means. */
  protected abstract outcomeOfError(intent: Intent, error: unknown): Outcome;
  /** What a success means. */
  protected abstract outcomeOfAnswer(intent: Intent, params: Params, answer: unknown): Outcome;
  /** What the service's own records say of the intent's effect. Never throws: a failure is FAILED. */
  abstract lookup(intent: Intent, params: Params): Promise<Lookup>;

  /** One write attempt under the intent's key, as an Outcome (never throws). */
  async write(intent: Intent, params: Params, fencingToken: number): Promise<Outcome> {
    let answer: unknown;
    try {
      answer = await this.send(intent, params, intent.key, fencingToken);
    } catch (error) {
      // Every error is an answer to classify, never a crash.
      return this.outcomeOfError(intent, error);
    }
    try {
      return this.outcomeOfAnswer(intent, params, answer);
    } catch (error) {
      // A success we cannot read proves nothing.
      return outcome(AMBIGUOUS, `an unreadable success: ${describe(error)}`);
    }
  }
}

// ---------------------------------------------------------------------------------------
// payments.refund: stripe-node

/**
 * stripe-node resends a request once when its connection was reset or closed (ECONNRESET,
 * EPIPE), even with maxNetworkRetries 0, on the guess that it never reached the API. A reset
 * may come after the refund was made; where keys are ignored or expired, that resend refunds
 * twice. This client hands every request to the SDK's own Node client and renames those two
 * codes, so the SDK sees a plain connection error, does not retry, and the executor decides.
 */
export function noResendOnClose(
  inner: InstanceType<typeof Stripe.HttpClient>,
): InstanceType<typeof Stripe.HttpClient> {
  // The class extends the SDK's, which is loaded on first use, so it is made here.
  class NoResendOnClose extends sdks.stripe().HttpClient {
    getClientName(): string {
      return inner.getClientName();
    }

    // The signature is the SDK's HttpClient.makeRequest.
    makeRequest(...args: Parameters<InstanceType<typeof Stripe.HttpClient>["makeRequest"]>) {
      return inner.makeRequest(...args).catch((error: unknown) => {
        const code = codeOf(error);
        if (code === "ECONNRESET" || code === "EPIPE") {
          const closed = new Error(`connection closed (${code})`, { cause: error }) as Error & { code: string };
          closed.code = `CLOSED_${code}`;
          throw closed;
        }
        throw error;
      });
    }
  }
  return new NoResendOnClose();
}

export class Payments extends Service {
  /** A stripe-node client pointed at this service (the fake), its own retries off. */
  client(): Stripe {
    const url = new URL(this.url);
    const StripeClass = sdks.stripe();
    return new StripeClass(this.secrets.payments_api_key ?? "sk_test_twice", {
      host: url.hostname,
      port: url.port || (url.protocol === "https:" ? "443" : "80"),
      protocol: url.protocol === "https:" ? "https" : "http",
      // No retry of the SDK's own: resending is the executor's decision.
      maxNetworkRetries: 0,
      timeout: this.timeoutMs,
      telemetry: false,
      // A connection of its own per request: a connection a fault closed is never reused.
      httpClient: noResendOnClose(StripeClass.createNodeHttpClient(new http.Agent({ keepAlive: false }))),
    });
  }

  protected send(intent: Intent, params: Params, key: string): Promise<unknown> {
    return this.client().refunds.create(
      {
        payment_intent: params.payment_intent as string,
        amount: params.amount as number,
        metadata: { [INTENT_METADATA_KEY]: intent.id },
      },
      { idempotencyKey: key },
    );
  }

  protected outcomeOfError(_intent: Intent, error: unknown): Outcome {
    if (error instanceof sdks.stripe().errors.StripeConnectionError) {
      // The SDK wraps the Node error in `detail`; that one tells whether anything was sent.
      return transportOutcome(error.detail ?? error, this.timeoutMs);
    }
    if (error instanceof sdks.stripe().errors.StripeError && error.statusCode) {
      return httpOutcome(error.statusCode, error.code, error.rawType ?? error.type, error.message);
    }
    return transportOutcome(error, this.timeoutMs);
  }

  protected outcomeOfAnswer(_intent: Intent, params: Params, answer: unknown): Outcome {
    const refund = answer as Stripe.Refund;
    if (refund.payment_intent === params.payment_intent && refund.amount === params.amount && refund.id) {
      return outcome(DONE, "", { externalId: refund.id });
    }
    return outcome(AMBIGUOUS, `a success whose parameters differ from the intent's: ${JSON.stringify(refund)}`);
  }

  /** The refunds of the payment intent, paged; ours carries our intent id. */
  async lookup(intent: Intent, params: Params): Promise<Lookup> {
    try {
      const client = this.client();
      const query: Stripe.RefundListParams = { payment_intent: params.payment_intent as string, limit: 100 };
      for (let page = 0; page < LOOKUP_PAGES_MAX; page++) {
        const list = await client.refunds.list(query);
        for (const refund of list.data) {
          if ((refund.metadata ?? {})[INTENT_METADATA_KEY] === intent.id) {
            return { kind: FOUND, externalId: refund.id, paramsMatch: refund.amount === params.amount };
          }
        }
        if (!list.has_more || list.data.length === 0) return { kind: ABSENT };
        query.starting_after = list.data[list.data.length - 1].id;
      }
    } catch (error) {
      // A failed lookup is an answer too: "cannot tell yet".
      return { kind: FAILED, detail: `listing refunds: ${describe(error)}` };
    }
    return { kind: FAILED, detail: `more than ${LOOKUP_PAGES_MAX} pages of refunds` };
  }
}

// ---------------------------------------------------------------------------------------
// webhooks (webhooks.ts): the endpoint, and the payment an event is about, through stripe-node

/** A registered webhook endpoint as the service answered: its id, its `whsec_` secret, its URL. */
export interface RegisteredEndpoint {
  id: string;
  secret: string;
  url: string;
}

/** The event types a trigger can name, and so the ones an endpoint asks for. */
export const WEBHOOK_EVENT_TYPES = ["payment_intent.succeeded"] as const;

/**
 * `POST /v1/webhook_endpoints` with `url` and `enabled_events[]`, under `idempotencyKey`: a
 * registration whose answer was lost and is sent again makes one endpoint.
 */
export async function registerEndpoint(payments: Payments, url: string, idempotencyKey: string): Promise<RegisteredEndpoint> {
  const made = await payments
    .client()
    .webhookEndpoints.create({ url, enabled_events: [...WEBHOOK_EVENT_TYPES] }, { idempotencyKey });
  if (!made.id || !made.secret) throw new Error(`the endpoint's answer has no id and secret: ${JSON.stringify(made)}`);
  return { id: made.id, secret: made.secret, url: made.url };
}

/** `POST /v1/webhook_endpoints/{id}` with `url`: a restarted worker's endpoint, moved to its new port. */
export async function moveEndpoint(payments: Payments, id: string, url: string): Promise<void> {
  await payments.client().webhookEndpoints.update(id, { url });
}

/**
 * `GET /v1/webhook_endpoints/{id}`: where acks may lie, a registration's 200 proves nothing
 * until the endpoint shows. The URL it shows; `null` when the service answers 404 (no such
 * endpoint). Throws for any other failure (a timeout, a 5xx): nothing learnt.
 */
export async function readEndpoint(payments: Payments, id: string): Promise<string | null> {
  try {
    return (await payments.client().webhookEndpoints.retrieve(id)).url;
  } catch (error) {
    if (error instanceof sdks.stripe().errors.StripeError && error.statusCode === 404) return null;
    throw error;
  }
}

/** An event the service lists: its id, its type, and the id of the object it is about. */
export interface ListedEvent {
  id: string;
  type: string;
  objectId: string | undefined;
}

/**
 * `GET /v1/events?type=...&limit=100` (`events.list`): the service's own events of a type,
 * newest first. The API is authenticated, so what it lists is genuine.
 */
export async function listEvents(payments: Payments, type: string): Promise<ListedEvent[]> {
  const list = await payments.client().events.list({ type, limit: 100 });
  return list.data.map((event) => {
    const object = event.data.object as { id?: unknown };
    return { id: event.id, type: event.type, objectId: typeof object?.id === "string" ? object.id : undefined };
  });
}

/** `GET /v1/payment_intents/{id}`: the payment's status now, as the service keeps it. */
export async function paymentStatus(payments: Payments, paymentIntent: string): Promise<string> {
  return (await payments.client().paymentIntents.retrieve(paymentIntent)).status;
}

/**
 * stripe-node's own check of a delivery (`stripe.webhooks.constructEvent`): the
 * `Stripe-Signature` header against the endpoint's secret and the wall clock (300 s of
 * tolerance, the SDK's default: an older signature is a replay). Throws when it fails; the
 * event otherwise.
 */
export function verifiedEvent(body: string, signature: string | undefined, secret: string): unknown {
  return sdks.stripe().webhooks.constructEvent(body, signature ?? "", secret);
}

// ---------------------------------------------------------------------------------------
// workspaces.create: plain fetch

/** An HTTP answer that is no success, with its body, thrown by send to be classified. */
class HttpStatusError extends Error {
  constructor(
    readonly status: number,
    readonly body: string,
  ) {
    super(`HTTP ${status}: ${body.slice(0, 200)}`);
  }
}

function jsonOrNull(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return null;
  }
}

class Workspaces extends Service {
  protected async send(_intent: Intent, params: Params, key: string, fencingToken: number): Promise<unknown> {
    const headers: Record<string, string> = { "Content-Type": "application/json", "Idempotency-Key": key };
    const [fencing] = this.guardsOffered();
    if (bugs.BUG === "constant-fencing-token") {
      // The bug: a token that never changes looks like fencing, and the service takes it, but
      // it cannot tell a stale worker from its successor.
      headers["Fencing-Token"] = "1";
    } else if (fencing && !bugs.SINGLE_WORKER) {
      // The lease epoch: the service refuses a token lower than one it has seen for this
      // external id, so a worker paused past its lease cannot win against its successor.
      headers["Fencing-Token"] = String(fencingToken);
    }
    const response = await fetchWithin(
      `${this.url}/v1/workspaces`,
      { method: "POST", headers, body: JSON.stringify({ external_id: params.external_id, name: params.name }) },
      this.timeoutMs,
    );
    // The body is read inside send: a connection cut while it arrives is an error to classify.
    const text = await response.text();
    if (!response.ok) throw new HttpStatusError(response.status, text);
    return text;
  }

  protected outcomeOfError(_intent: Intent, error: unknown): Outcome {
    if (error instanceof HttpStatusError) {
      const body = jsonOrNull(error.body);
      const detail = isObject(body) && isObject(body.error) ? body.error : {};
      const message = typeof detail.message === "string" ? detail.message : error.body.slice(0, 200);
      const code = typeof detail.code === "string" ? detail.code : undefined;
      const type = typeof detail.type === "string" ? detail.type : undefined;
      return httpOutcome(error.status, code, type, message);
    }
    return transportOutcome(error, this.timeoutMs);
  }

  protected outcomeOfAnswer(_intent: Intent, params: Params, answer: unknown): Outcome {
    const workspace = jsonOrNull(answer as string);
    if (
      isObject(workspace) &&
      typeof workspace.id === "string" &&
      workspace.id !== "" &&
      workspace.external_id === params.external_id &&
      workspace.name === params.name
    ) {
      return outcome(DONE, "", { externalId: workspace.id });
    }
    return outcome(AMBIGUOUS, `a success whose parameters differ from the intent's: ${String(answer).slice(0, 200)}`);
  }

  /** External ids are unique per intent: a workspace with ours is ours. */
  async lookup(_intent: Intent, params: Params): Promise<Lookup> {
    try {
      const query = new URLSearchParams({ external_id: params.external_id as string });
      const response = await fetchWithin(`${this.url}/v1/workspaces?${query}`, {}, this.timeoutMs);
      const text = await response.text();
      if (response.status !== 200) return { kind: FAILED, detail: `HTTP ${response.status}: ${text.slice(0, 200)}` };
      const body = JSON.parse(text) as { data?: Array<Record<string, unknown>> };
      for (const workspace of body.data ?? []) {
        if (workspace.external_id === params.external_id) {
          return { kind: FOUND, externalId: workspace.id as string, paramsMatch: workspace.name === params.name };
        }
      }
      return { kind: ABSENT };
    } catch (error) {
      return { kind: FAILED, detail: `listing workspaces: ${describe(error)}` };
    }
  }
}

// ---------------------------------------------------------------------------------------
// files.put: @aws-sdk/client-s3

/** The HTTP status of an S3 error, or undefined for any other error. */
function s3Status(error: unknown): number | undefined {
  return (error as { $metadata?: { httpStatusCode?: number } } | null)?.$metadata?.httpStatusCode;
}

class Files extends Service {
  private s3Client: S3Client | null = null;

  /**
   * One client per process (clients are safe to share): path-style addressing, one attempt
   * (maxAttempts 1: no retry of its own), our timeout, a connection per request.
   */
  private s3(): S3Client {
    if (this.s3Client === null) {
      this.s3Client = new (sdks.s3().S3Client)({
        endpoint: this.url,
        forcePathStyle: true,
        region: "us-east-1",
        credentials: { accessKeyId: "twice", secretAccessKey: "twice" },
        maxAttempts: 1,
        requestHandler: {
          connectionTimeout: this.timeoutMs,
          requestTimeout: this.timeoutMs,
          httpAgent: new http.Agent({ keepAlive: false }),
        },
      });
    }
    return this.s3Client;
  }

  needsPreparation(intent: Intent): boolean {
    const [, conditional] = this.guardsOffered();
    return conditional && !("precondition" in intent.evidence);
  }

  resendIsGuarded(): boolean {
    // Once one send of a conditional put landed, its condition no longer holds.
    const [, conditional] = this.guardsOffered();
    return conditional;
  }

  /**
   * HEAD the object, and record what every send must require of it: that it still does not
   * exist, or that it is still the version read now.
   */
  async prepare(_intent: Intent, params: Params): Promise<Evidence> {
    try {
      const head = await this.s3().send(new (sdks.s3().HeadObjectCommand)({ Bucket: params.bucket as string, Key: params.key as string }));
      return { precondition: { if_match: head.ETag } };
    } catch (error) {
      if (s3Status(error) === 404) return { precondition: "if_none_match" };
      throw new NotPrepared(`HEAD ${params.bucket}/${params.key}: ${describe(error)}`);
    }
  }

  protected send(intent: Intent, params: Params): Promise<unknown> {
    // S3 has no idempotency key; the precondition is what makes a resend land once.
    const call: PutObjectCommandInput = {
      Bucket: params.bucket as string,
      Key: params.key as string,
      Body: Buffer.from(params.body as string, "utf8"),
    };
    const [, conditional] = this.guardsOffered();
    const precondition = intent.evidence.precondition;
    if (bugs.BUG === "constant-fencing-token" && conditional) {
      // The bug: "only if it exists" looks like a precondition, but any version matches, so a
      // stale worker's put lands on whatever its successor wrote.
      if (precondition === "if_none_match") call.IfNoneMatch = "*";
      else call.IfMatch = "*";
    } else if (conditional) {
      if (precondition === "if_none_match") call.IfNoneMatch = "*";
      else if (isObject(precondition) && typeof precondition.if_match === "string") call.IfMatch = precondition.if_match;
      else return Promise.reject(new NotPrepared("no precondition was recorded before the first send"));
    }
    return this.s3().send(new (sdks.s3().PutObjectCommand)(call));
  }

  protected outcomeOfError(_intent: Intent, error: unknown): Outcome {
    const status = s3Status(error);
    if (status === undefined) return transportOutcome(error, this.timeoutMs);
    const name = (error as { name?: string }).name ?? "";
    const message = `HTTP ${status}: ${describe(error)}`;
    // PreconditionFailed: the object is no longer what we read. Our own earlier send may be
    // what changed it, so this is for a read-back, not a refusal.
    if (status === 412) return outcome(CONFLICT, message, { definite: true });
    // ConditionalRequestConflict: a concurrent conditional write won a race.
    if (status === 409) return outcome(CONFLICT, message, { definite: false });
    if (status === 429) return outcome(NOT_EXECUTED, message);
    // A body that stopped arriving: nothing was stored, and the same put may go through.
    if (status === 400 && name === "RequestTimeout") return outcome(NOT_EXECUTED, message);
    if (DECISION_STATUSES.includes(status)) {
      const words = [name, (error as Error).message].filter((w) => w).join(": ");
      return decisionOutcome(status, words || describe(error));
    }
    if (status >= 400 && status < 500 && status !== 408) return outcome(REJECTED, message);
    return outcome(AMBIGUOUS, message);
  }

  protected outcomeOfAnswer(_intent: Intent, params: Params, answer: unknown): Outcome {
    const etag = (answer as { ETag?: string }).ETag;
    if (etag === quotedMd5(params.body as string)) return outcome(DONE, "", { externalId: etag });
    return outcome(AMBIGUOUS, `a success with ETag ${etag}, not the MD5 of the body that was sent`);
  }

  /**
   * HEAD: our body's ETag is ours; the version read before the first send means ours has not
   * landed (and still can); any other version means it never will.
   */
  async lookup(intent: Intent, params: Params): Promise<Lookup> {
    const before = intent.evidence.precondition;
    const where = `${params.bucket}/${params.key}`;
    let etag: string | undefined;
    try {
      const head = await this.s3().send(new (sdks.s3().HeadObjectCommand)({ Bucket: params.bucket as string, Key: params.key as string }));
      etag = head.ETag;
    } catch (error) {
      if (s3Status(error) !== 404) return { kind: FAILED, detail: `HEAD ${where}: ${describe(error)}` };
      if (isObject(before)) {
        return { kind: SUPERSEDED, detail: `${where} was deleted since version ${before.if_match} was read` };
      }
      return { kind: ABSENT };
    }
    if (etag === quotedMd5(params.body as string)) return { kind: FOUND, externalId: etag, paramsMatch: true };
    if (before === undefined || (isObject(before) && before.if_match === etag)) return { kind: ABSENT };
    return {
      kind: SUPERSEDED,
      detail: `${where} holds version ${etag}: neither ours nor the one read before the first send`,
    };
  }
}

// ---------------------------------------------------------------------------------------
// chain.transfer: viem, signed locally

/** A JSON-RPC error the node answered, found anywhere in a viem error's causes. */
function rpcErrorOf(error: unknown): { code: number; message: string } | null {
  for (const e of chain(error)) {
    const candidate = e as { code?: unknown; details?: unknown; name?: unknown };
    if (candidate.name === "RpcRequestError" && typeof candidate.code === "number") {
      return { code: candidate.code, message: String(candidate.details ?? "") };
    }
  }
  return null;
}

/** The HTTP status of a viem error that came from a non-2xx answer. */
function viemStatus(error: unknown): { status: number; body: string } | null {
  for (const e of chain(error)) {
    const candidate = e as { status?: unknown; details?: unknown };
    if (typeof candidate.status === "number") return { status: candidate.status, body: String(candidate.details ?? "") };
  }
  return null;
}

class Chain extends Service {
  /**
   * A client without viem's retries (retryCount 0: it would resend a timed-out
   * eth_sendRawTransaction on its own), without batching, with our timeout.
   */
  private client(): PublicClient {
    const viem = sdks.viem();
    return viem.createPublicClient({ transport: viem.http(this.url, { retryCount: 0, timeout: this.timeoutMs, batch: false }) });
  }

  private account(): PrivateKeyAccount {
    return sdks.viemAccounts().privateKeyToAccount(this.secrets.chain_private_key as Hex);
  }

  needsPreparation(intent: Intent): boolean {
    return !("raw_tx" in intent.evidence);
  }

  resendIsGuarded(): boolean {
    // The same signed bytes can be mined once: their nonce is used once.
    return true;
  }

  readsBackSuccess(): boolean {
    // A node answers the hash when the transaction enters its pool, before it is mined.
    return true;
  }

  /**
   * Sign the transfer once: read the chain id, the pending nonce and the fees, take the lowest
   * nonce at or above the pending one that no intent of the log has signed with (a node that
   * lags cannot make us reuse one), and return the signed bytes and their hash, which the
   * executor records before the first broadcast.
   */
  async prepare(_intent: Intent, params: Params, log: IntentLog): Promise<Evidence> {
    const account = this.account();
    let chainId: number, pending: number, gasPrice: bigint, tip: bigint;
    try {
      const client = this.client();
      chainId = await client.getChainId();
      pending = await client.getTransactionCount({ address: account.address, blockTag: "pending" });
      gasPrice = await client.getGasPrice();
      // The node's suggestion, asked for directly (viem's estimate would read a block first).
      tip = sdks.viem().hexToBigInt(await client.request({ method: "eth_maxPriorityFeePerGas" }));
    } catch (error) {
      throw new NotPrepared(`reading the chain: ${describe(error)}`);
    }
    const sender = account.address.toLowerCase();
    const taken = log.claimedNonces(sender);
    let nonce = pending;
    while (taken.has(nonce)) nonce += 1;
    const raw = await account.signTransaction({
      type: "eip1559",
      chainId,
      nonce,
      to: params.to as Hex,
      value: BigInt(params.value as string),
      gas: TRANSFER_GAS,
      // Room for the base fee to double, plus the node's suggested tip.
      maxFeePerGas: 2n * gasPrice + tip,
      maxPriorityFeePerGas: tip,
    });
    return { raw_tx: raw, tx_hash: sdks.viem().keccak256(raw), nonce, from: sender };
  }

  protected send(intent: Intent): Promise<unknown> {
    // Always the recorded bytes: never a new signature.
    return this.client().sendRawTransaction({ serializedTransaction: intent.evidence.raw_tx as Hex });
  }

  protected outcomeOfError(intent: Intent, error: unknown): Outcome {
    const http = viemStatus(error);
    if (http !== null && http.status !== 200) {
      const message = `HTTP ${http.status}: ${http.body.slice(0, 200)}`;
      if (http.status === 429) return outcome(NOT_EXECUTED, message);
      if (DECISION_STATUSES.includes(http.status)) {
        // What stands in front of the node (its JWT or host check, a gateway) refused us.
        const rpc = rpcErrorOf(error);
        return decisionOutcome(http.status, rpc ? `JSON-RPC error ${rpc.code}: ${rpc.message}` : http.body.slice(0, 200));
      }
      if (http.status >= 400 && http.status < 500 && http.status !== 408) return outcome(REJECTED, message);
      return outcome(AMBIGUOUS, message);
    }
    const rpc = rpcErrorOf(error);
    if (rpc !== null) {
      const text = `JSON-RPC error ${rpc.code}: ${rpc.message}`;
      const lower = rpc.message.toLowerCase();
      // The node holds exactly these bytes already: a broadcast of ours arrived.
      if (lower.includes("already known")) return outcome(DONE, text, { externalId: intent.evidence.tx_hash as string });
      // The nonce is used, perhaps by these very bytes: for the receipt to tell.
      if (lower.includes("nonce too low")) return outcome(CONFLICT, text, { definite: true });
      if (lower.includes("replacement transaction underpriced")) return outcome(CONFLICT, text, { definite: false });
      // An internal error says nothing of whether the transaction was pooled.
      if (rpc.code === -32603) return outcome(AMBIGUOUS, text);
      return outcome(REJECTED, text);
    }
    return transportOutcome(error, this.timeoutMs);
  }

  protected outcomeOfAnswer(intent: Intent, _params: Params, answer: unknown): Outcome {
    const ours = intent.evidence.tx_hash as string;
    const answered = String(answer);
    if (answered.toLowerCase() === ours.toLowerCase()) return outcome(DONE, "", { externalId: ours });
    return outcome(AMBIGUOUS, `the node answered ${answered}, not the hash ${ours}`);
  }

  /**
   * The receipt of our hash; without one, whether another transaction used our nonce, or ours
   * waits in the pool, or the node does not know it (then it may be broadcast again: the same
   * bytes cannot be mined twice). Raw JSON-RPC calls through viem's transport: a receipt or a
   * transaction is read as the node gives it, without viem's formatting of every field.
   */
  async lookup(intent: Intent): Promise<Lookup> {
    const evidence = intent.evidence;
    if (!("raw_tx" in evidence)) return { kind: ABSENT }; // never signed, so never broadcast
    const txHash = evidence.tx_hash as Hex;
    const nonce = evidence.nonce as number;
    const sender = evidence.from as Hex;
    try {
      const client = this.client();
      const mined = async (): Promise<Lookup | null> => {
        const receipt = (await client.request({
          method: "eth_getTransactionReceipt",
          params: [txHash],
        })) as { status?: string; blockNumber?: string } | null;
        if (receipt === null) return null;
        if (receipt.status === "0x1") return { kind: FOUND, externalId: txHash, paramsMatch: true };
        return { kind: SUPERSEDED, detail: `${txHash} was mined in block ${receipt.blockNumber} and reverted` };
      };
      const found = await mined();
      if (found !== null) return found;
      const latest = await client.getTransactionCount({ address: sender, blockTag: "latest" });
      if (latest > nonce) {
        // The receipt read above may predate the block that used the nonce: only one read
        // after the nonce was seen used can tell whose transaction used it.
        const again = await mined();
        if (again !== null) return again;
        return { kind: SUPERSEDED, detail: `nonce ${nonce} of ${sender} is used, and ${txHash} has no receipt` };
      }
      const pooled = await client.request({ method: "eth_getTransactionByHash", params: [txHash] });
      if (pooled === null) return { kind: ABSENT };
      return { kind: FAILED, detail: `${txHash} waits in the node's pool, not mined yet` };
    } catch (error) {
      return { kind: FAILED, detail: `looking up ${txHash}: ${describe(error)}` };
    }
  }
}

// ---------------------------------------------------------------------------------------
// messages.send: the resend SDK, and the recipient's inbox

/**
 * The email header that carries the intent's id into the inbox, so that a read-back tells
 * this intent's message from any other to the same address (the key cannot: it changes when
 * it is rotated, and an inbox never shows it).
 */
const INTENT_HEADER = "X-Twice-Intent";
/** Who the executor's messages come from. */
const SENDER = "twice executor <executor@twice.invalid>";

/** An error the resend SDK returned (it returns errors, it never throws them). */
class ResendAnswerError extends Error {
  constructor(
    readonly statusCode: number | null,
    readonly errorName: string,
    message: string,
  ) {
    super(message);
  }
}

class Messages extends Service {
  private resend(): Resend {
    return new (sdks.resend().Resend)(this.secrets.messages_api_key ?? "re_test_twice", { baseUrl: this.url });
  }

  successMayBeHollow(): boolean {
    // Whatever the contract says: the answer is the API accepting the message, the effect is
    // its delivery to the inbox.
    return true;
  }

  readsBackSuccess(): boolean {
    if (bugs.BUG === "trust-202") {
      // The bug: the API's 200 is taken for the delivery.
      return false;
    }
    return true;
  }

  protected async send(intent: Intent, params: Params, key: string): Promise<unknown> {
    // The SDK spreads its request options into fetch's: the signal is our timeout. It never
    // retries.
    const options = { idempotencyKey: key, signal: AbortSignal.timeout(this.timeoutMs) };
    const { data, error } = await this.resend().emails.send(
      {
        from: SENDER,
        to: params.to as string,
        subject: params.subject as string,
        text: params.body as string,
        headers: { [INTENT_HEADER]: intent.id },
      },
      options,
    );
    if (error) throw new ResendAnswerError(error.statusCode ?? null, error.name, error.message);
    return data;
  }

  protected outcomeOfError(_intent: Intent, error: unknown): Outcome {
    if (error instanceof ResendAnswerError) {
      if (error.statusCode === null) {
        // The SDK turns whatever the HTTP stack threw (a refused connection, a timeout, a
        // reset) into one "Unable to fetch data" without the cause: it cannot tell a request
        // that never left from one that was read, so neither can we: ambiguous, and looked up.
        return outcome(AMBIGUOUS, `${error.errorName}: ${error.message}`);
      }
      return httpOutcome(error.statusCode, error.errorName, undefined, error.message);
    }
    return transportOutcome(error, this.timeoutMs);
  }

  protected outcomeOfAnswer(_intent: Intent, _params: Params, answer: unknown): Outcome {
    const id = isObject(answer) ? answer.id : undefined;
    // Accepted, not delivered: the executor reads the inbox before it believes it.
    if (typeof id === "string" && id !== "") return outcome(DONE, "", { externalId: id });
    return outcome(AMBIGUOUS, `an unreadable success: ${JSON.stringify(answer)}`);
  }

  /** The recipient's inbox, paged, oldest first; ours carries our intent id. */
  async lookup(intent: Intent, params: Params): Promise<Lookup> {
    const to = params.to as string;
    const query = new URLSearchParams({ limit: "100" });
    try {
      for (let page = 0; page < LOOKUP_PAGES_MAX; page++) {
        const response = await fetchWithin(`${this.url}/mailboxes/${to}/messages?${query}`, {}, this.timeoutMs);
        const text = await response.text();
        if (response.status !== 200) return { kind: FAILED, detail: `HTTP ${response.status}: ${text.slice(0, 200)}` };
        const body = JSON.parse(text) as { data?: Array<Record<string, unknown>>; has_more?: boolean };
        const data = body.data ?? [];
        for (const message of data) {
          const headers: Record<string, unknown> = {};
          for (const [k, v] of Object.entries(isObject(message.headers) ? message.headers : {})) headers[k.toLowerCase()] = v;
          if (headers[INTENT_HEADER.toLowerCase()] === intent.id) {
            const match = message.subject === params.subject && message.text === params.body;
            return { kind: FOUND, externalId: message.email_id as string, paramsMatch: match };
          }
        }
        if (!body.has_more || data.length === 0) return { kind: ABSENT };
        query.set("after", String(data[data.length - 1].id));
      }
    } catch (error) {
      return { kind: FAILED, detail: `reading the inbox of ${to}: ${describe(error)}` };
    }
    return { kind: FAILED, detail: `more than ${LOOKUP_PAGES_MAX} pages in the inbox of ${to}` };
  }
}

type ServiceClass = new (url: string, contract: Contract, secrets: Record<string, string>, timeoutMs: number) => Service;

export const SERVICES: Record<string, ServiceClass> = {
  payments: Payments,
  workspaces: Workspaces,
  files: Files,
  chain: Chain,
  messages: Messages,
};
