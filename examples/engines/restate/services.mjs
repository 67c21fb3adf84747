// What the careful app's four other actions say to their services, and how each effect is
// looked up (after examples/executors/typescript/src/services.ts, in plain fetch; viem only
// signs). Per action: `send` (one write, its answer as an Outcome, never a throw), `lookup`
// (what the service's own records show, never a throw: a failure is FAILED), and where a
// first send needs something made once, `prepare` (a put's precondition, a transfer's signed
// bytes), which the app journals before the first send.
//
// The one rule that matters most: a timeout is never a "no". Only a refused connection proves
// that nothing left; anything after the first byte may have been sent is AMBIGUOUS.
import { createHash } from "node:crypto";
import { keccak256 } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { MESSAGES_KEY, REQUEST_TIMEOUT_MS, SENDER, chainKey, urlOf } from "./common.mjs";

// What a send established.
export const DONE = "done"; // the service says the effect exists
export const REJECTED = "rejected"; // a definite refusal: nothing was done
export const NEEDS_DECISION = "needs_decision"; // a refusal a person must act on (400, 401, 403, 422)
export const NOT_EXECUTED = "not_executed"; // certainly not sent or not executed (refused connection, 429)
export const AMBIGUOUS = "ambiguous"; // may or may not have executed: timeout, reset, 5xx, 409, ...
export const CONFLICT = "conflict"; // the object or nonce moved on: perhaps by our own earlier send
// What a lookup found.
export const FOUND = "found";
export const ABSENT = "absent"; // final only once nothing in flight can land and no read can lag
export const SUPERSEDED = "superseded"; // not there and can never be (another version, our nonce used)
export const FAILED = "failed"; // the lookup itself failed: cannot tell yet

const DECISION_STATUSES = [400, 401, 403, 422];
const LOOKUP_PAGES_MAX = 10;
/** The name under which a write carries the id of the intent it does (twice's checker reads it). */
const INTENT_TAG = "twice_intent";

/** A service's contract terms, from the env the mapping fills (`FILES_SETTLE_MS`, ...). */
function contract(service) {
  const env = (term, fallback) => process.env[`${service.toUpperCase()}_${term}`] || fallback;
  return {
    settleMs: Number(env("SETTLE_MS", 30000)),
    readLagMs: Number(env("READ_LAG_MS", 0)),
    acksMayLie: env("ACKS", "reliable") === "may_lie",
    conditionalWrites: env("CONDITIONAL_WRITES", "false").toLowerCase() === "true",
    fencing: env("FENCING", "false").toLowerCase() === "true",
  };
}

const outcome = (kind, error = "", extra = {}) => ({ kind, error, ...extra });

/** One request with the scenario's timeout: `{status, headers, text}`, or `{error}`. */
async function request(url, init = {}) {
  try {
    const res = await fetch(url, { ...init, signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) });
    return { status: res.status, headers: res.headers, text: await res.text() };
  } catch (error) {
    return { error };
  }
}

/** What an exception of fetch means: only a refused connection proves nothing was sent. */
function transport(error) {
  for (let e = error; e; e = e.cause) {
    if (e.code === "ECONNREFUSED") return outcome(NOT_EXECUTED, `not sent: ${e.message}`);
  }
  const cause = error.cause ? ` (${error.cause.code || error.cause.message})` : "";
  return outcome(AMBIGUOUS, error.name === "TimeoutError" ? `no answer within ${REQUEST_TIMEOUT_MS} ms` : `${error.message}${cause}`);
}

/** What an HTTP status that is no success means (`code`: the service's own error code or type). */
function refusal(status, code, message) {
  const error = `HTTP ${status} ${code || ""}: ${message}`;
  // 409: in flight under this key, or an object or id that exists (perhaps ours); 408: unsure;
  // the same key with other parameters: whose request the key holds, only a lookup tells.
  if (status === 409 || status === 408 || code === "idempotency_error") return outcome(AMBIGUOUS, error);
  if (status === 429) return outcome(NOT_EXECUTED, error);
  if (DECISION_STATUSES.includes(status)) return outcome(NEEDS_DECISION, error, { status, words: `${code || ""}: ${message}` });
  if (status >= 400 && status < 500) return outcome(REJECTED, error);
  return outcome(AMBIGUOUS, error);
}

