// The careful app: the same services and durable steps as the idiomatic one, made safe to run
// again with Restate's own tools.
//
// The refund:
// - The caller starts the invocation with Restate's `idempotency-key` ingress header (the order
//   id), so a resent request attaches to the same invocation instead of starting another.
// - The step's Idempotency-Key is derived from the invocation id and the step name
//   (`ctx.request().id` + ":refund"): every run of the step, after a lost reply, a timeout or a
//   crash of this process or of the Restate server, sends the same key, and the payments
//   service replays the first result instead of refunding again.
// - Keys are kept for a limited time (24 h at Stripe), and Restate's retries have no bound in
//   time, so before each send the step reads back the refunds of the payment and returns the
//   one that carries this invocation's id in its metadata: a refund that landed under an
//   expired key is found, not made again.
// - Where acks may lie (a 200 with nothing behind it), a second durable step reads the refund
//   back by id; when it is not there, a durable sleep waits out the settle bound and the next
//   round looks up and sends again under a new key (`...:refund-2`).
// - A refusal (a 4xx other than 409 and 429) is a TerminalError of the step, which the handler
//   turns into its answer, with the key and the service's refusal: `escalated` (a person
//   decides) for 400, 401, 403 and 422, `failed` for any other. A refund that never shows after ROUNDS_MAX sends ends the invocation
//   with a TerminalError, claimed `escalated` too.
//
// The other four actions (`effect` below; what each service says, `services.mjs`), the same
// way, the handler returning its claim (`state`, `external_id`, `key`, ...):
// - What every send must carry and must be made once (a put's precondition, a transfer's signed
//   bytes) is made in a `ctx.run` of its own, so Restate journals it before the first send: a
//   rerun after any crash sends the same bytes under the same precondition, never new ones.
// - The step (`ctx.run`) looks the effect up before every send, and believes "not there" only
//   once nothing sent can still land (the contract's settle and read-lag bounds plus the
//   request timeout since this invocation's last send, or since this process started for an
//   invocation older than it), unless a resend lands at most once anyway (a conditional put,
//   the same signed bytes). It reads back a success that may be hollow (a message's always:
//   the API's answer is not the delivery), and a hollow one makes a new round, under a new key.
// - What it cannot tell yet is a plain error: Restate runs the step again, lookup first.
import * as restate from "@restatedev/restate-sdk";
import { PAYMENTS_KEY, PAYMENTS_URL, REQUEST_TIMEOUT_MS, refundError, refundForm, serve } from "./common.mjs";
import * as S from "./services.mjs";

/** How long after a send the service may still commit it (the contract's settle bound), in ms. */
const SETTLE_MS = Number(process.env.SETTLE_MS || 30000);
/** Sends (each under its own key) before the handler gives up on a refund that never shows. */
const ROUNDS_MAX = 3;
/** Refusals a person must act on (a credential, a permission, the input): escalated. */
const NEEDS_A_DECISION = [400, 401, 403, 422];

async function payments(path, init = {}) {
  const res = await fetch(`${PAYMENTS_URL}${path}`, {
    ...init,
    headers: { Authorization: `Bearer ${PAYMENTS_KEY}`, ...(init.headers || {}) },
    signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
  });
  return { res, body: await res.json() };
}

/** The refund this invocation made, found by the invocation id in its metadata, if any. */
async function findRefund(paymentIntent, invocationId) {
  const { res, body } = await payments(`/v1/refunds?payment_intent=${encodeURIComponent(paymentIntent)}&limit=100`);
  if (!res.ok) throw new Error(`refund lookup answered ${res.status}`); // retried: a read is always safe
  return (body.data || []).find((r) => (r.metadata || {}).restate_invocation === invocationId);
}

/** One durable step: look the refund up, and send it under `key` only if it is not there. */
async function refundOnce(order, invocationId, key) {
  const found = await findRefund(order.payment_intent, invocationId);
  if (found) return { id: found.id, amount: found.amount, status: found.status, key, found: true };
  const { res, body } = await payments("/v1/refunds", {
    method: "POST",
    headers: { "Idempotency-Key": key },
    body: refundForm(order, { restate_invocation: invocationId }),
  });
  if (!res.ok) throw refundError(res.status, body);
  return { id: body.id, amount: body.amount, status: body.status, key, found: false };
}

