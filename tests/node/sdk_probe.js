// One happy path of an official Node SDK against a fake, over loopback HTTP, the way the
// TypeScript executor (examples/executors/typescript) calls it: its retries off, our timeout.
// Prints one JSON line: what the client observed. Any error the SDK raises is printed too
// (never thrown), so the Rust test can say which request a fake answered wrongly.
//
// Usage: node sdk_probe.js SERVICE URL [ARGS...]
//   payments URL PAYMENT_INTENT   refunds.create with an idempotency key, then refunds.list
//   payments-closed URL PAYMENT_INTENT sdk|executor   one refunds.create on a connection closed after the commit
//   payment-intents URL OLDEST    paymentIntents.list({limit: 2}) auto-paginated forward (for await,
//                                 autoPagingToArray) and back (ending_before: OLDEST)
//   events URL                    refunds.create twice, then events.list({limit: 2}) auto-paginated,
//                                 events.list({types: [...]}) and events.retrieve of the newest
//   webhooks URL                  webhookEndpoints.create (an endpoint on loopback), refunds.create, then each
//                                 delivery through webhooks.constructEvent: as sent, signed under a guessed
//                                 secret, altered, and signed ten minutes ago; then the endpoint deleted
//   files URL BUCKET KEY          HEAD (404), PUT If-None-Match: *, HEAD, PUT If-Match, PUT If-Match stale (412)
//   chain URL PRIVATE_KEY TO WEI  chain id, nonce, fees; sign EIP-1559 locally; send raw; receipt
//   messages URL TO               emails.send with an idempotency key and a header, then the inbox
"use strict";

const path = require("node:path");
const http = require("node:http");
const { createRequire } = require("node:module");

// The SDKs are the example's, pinned in its package-lock.json.
const example = createRequire(path.join(__dirname, "../../examples/executors/typescript/package.json"));
const TIMEOUT_MS = 5000;

function failure(error) {
  const out = { name: error && error.name, message: error && error.message };
  for (const field of ["code", "statusCode", "type", "rawType", "status", "details"]) {
    if (error && error[field] !== undefined) out[field] = String(error[field]);
  }
  if (error && error.$metadata) out.httpStatusCode = error.$metadata.httpStatusCode;
  return out;
}

async function step(steps, name, call) {
  try {
    steps.push({ step: name, ok: true, value: await call() });
  } catch (error) {
    steps.push({ step: name, ok: false, error: failure(error) });
  }
}

// stripe-node pointed at the fake, its retries off; with `httpClient` when given, else its own
// Node client on a connection per request.
function stripeAt(url, httpClient) {
  const Stripe = example("stripe");
  const u = new URL(url);
  return new Stripe("sk_test_twice", {
    host: u.hostname,
    port: u.port,
    protocol: "http",
    maxNetworkRetries: 0,
    timeout: TIMEOUT_MS,
    telemetry: false,
    httpClient: httpClient || Stripe.createNodeHttpClient(new http.Agent({ keepAlive: false })),
  });
}

async function payments(url, paymentIntent) {
  const stripe = stripeAt(url);
  const steps = [];
  const params = { payment_intent: paymentIntent, amount: 1200, metadata: { twice_intent: "i-1" } };
  await step(steps, "create", async () => {
    const r = await stripe.refunds.create(params, { idempotencyKey: "key-1" });
    return { id: r.id, amount: r.amount, payment_intent: r.payment_intent, metadata: r.metadata };
  });
  await step(steps, "replay", async () => (await stripe.refunds.create(params, { idempotencyKey: "key-1" })).id);
  await step(steps, "list", async () => {
    const list = await stripe.refunds.list({ payment_intent: paymentIntent, limit: 100 });
    return { has_more: list.has_more, ids: list.data.map((r) => r.id), metadata: list.data.map((r) => r.metadata) };
  });
  return steps;
}

// One refunds.create whose connection the fake closes after committing, with stripe-node's own
// Node client ("sdk") or with the executor's (`noResendOnClose`, from the compiled example):
// how many requests one call sends, and what the caller is told.
async function paymentsClosed(url, paymentIntent, client) {
  const Stripe = example("stripe");
  let httpClient = Stripe.createNodeHttpClient(new http.Agent({ keepAlive: false }));
  if (client === "executor") {
    const { noResendOnClose } = require(path.join(__dirname, "../../examples/executors/typescript/dist/services.js"));
    httpClient = noResendOnClose(httpClient);
  }
  const stripe = stripeAt(url, httpClient);
  const steps = [];
  const params = { payment_intent: paymentIntent, amount: 1200, metadata: { twice_intent: "i-1" } };
  await step(steps, "create", async () => (await stripe.refunds.create(params, { idempotencyKey: "key-1" })).id);
  return steps;
}

