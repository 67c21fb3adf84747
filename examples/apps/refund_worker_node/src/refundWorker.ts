/**
 * A small refund worker on stripe-node, in two versions: the Node counterpart of
 * `examples/apps/refund_worker/refund_worker.py`.
 *
 * Jobs ("refund AMOUNT of PAYMENT_INTENT") are kept in a record (`RefundRecord`); the worker
 * takes every job that is not finished and refunds it. The record is the worker's memory and
 * what its claims are made from. (The Python example keeps it in SQLite and kills worker
 * processes; this one runs in the test's own process, so its record is in memory and it meets
 * no crash.)
 *
 * **careful** (`mode: "careful"`):
 *
 * 1. When a job is recorded, its idempotency key is minted and stored with it, once.
 * 2. Before every send the job says `submitted` and the attempt is counted.
 * 3. The send carries the stored key, and the job id in the refund's metadata.
 * 4. A success is recorded as `confirmed` with the refund's id; a definite refusal (a 4xx
 *    other than 409 and 429) as `failed`.
 * 5. An unsure outcome (no reply, a timeout, a 5xx, a 409 or 429) is not a "no": the job says
 *    `unknown`, and the worker reconciles: it lists the refunds of the payment intent and
 *    looks for the one carrying the job id. Found, the job is `confirmed`; not there, it sends
 *    again under the same key, a bounded number of times, then stays `unknown` rather than
 *    guess.
 * 6. A job found `submitted` or `unknown` at start (an earlier run gave up on it mid-send) is
 *    looked up first.
 *
 * **naive** (`mode: "naive"`): what a retry loop written in a hurry does. It retries on any
 * error, with a new idempotency key per attempt and no lookup. Whenever a refund committed but
 * its reply was lost, the retry refunds a second time (or is refused, and the worker records
 * `failed` for a refund that happened).
 *
 * Both own every resend: stripe-node's retries are off (`maxNetworkRetries: 0`), and so is the
 * one resend stripe-node makes anyway after a closed connection (see `noResendOnClose`).
 */

import { randomUUID } from "node:crypto";
import http from "node:http";
import https from "node:https";
import { setTimeout as sleep } from "node:timers/promises";

import Stripe from "stripe";

/** Sends per job and run, first one included. */
export const ATTEMPTS_MAX = 4;
/** Pause between a send whose outcome is unsure and the next one; doubles each time. */
export const RETRY_PAUSE_MS = 100;
/** The API key: the fake accepts any, as long as there is one. */
export const API_KEY = "sk_test_twice";
/** The metadata key that carries the job id on each refund, for the lookup. */
export const JOB_ID_METADATA_KEY = "job_id";

/** A job's state, in the words of twice's claims (`docs/protocol.md` §7). */
export type JobState = "recorded" | "submitted" | "confirmed" | "failed" | "unknown";

/**
 * States after which a worker leaves a job alone. `unknown` is not one of them: a later run
 * reconciles it (a lookup first), which is what the state asks for.
 */
const FINISHED: readonly JobState[] = ["confirmed", "failed"];

/** One job of the record. */
export interface RefundJob {
  readonly jobId: string;
  readonly paymentIntent: string;
  readonly amount: number;
  readonly idempotencyKey: string;
  state: JobState;
  attempts: number;
  refundId?: string;
  lastError?: string;
}

/** The worker's record of its jobs, in the order they were recorded. */
export class RefundRecord {
  private readonly byId = new Map<string, RefundJob>();

  /** Records a job, with the idempotency key every careful send of it will carry. */
  enqueue(jobId: string, paymentIntent: string, amount: number): RefundJob {
    if (this.byId.has(jobId)) throw new Error(`job ${jobId} is already recorded`);
    const job: RefundJob = {
      jobId,
      paymentIntent,
      amount,
      idempotencyKey: `refund-${jobId}-${randomUUID()}`,
      state: "recorded",
      attempts: 0,
    };
    this.byId.set(jobId, job);
    return job;
  }

  /** Every job as the record has it. */
  jobs(): RefundJob[] {
    return [...this.byId.values()];
  }
}

/**
 * Wraps stripe-node's HTTP client so that a closed connection reaches the worker as an error.
 *
 * stripe-node 23 resends a request once after `ECONNRESET` or `EPIPE`, even with
 * `maxNetworkRetries: 0`, on the guess that it never reached the API. A connection can close
 * after the refund was made; the resend is then a replay where keys are honoured and kept,
 * and a second refund where they are not. Renaming the two codes makes the SDK report a plain
 * connection error, and the worker decide.
 */
export function noResendOnClose(inner: Stripe.HttpClient): Stripe.HttpClient {
  class NoResendOnClose extends Stripe.HttpClient {
    override getClientName(): string {
      return inner.getClientName();
    }

    override makeRequest(...args: Parameters<Stripe.HttpClient["makeRequest"]>) {
      return inner.makeRequest(...args).catch((error: unknown) => {
        const code = (error as { code?: unknown } | null)?.code;
        if (code === "ECONNRESET" || code === "EPIPE") {
          throw Object.assign(new Error(`connection closed (${code})`, { cause: error }), { code: `CLOSED_${code}` });
        }
        throw error;
      });
    }
  }
  return new NoResendOnClose();
}

/** How the worker's Stripe client is made. */
export interface StripeOptions {
  /** Per request, in ms: the scenario's `requestTimeoutMs`. */
  timeoutMs: number;
  /** Leave stripe-node's resend after a closed connection on (it is off unless asked). */
  sdkResendsOnClose?: boolean;
}