/** Whether the refund `id` exists: a 200 may be hollow where acks may lie. */
async function readBack(id) {
  const { res } = await payments(`/v1/refunds/${encodeURIComponent(id)}`);
  if (res.status === 404) return false;
  if (!res.ok) throw new Error(`refund read-back answered ${res.status}`);
  return true;
}

const refunds = restate.service({
  name: "Refunds",
  handlers: {
    refund: async (ctx, order) => {
      const invocationId = ctx.request().id;
      for (let round = 1; round <= ROUNDS_MAX; round++) {
        const step = round === 1 ? "refund" : `refund-${round}`;
        const key = `${invocationId}:${step}`;
        let refund;
        try {
          refund = await ctx.run(step, () => refundOnce(order, invocationId, key));
        } catch (e) {
          // A refusal a retry cannot change, answered with what the service said and the key:
          // one that needs a person (a credential, a permission, the input) is escalated, any
          // other (402, 404) failed. The journal keeps this outcome too.
          if (e instanceof restate.TerminalError) {
            const state = NEEDS_A_DECISION.includes(e.code) ? "escalated" : "failed";
            return { order_id: order.order_id, state, key, decision: { status: e.code, error: e.message } };
          }
          throw e;
        }
        if (await ctx.run(`read-back-${round}`, () => readBack(refund.id))) {
          return { order_id: order.order_id, refund_id: refund.id, external_id: refund.id, amount: refund.amount, status: refund.status, key, rounds: round };
        }
        // Answered, but not there: once nothing sent can still land, look up and send again
        // under a new key (the old one would replay the hollow answer). A durable sleep.
        await ctx.sleep(SETTLE_MS + REQUEST_TIMEOUT_MS + 100);
      }
      throw new restate.TerminalError(`unconfirmed: no refund seen after ${ROUNDS_MAX} sends`);
    },
  },
});

// ---- the four other actions ---------------------------------------------------------------

/** Added to every time bound: between a stamp and the socket. */
const MARGIN_MS = 100;
/** Sends per run of a step, each once the last one's absence is certain (or harmless). */
const SENDS_MAX = 3;
/** Any send of an invocation older than this process may have left before this. */
const PROCESS_START_MS = Date.now();
/** Per invocation: its last send in this process (the start or end of it), and the sends. */
const lastSentMs = new Map();
const sends = new Map();

/** When nothing `job` sent can land any more, and no read can lag behind it. */
function settledAt(svc, job) {
  const floor = job.began < PROCESS_START_MS ? PROCESS_START_MS : 0;
  const { settleMs, readLagMs } = svc.contract;
  return Math.max(lastSentMs.get(job.id) ?? 0, floor) + settleMs + readLagMs + REQUEST_TIMEOUT_MS + MARGIN_MS;
}

async function look(svc, p, job) {
  const found = await svc.lookup(p, job);
  if (found.kind === S.FAILED) throw new Error(`the lookup cannot tell yet: ${found.detail}`); // Restate retries
  return found;
}

/** A lookup whose "not there" is final: made again, once, after the settle bound. */
async function lookOnceSettled(svc, p, job) {
  const found = await look(svc, p, job);
  const waitMs = settledAt(svc, job) - Date.now();
  if (found.kind === S.FOUND || waitMs <= 0) return found;
  await new Promise((resolve) => setTimeout(resolve, waitMs));
  return look(svc, p, job);
}

async function send(svc, p, job) {
  lastSentMs.set(job.id, Date.now());
  sends.set(job.id, (sends.get(job.id) ?? 0) + 1);
  try {
    return await svc.send(p, job);
  } finally {
    lastSentMs.set(job.id, Date.now()); // it may land up to the settle bound after its end
  }
}

const foundClaim = (found, key, how) => found.paramsMatch
  ? { state: "confirmed", external_id: found.externalId, key, reason: how }
  : { state: "escalated", external_id: found.externalId, key, could_duplicate: true, reason: "an effect exists with other parameters than the authorised ones" };

function refused(outcome, key) {
  if (outcome.kind === S.NEEDS_DECISION) {
    return { state: "escalated", key, could_duplicate: false, decision: { status: outcome.status, error: outcome.words } };
  }
  return { state: "failed", key, reason: `refused: ${outcome.error}` };
}

/** Ours can no longer land: another version took the object's place (failed), or another
 * transaction used our nonce (a new round signs anew: these bytes can never be mined). */
