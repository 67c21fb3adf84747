/**
 * Intents an event starts (docs/protocol.md §3.2, "Intents an event starts"; the reference
 * executor's executor/src/intent_engine/webhooks.rs, whose design this mirrors).
 *
 * - A proposal with `on_event` is kept as a trigger (the `triggers` table), not recorded:
 *   nothing is sent for it until a genuine `payment_intent.succeeded` about its payment intent
 *   arrives (executor.ts, `propose`).
 * - Once a trigger is kept, the next pass registers this worker's endpoint with the payments
 *   service through stripe-node (`POST /v1/webhook_endpoints`, under an idempotency key of this
 *   life's own) and keeps its id and `whsec_` secret in `webhook_endpoints`; a restarted worker
 *   moves the same endpoint to its new URL (`POST /v1/webhook_endpoints/{id}`), since the
 *   service still owes the old one its retries.
 * - The process listens on a loopback port of its own (127.0.0.1, port 0) at `/webhooks`. A
 *   delivery is checked with stripe-node's own `webhooks.constructEvent` (the signature
 *   against the secret and the wall clock, 300 s: a forgery or a replay gets a 400 and is not
 *   kept), kept in `webhook_events` durably, and only then answered 200; a second delivery of
 *   a kept event is answered 200 and changes nothing. The handler is synchronous from the
 *   check to the answer (better-sqlite3 is), so deliveries are taken one at a time.
 * - The work is the passes', not the handler's: at the start of every pass each kept event not
 *   yet started has its payment read from the API (the event's copy may be stale, or a lie),
 *   and once it shows `succeeded` the event's triggers become plain intents in the log (whose
 *   ids it holds once: a second start finds the intent there) and the event is noted as
 *   started. A read that fails, or does not show `succeeded` yet, is tried again at the next
 *   pass: the worker's own retries carry the work, not the service's four deliveries.
 * - A registration is a write like any other (docs/protocol.md §3.2, last bullets): its row is
 *   kept before it leaves, "in flight" (the URL, no id, no secret); a later life that finds one
 *   knows a registration of unknown fate may have made an endpoint whose secret it never
 *   learnt. A registration that fails (an error, a timeout, no answer), or was in flight in an
 *   earlier life, sets "missed events": the endpoint is registered again at the next pass, and
 *   once it is, at every pass until every trigger kept has started, the service's own
 *   `payment_intent.succeeded` events are listed from the API (`GET /v1/events`, authenticated,
 *   so genuine) and those a trigger waits for are kept as received, then started as any other.
 * - Where the payments contract's acks may lie, a registration's (or a move's) 200 is read back
 *   (`GET /v1/webhook_endpoints/{id}`): once it shows this life's URL it is trusted; while it
 *   does not (404, or another URL), once the settle and read-lag bounds, the request timeout
 *   and the safety margin have passed since the answer, the 200 did nothing: a create is made
 *   again (the row back in flight), a move sent again, and "missed events" is set.
 */

import * as http from "node:http";
import type { AddressInfo } from "node:net";
import * as bugs from "./bugs";
import { inFlightEndpoint, isRegistered, type IntentLog, type ReceivedEvent, type Trigger } from "./intentLog";
import {
  listEvents,
  moveEndpoint,
  paymentStatus,
  readEndpoint,
  registerEndpoint,
  verifiedEvent,
  WEBHOOK_EVENT_TYPES,
  type Payments,
} from "./services";

/** The path deliveries are posted to. */
export const WEBHOOK_PATH = "/webhooks";
/** The largest delivery read; a larger one is refused (Stripe's events are a few KiB). */
const DELIVERY_BYTES_MAX = 1024 * 1024;

/** How a delivery is answered: its status, and a sentence why (the answer's body). */
interface Answer {
  status: number;
  note: string;
}

/** What the webhooks need of the executor. */
export interface Host {
  readonly workerId: string;
  /** `worker_id#incarnation`: this life of the worker. */
  readonly owner: string;
  readonly log: IntentLog;
  /** Added to every bound waited out before a negative answer is believed (executor.ts). */
  readonly safetyMarginMs: number;
  /** The payments service of `init`, if it named one. */
  payments(): Payments | undefined;
  /** Turns a trigger into a plain intent in the log (once: the log holds its id once). */
  fire(trigger: Trigger): void;
  /** One pass over the intents. */
  runPass(): Promise<unknown>;
  warn(text: string): void;
}