// stripe-node's auto-pagination of paymentIntents.list, two to a page: forward, as `for await`
// and as autoPagingToArray, and back from OLDEST (ending_before), which the SDK walks with
// ending_before and yields oldest first. Each step is the ids in the order the SDK gave them.
async function paymentIntents(url, oldest) {
  const stripe = stripeAt(url);
  const steps = [];
  const ids = (intents) => intents.map((pi) => pi.id);
  await step(steps, "for await", async () => {
    const seen = [];
    for await (const pi of stripe.paymentIntents.list({ limit: 2 })) seen.push(pi);
    return ids(seen);
  });
  await step(steps, "autoPagingToArray", async () =>
    ids(await stripe.paymentIntents.list({ limit: 2 }).autoPagingToArray({ limit: 100 })),
  );
  await step(steps, "ending_before", async () =>
    ids(await stripe.paymentIntents.list({ limit: 2, ending_before: oldest }).autoPagingToArray({ limit: 100 })),
  );
  return steps;
}

async function events(url) {
  const stripe = stripeAt(url);
  const steps = [];
  for (const amount of [1000, 500]) {
    await step(steps, `refund ${amount}`, async () => (await stripe.refunds.create({ payment_intent: "pi_1", amount })).id);
  }
  await step(steps, "for await", async () => {
    const seen = [];
    for await (const event of stripe.events.list({ limit: 2 })) seen.push(event.type);
    return seen;
  });
  await step(steps, "types", async () =>
    (await stripe.events.list({ types: ["refund.created"] }).autoPagingToArray({ limit: 100 })).map((e) => e.type),
  );
  await step(steps, "retrieve", async () => {
    const [newest] = (await stripe.events.list({ limit: 1 })).data;
    const event = await stripe.events.retrieve(newest.id);
    return { id: event.id, same: event.id === newest.id, type: event.type, refunded: event.data.object.amount_refunded };
  });
  return steps;
}

async function webhooks(url) {
  const stripe = stripeAt(url);
  const received = [];
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      received.push({ body: Buffer.concat(chunks).toString("utf8"), signature: req.headers["stripe-signature"] });
      res.writeHead(200, { "content-type": "application/json" }).end("{}");
    });
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  const endpointUrl = `http://127.0.0.1:${server.address().port}/stripe/webhooks`;
  const steps = [];
  let endpoint;
  await step(steps, "register", async () => {
    endpoint = await stripe.webhookEndpoints.create({ url: endpointUrl, enabled_events: ["charge.refunded"] });
    return { id: endpoint.id, secretPrefix: endpoint.secret.slice(0, 6) };
  });
  await step(steps, "refund", async () => (await stripe.refunds.create({ payment_intent: "pi_1", amount: 700 })).id);
  for (let i = 0; i < 1000 && received.length < 1; i++) await new Promise((r) => setTimeout(r, 20));
  const refusal = (body, header) => {
    try {
      stripe.webhooks.constructEvent(body, header, endpoint.secret);
      return null;
    } catch (error) {
      return `${error.type}: ${error.message}`;
    }
  };
  for (const { body, signature } of received) {
    await step(steps, "verify", async () => {
      const event = stripe.webhooks.constructEvent(body, signature, endpoint.secret);
      const old = Math.floor(Date.now() / 1000) - 600;
      return {
        type: event.type,
        refunded: event.data.object.amount_refunded,
        forged: refusal(body, stripe.webhooks.generateTestHeaderString({ payload: body, secret: "whsec_guessed" })),
        altered: refusal(body.replace('"livemode":false', '"livemode":true'), signature),
        stale: refusal(body, stripe.webhooks.generateTestHeaderString({ payload: body, secret: endpoint.secret, timestamp: old })),
      };
    });
  }
  await step(steps, "delete", async () => (await stripe.webhookEndpoints.del(endpoint.id)).deleted);
  server.close();
  return steps;
}