function json(text) {
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
}

// ---- workspaces.create: a JSON API with idempotency keys and, where offered, fencing tokens

const workspacesTerms = contract("workspaces");
export const workspaces = {
  contract: workspacesTerms,
  hollow: workspacesTerms.acksMayLie,
  guarded: false,
  async send(p, { key, marker }) {
    const headers = { "Content-Type": "application/json", "Idempotency-Key": key };
    // A token that only grows: a send paused and resumed after a later one cannot win.
    if (workspacesTerms.fencing) headers["Fencing-Token"] = String(Date.now());
    const body = JSON.stringify({ external_id: p.external_id, name: p.name, metadata: { [INTENT_TAG]: marker } });
    const r = await request(`${urlOf("workspaces")}/v1/workspaces`, { method: "POST", headers, body });
    if (r.error) return transport(r.error);
    const answer = json(r.text);
    const error = answer?.error;
    if (r.status >= 300) return refusal(r.status, error?.type === "idempotency_error" ? error.type : error?.code, error?.message ?? r.text.slice(0, 200));
    if (answer?.id && answer.external_id === p.external_id && answer.name === p.name) return outcome(DONE, "", { externalId: answer.id });
    return outcome(AMBIGUOUS, `a success that is not this workspace: ${r.text.slice(0, 200)}`);
  },
  // External ids are one per intent: a workspace with ours is ours.
  async lookup(p) {
    const r = await request(`${urlOf("workspaces")}/v1/workspaces?${new URLSearchParams({ external_id: p.external_id })}`);
    if (r.error || r.status !== 200) return { kind: FAILED, detail: `listing workspaces: ${r.error?.message ?? r.status}` };
    const found = (json(r.text)?.data ?? []).find((w) => w.external_id === p.external_id);
    return found ? { kind: FOUND, externalId: found.id, paramsMatch: found.name === p.name } : { kind: ABSENT };
  },
};

// ---- files.put: S3 (path style; the fake takes unsigned requests), guarded by a precondition

const filesTerms = contract("files");
const objectUrl = (p) => `${urlOf("files")}/${p.bucket}/${encodeURI(p.key)}`;
const quotedMd5 = (text) => `"${createHash("md5").update(text, "utf8").digest("hex")}"`;
const s3Field = (xml, name) => (xml.match(new RegExp(`<${name}>([^<]*)</${name}>`)) || [])[1];

export const files = {
  contract: filesTerms,
  hollow: filesTerms.acksMayLie,
  // Once one send of a conditional put landed, its condition no longer holds: a resend lands at most once.
  guarded: filesTerms.conditionalWrites,
  // The version every send must find: none (If-None-Match: *) or the one read now (If-Match).
  prepare: filesTerms.conditionalWrites
    ? async (p) => {
        const r = await request(objectUrl(p), { method: "HEAD" });
        if (r.status === 404) return { precondition: "if_none_match" };
        if (r.status === 200) return { precondition: { if_match: r.headers.get("etag") } };
        throw new Error(`HEAD ${p.bucket}/${p.key}: ${r.error?.message ?? r.status}`); // a read: Restate retries it
      }
    : undefined,
  async send(p, { marker, prepared }) {
    const headers = { "Content-Type": "text/plain", "x-amz-meta-twice-intent": marker };
    const before = prepared.precondition;
    if (before === "if_none_match") headers["If-None-Match"] = "*";
    else if (before) headers["If-Match"] = before.if_match;
    const r = await request(objectUrl(p), { method: "PUT", headers, body: p.body });
    if (r.error) return transport(r.error);
    if (r.status === 200) {
      const etag = r.headers.get("etag");
      if (etag === quotedMd5(p.body)) return outcome(DONE, "", { externalId: etag });
      return outcome(AMBIGUOUS, `a success with ETag ${etag}, not the MD5 of the body sent`);
    }
    const code = s3Field(r.text, "Code");
    // 412: the object is no longer the version read, perhaps because our own send landed; 409:
    // a concurrent conditional write. Both for a lookup to tell.
    if (r.status === 412 || r.status === 409) return outcome(CONFLICT, `HTTP ${r.status} ${code}`);
    // A body that stopped arriving stored nothing.
    if (r.status === 400 && code === "RequestTimeout") return outcome(NOT_EXECUTED, `HTTP 400 ${code}`);
    return refusal(r.status, code, s3Field(r.text, "Message") ?? "");
  },
  // HEAD: our body's ETag is ours; the version read before the first send means ours has not
  // landed (and still can); any other version means it never will.
  async lookup(p, { prepared }) {
    const before = prepared.precondition;
    const where = `${p.bucket}/${p.key}`;
    const r = await request(objectUrl(p), { method: "HEAD" });
    if (r.status === 404) {
      if (before?.if_match) return { kind: SUPERSEDED, detail: `${where} was deleted since ${before.if_match} was read` };
      return { kind: ABSENT };
    }
    if (r.status !== 200) return { kind: FAILED, detail: `HEAD ${where}: ${r.error?.message ?? r.status}` };
    const etag = r.headers.get("etag");
    if (etag === quotedMd5(p.body)) return { kind: FOUND, externalId: etag, paramsMatch: true };
    if (!before || before.if_match === etag) return { kind: ABSENT };
    return { kind: SUPERSEDED, detail: `${where} holds ${etag}: neither ours nor the version read before the first send` };
  },
};