/** The string at `path` in a parsed JSON value, if there is one. */
function textAt(value: unknown, ...path: string[]): string | undefined {
  let current = value;
  for (const key of path) {
    if (current === null || typeof current !== "object") return undefined;
    current = (current as Record<string, unknown>)[key];
  }
  return typeof current === "string" ? current : undefined;
}

export class Webhooks {
  /** This life's endpoint URL, once it listens. */
  private url: string | null = null;
  /** Whether a trigger is kept: only then does the worker need an endpoint. */
  private armed: boolean;
  /** Whether this life's endpoint is registered (or moved here): once per life. */
  private endpointReady = false;
  /**
   * A registration's fate was unknown (it failed, or was in flight in an earlier life, or its
   * 200 did nothing): events may have gone where this worker cannot verify them, so they are
   * read from the API until every trigger has started.
   */
  private missedEvents = false;
  /** Where acks may lie: when the registration's (or move's) 200 came, until it is read back. */
  private unconfirmedSinceMs: number | null = null;
  /** How many of this life's creates were found to have done nothing: each remake's key is new. */
  private hollowCreates = 0;
  private registering: Promise<void> | null = null;
  /** `webhook-ack-first` only: events answered 200 and kept nowhere but here. */
  private readonly held = new Map<string, ReceivedEvent>();
  /** `webhook-trusts-body` only: what each event's body claims of its payment's status. */
  private readonly claimed = new Map<string, string | undefined>();
  /** `webhook-no-dedupe` only: the deliveries it works on, one after the other. */
  private turn: Promise<unknown> = Promise.resolve();

  constructor(private readonly host: Host) {
    // A restarted worker finds the triggers its earlier life kept.
    this.armed = host.log.hasTriggers();
  }

