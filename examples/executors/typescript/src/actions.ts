/**
 * The five actions an agent may propose: their parameters, checked and put in canonical form,
 * and the parameter references of workflow steps.
 *
 * What is checked here is what `docs/protocol.md` (§3.2) asks of each action, and no more. The
 * canonical form is what the intent log stores and hashes: keys sorted, no spaces, integers
 * only. An intent's parameters never change after `propose`: what was authorised is what is
 * executed.
 */

import { createHash } from "node:crypto";

/** Every action this executor knows, and the service that carries it out. */
export const SERVICE_OF: Record<string, string> = {
  "payments.refund": "payments",
  "workspaces.create": "workspaces",
  "files.put": "files",
  "chain.transfer": "chain",
  "messages.send": "messages",
};
export const ACTIONS: readonly string[] = Object.keys(SERVICE_OF);

/** The secret `chain.transfer` signs with (init.secrets). */
export const CHAIN_KEY_SECRET = "chain_private_key";

export type Params = Record<string, unknown>;

const BUCKET = /^[A-Za-z0-9!\-_.*'()]+$/;
const OBJECT_KEY = /^[A-Za-z0-9!\-_.*'()/]+$/;
const ADDRESS = /^0x[0-9a-f]{40}$/;
const WEI = /^[1-9][0-9]*$/;
// An email address as the action table takes it (vocabulary::is_email_address): lowercase,
// so that it is the same text in the inbox, the ledger and the mailbox's URL.
const LABEL = "[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?";
const EMAIL = new RegExp(`^(?!\\.)(?!.*\\.\\.)[a-z0-9._+-]{1,64}(?<!\\.)@${LABEL}(?:\\.${LABEL})+$`);

/** The parameters are not what the action takes (protocol error 12). */
export class Malformed extends Error {}

export function isObject(value: unknown): value is Params {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** The parameters of `action`, checked, as a new object; throws Malformed. */
export function check(action: string, params: unknown): Params {
  if (!isObject(params)) throw new Malformed(`${action}: params must be a JSON object`);
  const text = (name: string): string => {
    const value = params[name];
    if (typeof value !== "string" || value === "") {
      throw new Malformed(`${action}: "${name}" must be a non-empty string`);
    }
    return value;
  };
  const only = (...names: string[]): void => {
    const extra = Object.keys(params)
      .filter((n) => !names.includes(n))
      .sort();
    if (extra.length > 0) throw new Malformed(`${action}: unknown parameter "${extra[0]}"`);
  };

  switch (action) {
    case "payments.refund": {
      only("payment_intent", "amount");
      const amount = params.amount;
      // A safe integer only: a larger one would not survive a round trip through JSON here.
      if (typeof amount !== "number" || !Number.isSafeInteger(amount) || amount <= 0) {
        throw new Malformed(`${action}: "amount" must be a positive integer`);
      }
      return { payment_intent: text("payment_intent"), amount };
    }
    case "workspaces.create":
      only("external_id", "name");
      return { external_id: text("external_id"), name: text("name") };
    case "files.put": {
      only("bucket", "key", "body");
      const bucket = text("bucket");
      const key = text("key");
      // Both go into the request's path as they are: refuse what would need escaping rather
      // than guess how a service decodes it.
      if (!BUCKET.test(bucket)) {
        throw new Malformed(`${action}: "bucket" must be letters, digits, '.', '-' and '_'`);
      }
      if (!OBJECT_KEY.test(key) || key.startsWith("/")) {
        const allowed = "letters, digits and ! - _ . * ' ( ) /, not starting with '/'";
        throw new Malformed(`${action}: "key" must be ${allowed}`);
      }
      return { bucket, key, body: text("body") };
    }
    case "chain.transfer": {
      only("to", "value");
      const to = text("to");
      const value = text("value");
      if (!ADDRESS.test(to)) throw new Malformed(`${action}: "to" must be 0x and 40 lowercase hex digits`);
      // Wei outgrow JSON's safe integers, so the value is a decimal string.
      if (!WEI.test(value)) throw new Malformed(`${action}: "value" must be a positive decimal string of wei`);
      return { to, value };
    }
    case "messages.send": {
      only("to", "subject", "body");
      const to = text("to");
      if (to.length > 254 || !EMAIL.test(to)) {
        throw new Malformed(`${action}: "to" must be an email address in lowercase letters, digits and . _ + -`);
      }
      return { to, subject: text("subject"), body: text("body") };
    }
    default:
      throw new Malformed(`action "${action}" is not one of ${ACTIONS.join(", ")}`);
  }
}

// -- workflows: steps that build on steps (docs/protocol.md §3.2) --------------------------

/**
 * What each action's effect produces that a later step may read (vocabulary/src/action.rs,
 * `result_fields`): the refund's, the workspace's and the message's id; the put's quoted ETag;
 * the transfer's hash.
 */
export const RESULT_FIELDS: Record<string, readonly string[]> = {
  "payments.refund": ["id"],
  "workspaces.create": ["id"],
  "files.put": ["etag"],
  "chain.transfer": ["tx_hash"],
  "messages.send": ["id"],
};

/** The business key of each action: the harness attributes effects by it, so it never takes a reference. */
export const BUSINESS_KEY: Record<string, string> = {
  "payments.refund": "payment_intent",
  "workspaces.create": "external_id",
  "files.put": "key",
  "chain.transfer": "to",
  "messages.send": "to",
};

/** The parameters that may take a reference: text parameters that are not the business key. */
export const TAKES_REFERENCE: Record<string, readonly string[]> = {
  "payments.refund": [],
  "workspaces.create": ["name"],
  "files.put": ["body"],
  "chain.transfer": [],
  "messages.send": ["subject", "body"],
};

/** A valid value of each parameter, standing in for a reference while the rest is checked. */
const EXAMPLE: Params = {
  payment_intent: "x",
  amount: 1,
  external_id: "x",
  name: "x",
  bucket: "reports",
  key: "q3/summary.csv",
  body: "x",
  subject: "x",
  to: "0x00000000000000000000000000000000000000b0",
  value: "1000000000000000000",
};

const PLACEHOLDER = "{}";
const FORMAT_CHARS_MAX = 1_000;

export interface Reference {
  from: string;
  field: string;
  format?: string;
}

/**
 * A parameter value: null for a plain value, the reference for a well-formed one; throws
 * Malformed (saying what is wrong) for an object that is not one. The same rules as
 * vocabulary/src/workflow.rs, `ParamRef::parse`.
 */
export function parseReference(value: unknown): Reference | null {
  if (!isObject(value)) return null;
  const extra = Object.keys(value)
    .filter((k) => !["from", "field", "format"].includes(k))
    .sort();
  if (extra.length > 0) {
    throw new Malformed(`unknown field "${extra[0]}" in a reference; a reference has from, field and format`);
  }
  for (const name of ["from", "field", "format"]) {
    if (name in value && (typeof value[name] !== "string" || value[name] === "")) {
      throw new Malformed(`"${name}" of a reference must be a non-empty string`);
    }
  }
  if (!("from" in value)) throw new Malformed('a reference needs "from", the id of an earlier intent');
  if (!("field" in value)) throw new Malformed('a reference needs "field", a field of that intent\'s result');
  const form = value.format as string | undefined;
  if (form !== undefined) {
    if (form.split(PLACEHOLDER).length !== 2) {
      throw new Malformed(`"format" must hold "${PLACEHOLDER}" exactly once, where the value goes`);
    }
    if ([...form].length > FORMAT_CHARS_MAX) {
      throw new Malformed(`"format" is longer than ${FORMAT_CHARS_MAX} characters`);
    }
  }
  const reference: Reference = { from: value.from as string, field: value.field as string };
  if (form !== undefined) reference.format = form;
  return reference;
}

/** Every reference among `params`, as [parameter name, reference], in name order. */
export function references(params: unknown): Array<[string, Reference]> {
  if (!isObject(params)) return [];
  const found: Array<[string, Reference]> = [];
  for (const name of Object.keys(params).sort()) {
    let reference: Reference | null;
    try {
      reference = parseReference(params[name]);
    } catch (problem) {
      throw new Malformed(`parameter "${name}": ${(problem as Error).message}`);
    }
    if (reference !== null) found.push([name, reference]);
  }
  return found;
}

/** The parameter's value once the result field's value is known. */
export function render(reference: Reference, value: string): string {
  return reference.format === undefined ? value : reference.format.replace(PLACEHOLDER, value);
}

/**
 * Throws Malformed unless `param` of `action` may read `reference` (from an intent of
 * `fromAction`, null when no such intent was recorded): vocabulary's `check_reference`.
 */
export function checkReference(
  action: string,
  param: string,
  reference: Reference,
  fromAction: string | null,
  listedInAfter: boolean,
): void {
  if (!(TAKES_REFERENCE[action] ?? []).includes(param)) {
    const key = BUSINESS_KEY[action] ?? "?";
    throw new Malformed(
      `parameter "${param}" of ${action} cannot take a reference (only text parameters and ` +
        `object keys that are not the business key "${key}" can)`,
    );
  }
  if (fromAction === null) {
    throw new Malformed(`parameter "${param}" reads from "${reference.from}", which is no earlier intent`);
  }
  if (!listedInAfter) {
    throw new Malformed(`parameter "${param}" reads from "${reference.from}", which must also be listed in "after"`);
  }
  const fields = RESULT_FIELDS[fromAction] ?? [];
  if (!fields.includes(reference.field)) {
    throw new Malformed(
      `parameter "${param}": ${fromAction} has no result field "${reference.field}"; it has: ${fields.join(", ")}`,
    );
  }
}

/** `params` with each reference replaced by a valid value, so that the rest can be checked. */
export function withPlaceholders(params: Params): Params {
  const out = { ...params };
  for (const [name] of references(params)) out[name] = EXAMPLE[name] ?? "x";
  return out;
}

/** `params` with each reference replaced by its resolved value; throws Malformed for one that has none. */
export function withResolved(params: Params, resolved: Record<string, string>): Params {
  const out = { ...params };
  for (const [name, reference] of references(params)) {
    if (!(name in resolved)) {
      throw new Malformed(`parameter "${name}" reads from "${reference.from}" and is not resolved yet`);
    }
    out[name] = resolved[name];
  }
  return out;
}

/**
 * Sorted keys, no insignificant white space, UTF-8 as it is: the same text for the same
 * parameters whatever order the agent wrote them in.
 */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  if (isObject(value)) {
    const keys = Object.keys(value).sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(value[k])}`).join(",")}}`;
  }
  return JSON.stringify(value);
}

/**
 * What the payload hash covers: the canonical parameters, and for a step its `after` too, so
 * that proposing the same id again compares everything authorised.
 */
export function payloadText(params: string, after: readonly string[]): string {
  if (after.length === 0) return params;
  return `{"after":${canonicalJson([...after])},"params":${params}}`;
}

/**
 * SHA-256 of the canonical text, stored beside it: a row whose parameters no longer match
 * their hash was changed behind the executor's back, and is never executed.
 */
export function payloadHash(canonical: string): string {
  return createHash("sha256").update(canonical, "utf8").digest("hex");
}