async function files(url, bucket, key) {
  const { S3Client, HeadObjectCommand, PutObjectCommand } = example("@aws-sdk/client-s3");
  const s3 = new S3Client({
    endpoint: url,
    forcePathStyle: true,
    region: "us-east-1",
    credentials: { accessKeyId: "twice", secretAccessKey: "twice" },
    maxAttempts: 1,
    requestHandler: { connectionTimeout: TIMEOUT_MS, requestTimeout: TIMEOUT_MS, httpAgent: new http.Agent({ keepAlive: false }) },
  });
  const steps = [];
  const head = async () => (await s3.send(new HeadObjectCommand({ Bucket: bucket, Key: key }))).ETag;
  const put = async (body, condition) =>
    (await s3.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: Buffer.from(body), ...condition }))).ETag;
  await step(steps, "head missing", head);
  await step(steps, "put if-none-match", () => put("first", { IfNoneMatch: "*" }));
  await step(steps, "head", head);
  const etag = steps[2].value;
  await step(steps, "put if-match", () => put("second", { IfMatch: etag }));
  await step(steps, "put if-match stale", () => put("third", { IfMatch: etag }));
  return steps;
}

async function chain(url, privateKey, to, wei) {
  const { createPublicClient, http: transport, hexToBigInt, keccak256 } = example("viem");
  const { privateKeyToAccount } = example("viem/accounts");
  const client = createPublicClient({ transport: transport(url, { retryCount: 0, timeout: TIMEOUT_MS, batch: false }) });
  const account = privateKeyToAccount(privateKey);
  const steps = [];
  const chainId = await client.getChainId();
  const nonce = await client.getTransactionCount({ address: account.address, blockTag: "pending" });
  const gasPrice = await client.getGasPrice();
  const tip = hexToBigInt(await client.request({ method: "eth_maxPriorityFeePerGas" }));
  steps.push({ step: "read", ok: true, value: { chainId, nonce, gasPrice: String(gasPrice), tip: String(tip) } });
  const raw = await account.signTransaction({
    type: "eip1559",
    chainId,
    nonce,
    to,
    value: BigInt(wei),
    gas: 21000n,
    maxFeePerGas: 2n * gasPrice + tip,
    maxPriorityFeePerGas: tip,
  });
  const hash = keccak256(raw);
  await step(steps, "send", async () => ({ answered: await client.sendRawTransaction({ serializedTransaction: raw }), hash }));
  await step(steps, "send again", () => client.sendRawTransaction({ serializedTransaction: raw }));
  await step(steps, "receipt", async () => {
    for (let i = 0; i < 100; i++) {
      const receipt = await client.request({ method: "eth_getTransactionReceipt", params: [hash] });
      if (receipt !== null) return { status: receipt.status, blockNumber: receipt.blockNumber };
      await new Promise((r) => setTimeout(r, 50));
    }
    return null;
  });
  await step(steps, "nonce after", () => client.getTransactionCount({ address: account.address, blockTag: "latest" }));
  return steps;
}

async function messages(url, to) {
  const { Resend } = example("resend");
  const resend = new Resend("re_test_twice", { baseUrl: url });
  const steps = [];
  const email = { from: "twice executor <executor@twice.invalid>", to, subject: "hello", text: "body", headers: { "X-Twice-Intent": "i-1" } };
  for (const name of ["send", "replay"]) {
    await step(steps, name, async () => {
      const { data, error } = await resend.emails.send(email, { idempotencyKey: "key-1", signal: AbortSignal.timeout(TIMEOUT_MS) });
      if (error) throw Object.assign(new Error(error.message), { name: error.name, statusCode: error.statusCode });
      return data;
    });
  }
  await step(steps, "inbox", async () => {
    const response = await fetch(`${url}/mailboxes/${to}/messages?limit=100`, { signal: AbortSignal.timeout(TIMEOUT_MS) });
    const body = await response.json();
    return { status: response.status, messages: (body.data || []).map((m) => ({ headers: m.headers, subject: m.subject, text: m.text })) };
  });
  return steps;
}

const probes = {
  payments,
  "payments-closed": paymentsClosed,
  "payment-intents": paymentIntents,
  events,
  webhooks,
  files,
  chain,
  messages,
};

async function main() {
  const [service, url, ...args] = process.argv.slice(2);
  const probe = probes[service];
  if (!probe) throw new Error(`no probe for ${service}; one of ${Object.keys(probes).join(", ")}`);
  const steps = await probe(url, ...args);
  process.stdout.write(`${JSON.stringify({ steps })}\n`);
}

main().catch((error) => {
  process.stderr.write(`${error.stack || error}\n`);
  process.exit(1);
});
