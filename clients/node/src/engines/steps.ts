/**
 * Steps that build on steps (docs/protocol.md §3.2, the `workflows` feature), for every
 * engine's adapter: an intent that comes `after` others waits for them, is cancelled or
 * escalated with them, and takes parameter values from their results, resolved once and
 * recorded before its job starts, so that every run of the job, after any crash, uses the same
 * values.
 *
 * Pure functions over intent views and table rows; the adapter (`Adapter` in
 * `twice-kit/engines`) keeps the state. Mirrors the Python kit's `twice.engines.steps`.
 *
 * @module
 */

import { isObject, type JsonObject, MALFORMED, ProtocolError, repr } from "../protocol.js";
import { pyStr, truthy } from "./values.js";

/** The `init_ok` feature that announces steps. */
export const FEATURE = "workflows";

/**
 * The result fields each action has, and where a claim keeps each (the first evidence field
 * present wins): vocabulary/src/action.rs `result_fields`.
 */
export const RESULT_FIELDS: Readonly<Record<string, Readonly<Record<string, readonly string[]>>>> = {
  "payments.refund": { id: ["external_id"] },
  "workspaces.create": { id: ["external_id"] },
  "files.put": { etag: ["external_id"] },
  "chain.transfer": { tx_hash: ["tx_hash", "external_id"] },
  "messages.send": { id: ["external_id"] },
};

/** The parameters that may take a reference: text, never the business key. */
export const TAKES_REFERENCE: Readonly<Record<string, readonly string[]>> = {
  "workspaces.create": ["name"],
  "files.put": ["body"],
  "messages.send": ["subject", "body"],
};

export const FORMAT_CHARS_MAX = 1000;

/** A reference to a result: `{from, field, format?}`. */
export interface Reference {
  from: string;
  field: string;
  format?: string;
}

/** What a blocked intent may do now: run (`recorded`, with what it resolved), or end. */
export type Release = [state: string, evidence: JsonObject];

/** An intent as the steps read it: its view's state, action and evidence. */
export interface StepView {
  state: string;
  action: string;
  evidence: JsonObject;
}

/** Whether a parameter's value is a reference (any object is taken for one, then checked). */
export function isReference(value: unknown): value is Reference {
  return isObject(value);
}

/**
 * The intent's `after` list, checked with its references (`recorded`: id -> action of every
 * intent this executor recorded); throws ProtocolError 12 naming the problem.
 */
export function check(
  intentId: string,
  action: string,
  params: JsonObject,
  after: unknown,
  recorded: ReadonlyMap<string, string>,
): string[] {
  const list = after ?? [];
  if (!Array.isArray(list) || !list.every((a) => typeof a === "string" && a !== "")) {
    throw new ProtocolError(MALFORMED, "intent.after must be a list of intent ids");
  }
  if (new Set(list).size !== list.length) {
    throw new ProtocolError(MALFORMED, `intent.after lists an id twice: ${pyList(list)}`);
  }
  for (const before of list) {
    if (!recorded.has(before)) {
      throw new ProtocolError(
        MALFORMED,
        `intent ${intentId} comes after ${before}, which this executor has never recorded`,
      );
    }
  }
  for (const [name, value] of Object.entries(params)) {
    if (isObject(value)) checkReference(action, name, value, list, recorded);
  }
  return list as string[];
}

/** A list of ids as Python prints one, for a message that reads the same from either kit. */
function pyList(items: readonly string[]): string {
  return `[${items.map(repr).join(", ")}]`;
}

function checkReference(
  action: string,
  name: string,
  ref: JsonObject,
  after: readonly string[],
  recorded: ReadonlyMap<string, string>,
): void {
  const where = `params.${name}`;
  const unknown = Object.keys(ref)
    .filter((k) => !["from", "field", "format"].includes(k))
    .sort();
  if (unknown.length > 0) {
    throw new ProtocolError(MALFORMED, `${where}: unknown key ${repr(unknown[0])} in a reference`);
  }
  const { from: source, field, format } = ref;
  if (typeof source !== "string" || typeof field !== "string") {
    throw new ProtocolError(MALFORMED, `${where}: a reference needs a string \`from\` and \`field\``);
  }
  if (format !== undefined && format !== null && !isFormat(format)) {
    throw new ProtocolError(
      MALFORMED,
      `${where}: \`format\` must hold {} exactly once (at most ${FORMAT_CHARS_MAX} characters)`,
    );
  }
  if (!after.includes(source)) {
    throw new ProtocolError(MALFORMED, `${where}: the reference reads ${source}, which is not in \`after\``);
  }
  if (!(TAKES_REFERENCE[action] ?? []).includes(name)) {
    throw new ProtocolError(MALFORMED, `${where}: ${action}'s parameter ${repr(name)} cannot take a reference`);
  }
  const sourceAction = recorded.get(source) ?? "";
  if (!Object.hasOwn(RESULT_FIELDS[sourceAction] ?? {}, field)) {
    throw new ProtocolError(MALFORMED, `${where}: ${sourceAction} (${source}) has no result field ${repr(field)}`);
  }
}

/** A `format`: text with `{}` exactly once, at most `FORMAT_CHARS_MAX` characters. */
function isFormat(format: unknown): boolean {
  return (
    typeof format === "string" && format.split("{}").length === 2 && [...format].length <= FORMAT_CHARS_MAX
  );
}

/**
 * What a step may do now: `["recorded", {resolved: {...}}]` to run with its references
 * resolved, `["failed", ...]` cancelled, `["escalated", ...]`, or undefined (still blocked).
 */
export function released(
  intentId: string,
  after: readonly string[],
  params: JsonObject,
  views: ReadonlyMap<string, StepView>,
): Release | undefined {
  for (const before of after) {
    const state = views.get(before)?.state;
    if (state === "failed") {
      return ["failed", { reason: `cancelled: the intent it comes after (${before}) failed` }];
    }
    if (state === "escalated") {
      return [
        "escalated",
        { reason: `waits for ${before}, which is escalated`, could_duplicate: false, key: intentId },
      ];
    }
  }
  if (after.some((before) => views.get(before)?.state !== "confirmed")) return undefined;
  return resolve(intentId, params, views);
}

/** Every reference of `params` resolved from the claims of the intents it reads. */
function resolve(intentId: string, params: JsonObject, views: ReadonlyMap<string, StepView>): Release {
  const resolved: JsonObject = {};
  for (const [name, ref] of Object.entries(params)) {
    if (!isReference(ref)) continue;
    const source = views.get(ref.from) as StepView;
    const where = RESULT_FIELDS[source.action]?.[ref.field] ?? [];
    const found = where.find((k) => truthy(source.evidence?.[k]));
    if (found === undefined) {
      // Never guessed at: a person looks at why the claim has no such value.
      return [
        "escalated",
        { reason: `${ref.from} is confirmed but recorded no ${ref.field}`, could_duplicate: false, key: intentId },
      ];
    }
    const value = source.evidence[found];
    // A function, so that `$&` and the like in the value are never read as patterns.
    resolved[name] = truthy(ref.format) ? (ref.format as string).replace("{}", () => pyStr(value)) : value;
  }
  return ["recorded", Object.keys(resolved).length > 0 ? { resolved } : {}];
}

/**
 * The params a row's job runs with: the authorised ones, references replaced by the values
 * resolved (and recorded) when the step was released.
 */
export function jobParams(row: { params: JsonObject; evidence?: JsonObject }): JsonObject {
  const resolved = row.evidence?.resolved;
  return { ...row.params, ...(isObject(resolved) ? resolved : {}) };
}
