// The idiomatic app: a Restate service whose handler refunds an order in one durable step,
// `ctx.run("refund", () => fetch(...))`, as the Restate docs write side effects. Restate
// journals the step's result once it returns; until then, any failure of the step (a lost
// reply, a timeout, a crash of this process or of the server) makes Restate run it again,
// with its default retry policy. The request carries no idempotency key.
import * as restate from "@restatedev/restate-sdk";
import { PAYMENTS_KEY, PAYMENTS_URL, REQUEST_TIMEOUT_MS, refundError, refundForm, serve } from "./common.mjs";

const refunds = restate.service({
  name: "Refunds",
  handlers: {
    refund: async (ctx, order) => {
      const refund = await ctx.run("refund", async () => {
        const res = await fetch(`${PAYMENTS_URL}/v1/refunds`, {
          method: "POST",
          headers: { Authorization: `Bearer ${PAYMENTS_KEY}` },
          body: refundForm(order),
          signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
        });
        const body = await res.json();
        if (!res.ok) throw refundError(res.status, body);
        return { id: body.id, amount: body.amount, status: body.status };
      });
      return { order_id: order.order_id, refund_id: refund.id, amount: refund.amount, status: refund.status };
    },
  },
});

serve([refunds]);