// ---- chain.transfer: JSON-RPC, the transfer signed once (viem), guarded by its nonce

const chainTerms = contract("chain");
const TRANSFER_GAS = 21000n;

/** A JSON-RPC call: its result, or a throw with `status` (HTTP) or `rpc` ({code, message}). */
async function rpc(method, params = []) {
  const r = await request(urlOf("chain"), {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method, params }),
  });
  if (r.error) throw r.error;
  const answer = json(r.text);
  if (r.status !== 200 || !answer) throw Object.assign(new Error(`${method}: HTTP ${r.status} ${r.text.slice(0, 200)}`), { status: r.status, answer });
  if (answer.error) throw Object.assign(new Error(`${method}: JSON-RPC error ${answer.error.code}: ${answer.error.message}`), { rpc: answer.error });
  return answer.result;
}

/** Nonces this process signed with, per sender: a node that lags cannot make two transfers share one. */
const signedNonces = new Map();

export const chain = {
  contract: chainTerms,
  hollow: false,
  guarded: true, // the same signed bytes can be mined once
  readsBack: true, // a node answers the hash when the transaction is pooled, before it is mined
  // Sign once: chain id, pending nonce, fees (four reads), then the lowest nonce at or above the
  // pending one this process has not signed with.
  async prepare(p) {
    const account = privateKeyToAccount(chainKey());
    const chainId = Number(await rpc("eth_chainId"));
    const pending = Number(await rpc("eth_getTransactionCount", [account.address, "pending"]));
    const gasPrice = BigInt(await rpc("eth_gasPrice"));
    const tip = BigInt(await rpc("eth_maxPriorityFeePerGas"));
    const sender = account.address.toLowerCase();
    let nonce = pending;
    while (signedNonces.get(sender)?.has(nonce)) nonce += 1;
    const raw = await account.signTransaction({
      type: "eip1559", chainId, nonce, to: p.to, value: BigInt(p.value), gas: TRANSFER_GAS,
      maxFeePerGas: 2n * gasPrice + tip, maxPriorityFeePerGas: tip, // room for the base fee to double
    });
    return { raw_tx: raw, tx_hash: keccak256(raw), nonce, from: sender };
  },
  /** Whether `prepared`'s nonce is taken in this process (true) or given back (false). */
  hold(prepared, taken) {
    if (!signedNonces.has(prepared.from)) signedNonces.set(prepared.from, new Set());
    signedNonces.get(prepared.from)[taken ? "add" : "delete"](prepared.nonce);
  },
  async send(p, { prepared }) {
    try {
      const hash = await rpc("eth_sendRawTransaction", [prepared.raw_tx]); // always the recorded bytes
      if (String(hash).toLowerCase() === prepared.tx_hash.toLowerCase()) return outcome(DONE, "", { externalId: prepared.tx_hash });
      return outcome(AMBIGUOUS, `the node answered ${hash}, not ${prepared.tx_hash}`);
    } catch (error) {
      if (error.status !== undefined) {
        const words = error.answer?.error ? `JSON-RPC error ${error.answer.error.code}: ${error.answer.error.message}` : error.message;
        return refusal(error.status, "", words);
      }
      if (!error.rpc) return transport(error);
      const message = String(error.rpc.message).toLowerCase();
      // The node holds exactly these bytes already: a broadcast of ours arrived.
      if (message.includes("already known")) return outcome(DONE, error.message, { externalId: prepared.tx_hash });
      // The nonce is used (perhaps by these bytes), or another transaction holds it in the pool.
      if (message.includes("nonce too low") || message.includes("underpriced")) return outcome(CONFLICT, error.message);
      if (error.rpc.code === -32603) return outcome(AMBIGUOUS, error.message);
      return outcome(REJECTED, error.message);
    }
  },
  // The receipt of our hash; without one, whether another transaction used our nonce (then these
  // bytes can never be mined), or ours waits in the pool, or the node does not know it.
  async lookup(p, { prepared }) {
    const { tx_hash: hash, nonce, from } = prepared;
    try {
      const mined = async () => {
        const receipt = await rpc("eth_getTransactionReceipt", [hash]);
        if (!receipt) return null;
        if (receipt.status === "0x1") return { kind: FOUND, externalId: hash, paramsMatch: true };
        return { kind: SUPERSEDED, detail: `${hash} was mined in block ${receipt.blockNumber} and reverted` };
      };
      const found = await mined();
      if (found) return found;
      if (Number(await rpc("eth_getTransactionCount", [from, "latest"])) > nonce) {
        // The receipt read above may predate the block that used the nonce: read it once more.
        return (await mined()) ?? { kind: SUPERSEDED, detail: `nonce ${nonce} of ${from} is used, and ${hash} has no receipt` };
      }
      if ((await rpc("eth_getTransactionByHash", [hash])) === null) return { kind: ABSENT };
      return { kind: FAILED, detail: `${hash} waits in the node's pool` };
    } catch (error) {
      return { kind: FAILED, detail: `looking up ${hash}: ${error.message}` };
    }
  },
};

