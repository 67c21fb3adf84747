// The idiomatic app: Restate services whose handlers each do their effect in one durable step,
// `ctx.run("name", () => call(...))`, as the Restate docs write side effects. Restate journals
// the step's result once it returns; until then, any failure of the step (a lost reply, a
// timeout, a crash of this process or of the server) makes Restate run it again, with its
// default retry policy. No request carries an idempotency key, a put has no precondition, and
// a transfer is signed anew on every run (viem's `sendTransaction`, its defaults kept).
import * as restate from "@restatedev/restate-sdk";
import { createWalletClient, http } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import {
  MESSAGES_KEY, PAYMENTS_KEY, PAYMENTS_URL, REQUEST_TIMEOUT_MS, SENDER, answerError, chainKey, refundError, refundForm,
  serve, urlOf,
} from "./common.mjs";

/** A fetch with the scenario's timeout: its answer's body as text, or the step's error. */
async function call(what, url, init) {
  const res = await fetch(url, { ...init, signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) });
  const text = await res.text();
  if (!res.ok) throw answerError(what, res.status, text.slice(0, 200));
  return { res, text };
}

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
      return { order_id: order.order_id, refund_id: refund.id, external_id: refund.id, amount: refund.amount, status: refund.status };
    },
  },
});

const workspaces = restate.service({
  name: "Workspaces",
  handlers: {
    create: async (ctx, ws) => {
      const id = await ctx.run("create-workspace", async () => {
        const { text } = await call("create", `${urlOf("workspaces")}/v1/workspaces`, {
          method: "POST",
          headers: { "Content-Type": "application/json" },
          body: JSON.stringify({ external_id: ws.external_id, name: ws.name }),
        });
        return JSON.parse(text).id;
      });
      return { external_id: id };
    },
  },
});

const files = restate.service({
  name: "Files",
  handlers: {
    put: async (ctx, file) => {
      const etag = await ctx.run("put-object", async () => {
        const { res } = await call("put", `${urlOf("files")}/${file.bucket}/${encodeURI(file.key)}`, { method: "PUT", body: file.body });
        return res.headers.get("etag");
      });
      return { external_id: etag };
    },
  },
});

const chain = restate.service({
  name: "Chain",
  handlers: {
    transfer: async (ctx, transfer) => {
      const hash = await ctx.run("transfer", () => {
        const wallet = createWalletClient({
          account: privateKeyToAccount(chainKey()),
          transport: http(urlOf("chain"), { timeout: REQUEST_TIMEOUT_MS }),
        });
        return wallet.sendTransaction({ to: transfer.to, value: BigInt(transfer.value), chain: null });
      });
      return { external_id: hash, tx_hash: hash };
    },
  },
});

const messages = restate.service({
  name: "Messages",
  handlers: {
    send: async (ctx, message) => {
      const id = await ctx.run("send-email", async () => {
        const { text } = await call("send", `${urlOf("messages")}/emails`, {
          method: "POST",
          headers: { Authorization: `Bearer ${MESSAGES_KEY}`, "Content-Type": "application/json" },
          body: JSON.stringify({ from: SENDER, to: message.to, subject: message.subject, text: message.body }),
        });
        return JSON.parse(text).id;
      });
      return { external_id: id };
    },
  },
});

serve([refunds, workspaces, files, chain, messages]);
