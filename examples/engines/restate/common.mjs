// What both apps share: where the services are, how long one request may take, and the HTTP/2
// endpoint that serves Restate services on loopback.
import "./polyfill.mjs";
import http2 from "node:http2";
import * as restate from "@restatedev/restate-sdk";

/** The payments service (Stripe's API): `PAYMENTS_URL`, e.g. twice serve's payments fake. */
export const PAYMENTS_URL = requiredEnv("PAYMENTS_URL").replace(/\/$/, "");
/** The secret key sent as `Authorization: Bearer ...`. */
export const PAYMENTS_KEY = process.env.PAYMENTS_KEY || "sk_test_x";
/** How long one request may take (connect to last byte), in ms. */
export const REQUEST_TIMEOUT_MS = Number(process.env.REQUEST_TIMEOUT_MS || 2000);
/** The messages API key (Resend's keys start with `re_`). */
export const MESSAGES_KEY = process.env.MESSAGES_API_KEY || "re_test_twice";
/** Who the apps' messages come from. */
export const SENDER = "twice restate app <restate@twice.invalid>";

/** The base URL of `service` (`WORKSPACES_URL`, ...): only the services a scenario uses have one. */
export function urlOf(service) {
  const url = (process.env[`${service.toUpperCase()}_URL`] || "").replace(/\/$/, "");
  if (!url) throw new restate.TerminalError(`${service.toUpperCase()}_URL is not set`);
  return url;
}

/** The chain account's private key (`CHAIN_PRIVATE_KEY`, twice's `secrets.chain_private_key`). */
export function chainKey() {
  const key = process.env.CHAIN_PRIVATE_KEY;
  if (!key) throw new restate.TerminalError("CHAIN_PRIVATE_KEY is not set");
  return key;
}

function requiredEnv(name) {
  const value = process.env[name];
  if (!value) {
    console.error(`${name} is not set`);
    process.exit(2);
  }
  return value;
}

/** A refund request body, form-encoded as stripe's SDKs send it. */
export function refundForm(order, extraMetadata = {}) {
  const form = new URLSearchParams({
    payment_intent: order.payment_intent,
    amount: String(order.amount),
    "metadata[order_id]": order.order_id,
  });
  for (const [k, v] of Object.entries(extraMetadata)) form.set(`metadata[${k}]`, v);
  return form;
}

/**
 * The error a refund answer turns into, as the Restate docs advise: a `TerminalError` for a
 * refusal that a retry cannot change (a 4xx other than 409 and 429), so the invocation ends
 * failed; a plain `Error` (retried by Restate) for everything else.
 */
export function refundError(status, body) {
  const error = (body && body.error) || {};
  return answerError("refund", status, `${error.code || error.type || ""}: ${error.message || ""}`);
}

/** The same rule for any HTTP answer that is no success: `what` answered `status` `words`. */
export function answerError(what, status, words) {
  const message = `${what} answered ${status} ${words}`.trim();
  if (status >= 400 && status < 500 && status !== 409 && status !== 429) {
    return new restate.TerminalError(message, { errorCode: status });
  }
  return new Error(message);
}

/** Serves `services` over HTTP/2 on 127.0.0.1:`PORT`. */
export function serve(services) {
  const port = Number(requiredEnv("PORT"));
  const server = http2.createServer(restate.createEndpointHandler({ services }));
  server.listen(port, "127.0.0.1", () => console.log(`listening on 127.0.0.1:${port}`));
  for (const signal of ["SIGTERM", "SIGINT"]) process.on(signal, () => process.exit(0));
}