// ---- messages.send: Resend's API, and the recipient's inbox (the fake's test mailbox)

const messagesTerms = contract("messages");
const INTENT_HEADER = "X-Twice-Intent";

export const messages = {
  contract: messagesTerms,
  // Whatever the contract says: the answer is the API accepting the message, the effect is its
  // delivery to the inbox.
  hollow: true,
  guarded: false,
  async send(p, { key, marker }) {
    const r = await request(`${urlOf("messages")}/emails`, {
      method: "POST",
      headers: { Authorization: `Bearer ${MESSAGES_KEY}`, "Content-Type": "application/json", "Idempotency-Key": key },
      body: JSON.stringify({ from: SENDER, to: p.to, subject: p.subject, text: p.body, headers: { [INTENT_HEADER]: marker } }),
    });
    if (r.error) return transport(r.error);
    const answer = json(r.text);
    if (r.status >= 300) return refusal(r.status, answer?.name, answer?.message ?? r.text.slice(0, 200));
    if (typeof answer?.id === "string" && answer.id) return outcome(DONE, "", { externalId: answer.id });
    return outcome(AMBIGUOUS, `an unreadable success: ${r.text.slice(0, 200)}`);
  },
  // The recipient's inbox, paged, oldest first; ours carries the intent's id in a header.
  async lookup(p, { marker }) {
    const query = new URLSearchParams({ limit: "100" });
    for (let page = 0; page < LOOKUP_PAGES_MAX; page++) {
      const r = await request(`${urlOf("messages")}/mailboxes/${p.to}/messages?${query}`);
      if (r.error || r.status !== 200) return { kind: FAILED, detail: `reading the inbox of ${p.to}: ${r.error?.message ?? r.status}` };
      const { data = [], has_more: more } = json(r.text) ?? {};
      for (const m of data) {
        const tag = Object.entries(m.headers ?? {}).find(([name]) => name.toLowerCase() === INTENT_HEADER.toLowerCase());
        if (tag?.[1] === marker) {
          return { kind: FOUND, externalId: m.email_id, paramsMatch: m.subject === p.subject && m.text === p.body };
        }
      }
      if (!more || data.length === 0) return { kind: ABSENT };
      query.set("after", String(data[data.length - 1].id));
    }
    return { kind: FAILED, detail: `more than ${LOOKUP_PAGES_MAX} pages in the inbox of ${p.to}` };
  },
};
