/**
 * What the kit's tests share: a refund request as Stripe's SDKs send it (plain `fetch`, so the
 * tests need no SDK), a scenario's TOML text, and shell scripts standing in for binaries.
 */

import { chmod, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";

import type { Effect } from "../src/index.js";

/** The bound on every request these tests make to a fake. */
export const HTTP_TIMEOUT_MS = 10_000;

/** A scenario of the tests' own: a refund commits and its reply is lost. */
export const LOST_REPLY_TOML = `
name = "kit_lost_reply"
description = "A refund commits and its reply is lost."

[payment_intents]
pi_77 = 9000

[[intents]]
id = "refund-77"
action = "payments.refund"
params = { payment_intent = "pi_77", amount = 700 }

[[faults]]
service = "payments"
method = "POST"
path = "/v1/refunds"
nth = 1
fault = "drop_after_commit"
`;

/**
 * The first refund commits 3 s after it arrived, inside the 4 s settle bound; its caller has
 * given up after 0.3 s. (A long delay leaves a check asked "at once" seconds of room.)
 */
export const LATE_COMMIT_TOML = `
name = "kit_late_commit"
description = "The first refund commits 3 s after it arrived; its caller gave up long before."

[limits]
request_timeout_ms = 300

[services.payments]
settle_ms_max = 4000

[payment_intents]
pi_78 = 9000

[[intents]]
id = "refund-78"
action = "payments.refund"
params = { payment_intent = "pi_78", amount = 700 }

[[faults]]
service = "payments"
method = "POST"
path = "/v1/refunds"
nth = 1
fault = { kind = "commit_after_timeout", delay_ms = 3000 }

[expect]
refund-78 = "confirmed"
`;

/** The email API answers at once; the message lands 2.5 s later, inside the 4 s settle bound. */
export const LATE_DELIVERY_TOML = `
name = "kit_late_delivery"
description = "The welcome email is accepted at once and delivered 2.5 s later."

[services.messages]
settle_ms_max = 4000

[[intents]]
id = "welcome-ada"
action = "messages.send"
params = { to = "ada@example.com", subject = "Welcome", body = "Your workspace is ready." }

[[faults]]
service = "messages"
method = "POST"
path = "/emails"
nth = 1
fault = { kind = "deliver_late", delay_ms = 2500 }

[expect]
welcome-ada = "confirmed"
`;

/** `POST /emails` as Resend's SDKs send it: the status and body. */
export async function sendEmail(
  base: string,
  params: { to: string; subject: string; body: string },
): Promise<{ status: number; body: Record<string, unknown> }> {
  const response = await fetch(`${base}/emails`, {
    method: "POST",
    headers: { Authorization: "Bearer re_test_kit", "Content-Type": "application/json" },
    body: JSON.stringify({
      from: "Acme <hello@acme.example>",
      to: [params.to],
      subject: params.subject,
      text: params.body,
    }),
    signal: AbortSignal.timeout(HTTP_TIMEOUT_MS),
  });
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
}

/** What a refund request came to: the status and body, or no reply and the error. */
export type Reply = { status: number; body: Record<string, unknown> } | { status: null; error: unknown };

/** `POST /v1/refunds` as Stripe's SDKs send it; no reply (a lost one) is `status: null`. */
export async function refund(
  base: string,
  paymentIntent: string,
  amount: number,
  key?: string,
  timeoutMs: number = HTTP_TIMEOUT_MS,
): Promise<Reply> {
  const headers: Record<string, string> = {
    Authorization: "Bearer sk_test_kit",
    "Content-Type": "application/x-www-form-urlencoded",
  };
  if (key !== undefined) headers["Idempotency-Key"] = key;
  try {
    const response = await fetch(`${base}/v1/refunds`, {
      method: "POST",
      headers,
      body: new URLSearchParams({ payment_intent: paymentIntent, amount: String(amount) }),
      signal: AbortSignal.timeout(timeoutMs),
    });
    return { status: response.status, body: (await response.json()) as Record<string, unknown> };
  } catch (error) {
    return { status: null, error };
  }
}

/** The refunds of a ledger. */
export function refundsIn(ledger: Effect[]): Effect[] {
  return ledger.filter((e) => e.kind === "refund.created");
}

/** A temporary directory, removed by the returned function. */
export async function tempDir(prefix = "twice-kit-test-"): Promise<{ path: string; remove: () => Promise<void> }> {
  const path = await mkdtemp(join(tmpdir(), prefix));
  return { path, remove: () => rm(path, { recursive: true, force: true }) };
}

/** An executable shell script at `path` (its directory made), standing in for a binary. */
export async function script(path: string, body: string): Promise<string> {
  await mkdir(dirname(path), { recursive: true });
  await writeFile(path, `#!/bin/sh\n${body}`);
  await chmod(path, 0o755);
  return path;
}

/** Whether a process with this id is alive. */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