const gone = (job, found) => job.prepared.raw_tx
  ? { state: "not_landed", key: job.key, reason: `signed anew: ${found.detail}` }
  : { state: "failed", key: job.key, reason: `it can no longer take effect: ${found.detail}` };

/** One run of the step: a claim, or `not_landed` (a hollow success), or a throw (unsure). */
async function attempt(svc, p, job) {
  // What was prepared in this very attempt has never been sent: nothing to look up, once.
  let found = job.fresh ? { kind: S.ABSENT } : await look(svc, p, job);
  job.fresh = false;
  if (found.kind === S.ABSENT && !svc.guarded) found = await lookOnceSettled(svc, p, job);
  if (found.kind === S.FOUND) return foundClaim(found, job.key, "found by lookup");
  if (found.kind === S.SUPERSEDED) {
    if (Date.now() < settledAt(svc, job)) throw new Error(found.detail);
    return gone(job, found);
  }
  for (let i = 0; i < SENDS_MAX; i++) {
    // A refusal may be our own earlier send's doing (a 409, a 412) when one may have left.
    const earlier = (sends.get(job.id) ?? 0) > 0 || job.began < PROCESS_START_MS;
    const outcome = await send(svc, p, job);
    const claim = await answer(svc, p, job, outcome, earlier);
    if (claim) return claim;
  }
  throw new Error(`no answer to ${SENDS_MAX} sends, none of which landed`);
}

/** What a send's answer means: a claim, or null to send again (nothing landed, for sure). */
async function answer(svc, p, job, outcome, earlier) {
  const { kind } = outcome;
  if (kind === S.DONE && !svc.hollow && !svc.readsBack) return { state: "confirmed", external_id: outcome.externalId, key: job.key };
  if (kind === S.NOT_EXECUTED) throw new Error(outcome.error);
  const refusal = kind === S.NEEDS_DECISION || kind === S.REJECTED;
  if (refusal && !earlier) return refused(outcome, job.key);
  // A success to read back, a refusal an earlier send may explain, or no answer at all.
  const found = await lookOnceSettled(svc, p, job);
  if (found.kind === S.FOUND) return foundClaim(found, job.key, "found by read-back");
  if (refusal) return refused(outcome, job.key);
  if (found.kind === S.SUPERSEDED) return gone(job, found);
  if (svc.guarded) return null; // the same signed bytes, or the same precondition, land at most once
  if (kind === S.DONE || svc.hollow) return { state: "not_landed", key: job.key, reason: outcome.error || "a success the read-back did not show" };
  return null; // absent for good: the same key again
}

/** The handler of `action`: rounds of (prepare once, step), a new key per round. */
function effect(action, svc) {
  return async (ctx, p) => {
    const id = ctx.request().id;
    // Journaled: on a rerun after a crash, older than this process, so its sends may be too.
    const began = await ctx.date.now();
    let claim;
    for (let round = 1; round <= ROUNDS_MAX; round++) {
      const step = round === 1 ? action : `${action}-${round}`;
      // Made and journaled before the step runs; `fresh` when made now rather than replayed.
      let fresh = false;
      const prepare = () => {
        fresh = true;
        return svc.prepare(p);
      };
      const prepared = svc.prepare ? await ctx.run(`prepare ${step}`, prepare) : {};
      svc.hold?.(prepared, true);
      const job = { id, began, key: `${id}:${step}`, marker: p.intent, prepared, fresh };
      claim = await ctx.run(step, () => attempt(svc, p, job));
      // A transfer that certainly never landed gives its nonce back for the next one.
      if (["failed", "escalated"].includes(claim.state) && !claim.could_duplicate) svc.hold?.(prepared, false);
      if (claim.state !== "not_landed") return claim;
    }
    return { state: "escalated", key: claim.key, could_duplicate: false, reason: `not there after ${ROUNDS_MAX} hollow successes` };
  };
}

const service = (name, handler, action, svc) => restate.service({ name, handlers: { [handler]: effect(action, svc) } });

serve([
  refunds,
  service("Workspaces", "create", "workspaces.create", S.workspaces),
  service("Files", "put", "files.put", S.files),
  service("Chain", "transfer", "chain.transfer", S.chain),
  service("Messages", "send", "messages.send", S.messages),
]);