/**
 * A Stripe client for the payments API at `paymentsUrl` (`http://127.0.0.1:PORT` for twice's
 * fake; `https://api.stripe.com` in production), as any app points stripe-node at a host.
 */
export function stripeFor(paymentsUrl: string, options: StripeOptions): Stripe {
  const url = new URL(paymentsUrl);
  const protocol = url.protocol === "https:" ? "https" : "http";
  // A connection per request: one that a fault closed is never reused.
  const agent = protocol === "https" ? new https.Agent({ keepAlive: false }) : new http.Agent({ keepAlive: false });
  const httpClient = Stripe.createNodeHttpClient(agent);
  return new Stripe(API_KEY, {
    host: url.hostname,
    port: url.port || (protocol === "https" ? 443 : 80),
    protocol,
    // The worker decides what a retry is (and the naive one is the point of the example).
    maxNetworkRetries: 0,
    timeout: options.timeoutMs,
    telemetry: false,
    httpClient: options.sdkResendsOnClose ? httpClient : noResendOnClose(httpClient),
  });
}

/** The two versions of the worker. */
export type Mode = "careful" | "naive";

/** One worker run: refunds every unfinished job of the record, then returns. */
export class RefundWorker {
  constructor(
    private readonly record: RefundRecord,
    private readonly stripe: Stripe,
    private readonly mode: Mode,
  ) {}

  async run(): Promise<void> {
    for (const job of this.record.jobs()) {
      if (FINISHED.includes(job.state)) continue;
      if (this.mode === "careful") await this.refundCarefully(job);
      else await this.refundNaively(job);
    }
  }

  // -- careful ------------------------------------------------------------------------

  private async refundCarefully(job: RefundJob): Promise<void> {
    if (job.state === "submitted" || job.state === "unknown") {
      // An earlier run may have sent it: whatever it got, it did not record an answer.
      const found = await this.lookUp(job);
      if (found !== undefined) {
        confirm(job, found);
        return;
      }
    }
    let pauseMs = RETRY_PAUSE_MS;
    for (let i = 0; i < ATTEMPTS_MAX; i++) {
      job.state = "submitted";
      job.attempts += 1;
      let refund: Stripe.Refund;
      try {
        refund = await this.send(job, job.idempotencyKey);
      } catch (error) {
        job.lastError = describe(error);
        if (definiteRefusal(error)) {
          job.state = "failed";
          return;
        }
        // No answer is not a "no": the refund may have been made. Find out before sending again.
        job.state = "unknown";
        const found = await this.lookUp(job);
        if (found !== undefined) {
          confirm(job, found);
          return;
        }
        await sleep(pauseMs);
        pauseMs *= 2;
        continue;
      }
      confirm(job, refund.id);
      return;
    }
    // Every send's outcome was unsure and no lookup found the refund: say so.
    job.state = "unknown";
  }

  /**
   * The id of this job's refund if the service has one: the refunds of the payment intent,
   * matched on the job id the sends put in the metadata. Undefined when it is not there, or
   * when the list itself failed (then nothing is known, and the next send is under the key).
   */
  private async lookUp(job: RefundJob): Promise<string | undefined> {
    try {
      for await (const refund of this.stripe.refunds.list({ payment_intent: job.paymentIntent, limit: 100 })) {
        if (refund.metadata?.[JOB_ID_METADATA_KEY] === job.jobId) return refund.id;
      }
    } catch (error) {
      job.lastError = `listing refunds: ${describe(error)}`;
    }
    return undefined;
  }

  // -- naive --------------------------------------------------------------------------

  private async refundNaively(job: RefundJob): Promise<void> {
    for (let i = 0; i < ATTEMPTS_MAX; i++) {
      job.state = "submitted";
      job.attempts += 1;
      try {
        // The bug: a fresh key per attempt, so the service cannot tell a retry from a
        // second refund.
        const refund = await this.send(job, `attempt-${randomUUID()}`);
        confirm(job, refund.id);
        return;
      } catch (error) {
        job.lastError = describe(error);
        await sleep(RETRY_PAUSE_MS);
      }
    }
    job.state = "failed";
  }

  // -- both -----------------------------------------------------------------------------

  private send(job: RefundJob, key: string): Promise<Stripe.Refund> {
    return this.stripe.refunds.create(
      { payment_intent: job.paymentIntent, amount: job.amount, metadata: { [JOB_ID_METADATA_KEY]: job.jobId } },
      { idempotencyKey: key },
    );
  }
}

function confirm(job: RefundJob, refundId: string): void {
  job.state = "confirmed";
  job.refundId = refundId;
}

/**
 * Whether the service said no for sure: a 4xx other than 409 (the key is busy) and 429
 * (slow down). No status at all (no reply, a timeout) and 5xx say nothing of the outcome.
 */
function definiteRefusal(error: unknown): boolean {
  if (!(error instanceof Stripe.errors.StripeError)) return false;
  const status = error.statusCode;
  return status !== undefined && status >= 400 && status < 500 && status !== 409 && status !== 429;
}

function describe(error: unknown): string {
  if (error instanceof Stripe.errors.StripeError) {
    return `${error.type} (${error.statusCode ?? "no status"}): ${error.message}`;
  }
  return error instanceof Error ? error.message : String(error);
}