  /** Listens on 127.0.0.1, on a port the OS picks; the endpoint registered names it. */
  async listen(): Promise<void> {
    const server = http.createServer((request, response) => this.serve(request, response));
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(0, "127.0.0.1", () => resolve());
    });
    const { port } = server.address() as AddressInfo;
    this.url = `http://127.0.0.1:${port}${WEBHOOK_PATH}`;
  }

  /** A trigger was kept: the next pass registers the endpoint. */
  arm(): void {
    this.armed = true;
  }

  private serve(request: http.IncomingMessage, response: http.ServerResponse): void {
    const reply = ({ status, note }: Answer): void => {
      response.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify({ note }));
    };
    const path = (request.url ?? "").split("?")[0];
    if (request.method !== "POST" || path !== WEBHOOK_PATH) {
      reply({ status: 404, note: `only POST ${WEBHOOK_PATH} is served here` });
      request.resume();
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    request.on("data", (chunk: Buffer) => {
      size += chunk.length;
      if (size <= DELIVERY_BYTES_MAX) chunks.push(chunk);
    });
    request.on("end", () => {
      if (size > DELIVERY_BYTES_MAX) {
        reply({ status: 413, note: `a delivery of at most ${DELIVERY_BYTES_MAX} bytes` });
        return;
      }
      const signature = request.headers["stripe-signature"];
      const body = Buffer.concat(chunks).toString("utf8");
      let answered: Answer | Promise<Answer>;
      try {
        answered = this.receive(Array.isArray(signature) ? signature[0] : signature, body);
      } catch (error) {
        // The log could not be written (another worker holds its lock): not kept, so not
        // answered 2xx; the service sends it again.
        answered = { status: 500, note: `not kept: ${String(error)}` };
      }
      Promise.resolve(answered).then(reply, (error: unknown) => reply({ status: 500, note: String(error) }));
    });
  }

  /**
   * Takes one delivery (`signature` is its `Stripe-Signature` header). Synchronous from the
   * check to the answer: the event is kept (synchronous=FULL) before the 200 goes out.
   */
  receive(signature: string | undefined, body: string): Answer | Promise<Answer> {
    const endpoint = this.host.log.endpoint(this.host.workerId);
    // In flight: no secret to check a delivery against yet.
    if (endpoint === null || !isRegistered(endpoint)) return { status: 503, note: "no endpoint registered yet" };
    let event: unknown;
    if (bugs.BUG === "webhook-trusts-body") {
      // The bug: no signature check; the body is believed as it comes, and with it its copy
      // of the payment, which the pass takes for the payment's state.
      try {
        event = JSON.parse(body);
      } catch {
        return { status: 400, note: "not JSON" };
      }
      this.claimed.set(textAt(event, "id") ?? "", textAt(event, "data", "object", "status"));
    } else {
      try {
        event = verifiedEvent(body, signature, endpoint.secret);
      } catch (error) {
        return { status: 400, note: `refused: ${(error as Error).message}` };
      }
    }
    const id = textAt(event, "id");
    const type = textAt(event, "type");
    const object = textAt(event, "data", "object", "id");
    if (id === undefined || type === undefined || object === undefined) {
      return { status: 400, note: "an event needs an id, a type and data.object.id" };
    }
    if (!(WEBHOOK_EVENT_TYPES as readonly string[]).includes(type)) {
      return { status: 200, note: `${type}: not an event this executor acts on` };
    }
    const received: ReceivedEvent = { eventId: id, eventType: type, objectId: object };
    if (bugs.BUG === "webhook-ack-first") {
      // The bug: the 200 goes first, and the event waits for the pass in memory only. A crash
      // before the pass started it forgets it, and the service, answered, never sends it again.
      this.held.set(id, received);
      return { status: 200, note: `${id} taken (in memory)` };
    }
    if (bugs.BUG === "webhook-no-dedupe") {
      // The bug: every delivery is new work, done now: nothing asks whether this event id was
      // taken before, and its triggers start afresh (executor.ts, `fire`).
      return this.actNow(received);
    }
    const fresh = this.host.log.receiveEvent(id, type, object, Date.now());
    return { status: 200, note: fresh ? `${id} received` : `${id} was received already` };
  }

  /** `webhook-no-dedupe`: the delivery's work, in the handler, one delivery after the other. */
  private actNow(event: ReceivedEvent): Promise<Answer> {
    const work = this.turn.then(async (): Promise<Answer> => {
      const payments = this.host.payments();
      this.host.log.receiveEvent(event.eventId, event.eventType, event.objectId, Date.now());
      if (payments === undefined || !(await this.start(event, payments))) {
        return { status: 503, note: `${event.eventId}: not started yet` };
      }
      await this.host.runPass();
      return { status: 200, note: `${event.eventId} done` };
    });
    this.turn = work.catch(() => undefined);
    return work;
  }

  /**
   * Registers this worker's endpoint, or moves it to this life's URL, once a trigger is kept
   * (once per life; a failure is tried again at the next pass); then, at every pass, reads a
   * registration's 200 back where acks may lie, and lists the events missed after one whose
   * fate was unknown.
   */
  async ensureEndpoint(): Promise<void> {
    const payments = this.host.payments();
    if (!this.armed || this.url === null || payments === undefined) return;
    // Two passes at once (a drain, and a delivery's work under webhook-no-dedupe) register once.
    this.registering ??= this.setUp(payments, this.url).finally(() => {
      this.registering = null;
    });
    await this.registering;
  }

  private async setUp(payments: Payments, url: string): Promise<void> {
    if (!this.endpointReady) {
      try {
        await this.register(payments, url);
        this.endpointReady = true;
      } catch (error) {
        // An endpoint may have been made whose secret never reached us: the events sent to it
        // are read from the API once one is registered.
        this.missedEvents = true;
        this.host.warn(`the webhook endpoint is not registered yet (tried again next pass): ${String(error)}`);
      }
    }
    if (this.endpointReady && this.unconfirmedSinceMs !== null) await this.confirm(payments, this.unconfirmedSinceMs);
    if (this.endpointReady && this.missedEvents) await this.recoverMissedEvents(payments);
  }

  private async register(payments: Payments, url: string): Promise<void> {
    const worker = this.host.workerId;
    const log = this.host.log;
    const kept = log.endpoint(worker);
    if (kept !== null && isRegistered(kept)) {
      if (kept.url === url) return;
      await moveEndpoint(payments, kept.id, url);
      log.keepEndpoint(worker, { ...kept, url });
    } else {
      // An earlier life's registration whose answer never came (it was killed sending it):
      // what it made, its events are read from the API instead.
      if (kept !== null) this.missedEvents = true;
      // Kept before it leaves, as an intent is `submitted`: a crash that follows leaves the
      // next life knowing a registration may have been made.
      log.keepEndpoint(worker, inFlightEndpoint(url));
      // The key is this life's own (`twice-endpoint-<worker>#<incarnation>`), not the
      // reference's `twice-endpoint-<worker>`: a later life listens on another port, and a
      // replay under a key of the worker's would hand it back an earlier life's endpoint at the
      // old URL (or refuse the new parameters). Within a life, a create sent again after a
      // lost answer makes one endpoint where the service honours keys; what an earlier life's
      // registration may have made is covered by the missed events read from the API. A
      // create made again because its 200 did nothing goes under a new key (as a resend after
      // a hollow success does, executor.ts): the old one would replay the hollow answer.
      const key = `twice-endpoint-${this.host.owner}` + (this.hollowCreates > 0 ? `-${this.hollowCreates}` : "");
      const made = await registerEndpoint(payments, url, key);
      log.keepEndpoint(worker, { ...made, url });
    }
    if (payments.contract.acks === "may_lie") this.unconfirmedSinceMs = Date.now();
  }

  /**
   * Reads back a registration answered where acks may lie: the endpoint shows at its URL
   * (trusted), or it still does not once no read can lag and nothing sent can still land since
   * the answer (the 200 did nothing: registered again at the next pass, the events of the
   * meantime read from the API), or neither yet (read again at the next pass).
   */
  private async confirm(payments: Payments, sinceMs: number): Promise<void> {
    const worker = this.host.workerId;
    const kept = this.host.log.endpoint(worker);
    if (kept === null || !isRegistered(kept)) return;
    const lookedAtMs = Date.now();
    let shown: string | null;
    try {
      shown = await readEndpoint(payments, kept.id);
    } catch (error) {
      this.host.warn(`reading endpoint ${kept.id} back (tried again next pass): ${String(error)}`);
      return;
    }
    if (shown === kept.url) {
      this.unconfirmedSinceMs = null;
      return;
    }
    const contract = payments.contract;
    const settledAt =
      sinceMs + contract.settle_ms_max + contract.read_lag_ms_max + payments.timeoutMs + this.host.safetyMarginMs;
    if (lookedAtMs < settledAt) return;
    // The 200 did nothing. A create is made again (its events may have gone nowhere); a move
    // is sent again (the row names the URL the service shows, so the next pass moves it).
    this.host.log.keepEndpoint(worker, shown === null ? inFlightEndpoint(kept.url) : { ...kept, url: shown });
    if (shown === null) this.hollowCreates += 1;
    this.host.warn(`endpoint ${kept.id} does not show at ${kept.url}: its 200 did nothing; registered again`);
    this.unconfirmedSinceMs = null;
    this.endpointReady = false;
    this.missedEvents = true;
  }

  /**
   * Keeps as received the events the service made that never reached this worker: each
   * `payment_intent.succeeded` the API lists (its own record, so genuine) about a trigger
   * kept. Until every trigger kept has started, at every pass; a failure is tried again at
   * the next.
   */
  private async recoverMissedEvents(payments: Payments): Promise<void> {
    const log = this.host.log;
    try {
      for (const type of WEBHOOK_EVENT_TYPES) {
        for (const event of await listEvents(payments, type)) {
          if (event.objectId === undefined || event.type !== type) continue;
          if (log.triggersFor(event.type, event.objectId).length > 0) {
            log.receiveEvent(event.id, event.type, event.objectId, Date.now());
          }
        }
      }
    } catch (error) {
      this.host.warn(`listing the events missed (tried again next pass): ${String(error)}`);
      return;
    }
    if (log.allTriggersStarted()) this.missedEvents = false;
  }

  /**
   * Starts what the events received ask for, where the service shows it: each event's
   * payment is read now, and once it shows `succeeded` its triggers become intents and the
   * event is noted as started. What cannot be read, or does not show yet, waits for the next
   * pass.
   */
  async startReceived(): Promise<void> {
    const payments = this.host.payments();
    if (!this.armed || payments === undefined) return;
    const waiting = [...this.host.log.eventsWaiting(), ...this.held.values()];
    for (const event of waiting) await this.start(event, payments);
  }

  /** Starts the triggers of `event` if its payment shows `succeeded`; whether it did. */
  private async start(event: ReceivedEvent, payments: Payments): Promise<boolean> {
    let status: string | undefined;
    if (bugs.BUG === "webhook-trusts-body") {
      // The bug, where it acts: the event's copy of the payment is taken for its state.
      status = this.claimed.get(event.eventId);
    } else {
      try {
        status = await paymentStatus(payments, event.objectId);
      } catch (error) {
        this.host.warn(`reading ${event.objectId} for event ${event.eventId} (tried again next pass): ${String(error)}`);
        return false;
      }
    }
    if (status !== "succeeded") return false;
    try {
      for (const trigger of this.host.log.triggersFor(event.eventType, event.objectId)) this.host.fire(trigger);
    } catch (error) {
      this.host.warn(`starting the intents of event ${event.eventId} (tried again next pass): ${String(error)}`);
      return false;
    }
    this.host.log.eventStarted(event.eventId, Date.now());
    this.held.delete(event.eventId);
    return true;
  }
}
