// The careful app: the same service and the same durable refund step, made safe to run again.
//
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
import * as restate from "@restatedev/restate-sdk";
import { PAYMENTS_KEY, PAYMENTS_URL, REQUEST_TIMEOUT_MS, refundError, refundForm, serve } from "./common.mjs";

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
          return { order_id: order.order_id, refund_id: refund.id, amount: refund.amount, status: refund.status, key, rounds: round };
        }
        // Answered, but not there: once nothing sent can still land, look up and send again
        // under a new key (the old one would replay the hollow answer). A durable sleep.
        await ctx.sleep(SETTLE_MS + REQUEST_TIMEOUT_MS + 100);
      }
      throw new restate.TerminalError(`unconfirmed: no refund seen after ${ROUNDS_MAX} sends`);
    },
  },
});

serve([refunds]);
