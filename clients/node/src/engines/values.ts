/**
 * How the adapters read and write JSON values. The same mapping file and the same state may be
 * driven by the Python kit's adapter, so a value becomes text, is compared, and counts as
 * "there" exactly as it does there.
 *
 * @module
 */

import { isObject } from "../protocol.js";

/** `value` as Python's `str()` writes it: `True`, `False`, `None`, numbers and text as such. */
export function pyStr(value: unknown): string {
  if (value === null || value === undefined) return "None";
  if (typeof value === "boolean") return value ? "True" : "False";
  if (typeof value === "string") return value;
  if (typeof value === "number" || typeof value === "bigint") return String(value);
  // Python would write its own repr of a list or a dict; JSON is as readable, and no
  // mapping in the examples puts one into a string.
  return JSON.stringify(value);
}

/** Whether Python would take `value` as true: empty text, 0, an empty list or object are not. */
export function truthy(value: unknown): boolean {
  if (Array.isArray(value)) return value.length > 0;
  if (isObject(value)) return Object.keys(value).length > 0;
  return Boolean(value);
}

/** Whether `value` is "nothing to show" in evidence: absent, null, empty text or `{}`. */
export function isBlank(value: unknown): boolean {
  return value === undefined || value === null || value === "" || (isObject(value) && Object.keys(value).length === 0);
}

/** `value` in canonical form: every object's keys sorted, no spaces (how params compare). */
export function canonical(value: unknown): string {
  return JSON.stringify(sortKeys(value));
}

function sortKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (!isObject(value)) return value;
  const out: Record<string, unknown> = {};
  for (const key of Object.keys(value).sort()) out[key] = sortKeys(value[key]);
  return out;
}

/** `error` in a few words, for a reply's text or a log line. */
export function describe(error: unknown): string {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}

/** Resolves after `ms`. */
export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
