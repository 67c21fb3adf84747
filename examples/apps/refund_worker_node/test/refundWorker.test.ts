/**
 * The refund worker under twice: each scenario's intents carried out by the worker on
 * stripe-node against serve's payments fake, and the worker's own record claimed and judged.
 *
 * The careful worker passes every scenario. The naive one (a new key per attempt, no lookup)
 * is shown failing where a reply is lost, with the invariant twice names.
 */

import { fileURLToPath } from "node:url";

import { type Claim, type Scenario, type Twice, TwiceViolation, describe, expect, test } from "twice-kit/vitest";

import { ATTEMPTS_MAX, type Mode, RefundRecord, RefundWorker, stripeFor } from "../src/refundWorker.js";

/** The example's own scenario file: a partial refund's reply lost, so a naive retry refunds again. */
const OWN_SCENARIO = fileURLToPath(new URL("../lost_partial_refund_reply.toml", import.meta.url));

/** The happy path, as TOML text: one refund, no fault. */
const HAPPY_PATH = `
name = "refund_happy_path"
description = "One refund, nothing goes wrong."

[payment_intents]
pi_1001 = 2500

[[intents]]
id = "refund-1001"
action = "payments.refund"
params = { payment_intent = "pi_1001", amount = 2500 }

[expect]
refund-1001 = "confirmed"
`;

/** The application under test: a record and a worker on stripe-node, pointed at the fake. */
class RefundApp {
  readonly record = new RefundRecord();

  constructor(
    private readonly twice: Twice,
    private readonly scenario: Scenario,
    private readonly mode: Mode,
  ) {}

  /** Records each of the scenario's intents as a job, and runs the worker over them. */
  async run(): Promise<void> {
    for (const intent of this.scenario.intents) {
      expect(intent.action, `${this.scenario.name}: ${intent.id}`).toBe("payments.refund");
      this.record.enqueue(intent.id, String(intent.params.payment_intent), Number(intent.params.amount));
    }
    // The scenario's timeout, so that a reply held past it is a timeout to the worker too.
    const stripe = stripeFor(this.twice.url("payments"), { timeoutMs: this.scenario.requestTimeoutMs });
    await new RefundWorker(this.record, stripe, this.mode).run();
  }

  /** What the record says of each intent, as claims: the job id is the intent id. */
  claims(): Claim[] {
    return this.record.jobs().map((job) => ({
      id: job.jobId,
      action: this.scenario.intent(job.jobId).action,
      state: job.state,
      attempts: job.attempts,
      params: { payment_intent: job.paymentIntent, amount: job.amount },
      evidence: {
        key: job.idempotencyKey,
        ...(job.refundId === undefined ? {} : { external_id: job.refundId }),
        ...(job.lastError === undefined ? {} : { last_error: job.lastError }),
      },
    }));
  }
}

/** Loads `scenario`, runs the worker in `mode` over its intents, and checks its claims. */
async function runScenario(twice: Twice, scenario: string, mode: Mode) {
  const loaded = await twice.loadScenario(scenario);
  const app = new RefundApp(twice, loaded, mode);
  await app.run();
  const claims = app.claims();
  return { scenario: loaded, claims, verdict: await twice.check(claims, { raiseOnViolation: false }) };
}

describe("the careful worker", () => {
  // (what the test is called, the scenario: TOML text, a catalog name or a file)
  const cases: [string, string][] = [
    ["the happy path: no fault at all (TOML text)", HAPPY_PATH],
    ["lost_refund_reply: the whole refund committed, its reply lost", "lost_refund_reply"],
    ["lost_partial_refund_reply.toml: a partial refund committed, its reply lost", OWN_SCENARIO],
    ["key_regenerated_per_attempt: committed, answered 500", "key_regenerated_per_attempt"],
    ["timeout_taken_as_no: committed, the reply held past the client's timeout", "timeout_taken_as_no"],
  ];

  test.for(cases)("passes %s", async ([, scenarioRef], { twice }) => {
    const { scenario, claims } = await runScenario(twice, scenarioRef, "careful");
    // Throws TwiceViolation, with the verdict's summary, if an invariant was violated.
    const verdict = await twice.check(claims);
    expect(verdict.exitCode).toBe(0);
    // As the scenario expects, having refunded once.
    for (const claim of claims) expect(scenario.accepts(claim.id, claim.state), claim.id).toBe(true);
    const refunds = (await twice.ledger("payments")).filter((e) => e.kind === "refund.created");
    expect(refunds).toHaveLength(scenario.intents.length);
  });

  test("on a lost reply, looks the refund up before sending again, and finds its own", async ({ twice }) => {
    const { claims, verdict } = await runScenario(twice, "lost_refund_reply", "careful");
    expect(verdict.held).toBe(true);
    const [claim] = claims;
    // One send: the lookup found the refund, so there was nothing to send again.
    expect(claim).toMatchObject({ state: "confirmed", attempts: 1 });
    expect(claim?.evidence?.last_error).toMatch(/StripeConnectionError/);
    const requests = (await twice.journal("payments")).map((e) => `${e.method} ${e.path} ${e.outcome}`);
    expect(requests).toEqual(["POST /v1/refunds closed", "GET /v1/refunds answered"]);
  });

  test("when no send is answered and no lookup either, says unknown rather than guess", async ({ twice }) => {
    const scenario = await twice.loadScenario(HAPPY_PATH);
    // Every refund's connection reset before it is read, every list of refunds refused.
    await twice.addRule("payments", [
      { method: "POST", path: "/v1/refunds", fault: "refuse" },
      { method: "GET", path: "/v1/refunds", fault: { kind: "reject", status: 503 } },
    ]);
    const app = new RefundApp(twice, scenario, "careful");
    await app.run();
    const [claim] = app.claims();
    expect(claim).toMatchObject({ state: "unknown", attempts: ATTEMPTS_MAX });
    expect(claim?.evidence?.last_error).toMatch(/^listing refunds: /);
    // Honest, and stuck: twice holds it to no outcome it did not see, and says it is not done.
    const verdict = await twice.check(app.claims(), { raiseOnViolation: false });
    expect(verdict.line("honest-terminal-states").status).toBe("held");
    expect(verdict.line("no-duplicate-effect").status).toBe("held");
    expect([...verdict.violated].sort()).toEqual(["expected-states", "liveness"]);
  });
});

describe("the naive worker (a new key per attempt, no lookup)", () => {
  // (what the test is called, the invariant the naive worker breaks there, the scenario)
  const cases: [string, string, string][] = [
    // The whole 5000 refunded, the reply lost: the retry under a new key is refused
    // (charge_already_refunded), so the worker records "failed" while the ledger has its refund.
    ["lost_refund_reply", "honest-terminal-states", "lost_refund_reply"],
    // 3000 of 10000: the retry under a new key refunds again.
    ["lost_partial_refund_reply.toml", "no-duplicate-effect", OWN_SCENARIO],
    ["key_regenerated_per_attempt", "no-duplicate-effect", "key_regenerated_per_attempt"],
  ];

  test.for(cases)("is caught in %s, breaking %s", async ([, invariant, scenarioRef], { twice }) => {
    const { claims, verdict } = await runScenario(twice, scenarioRef, "naive");
    expect(verdict.violated).toContain(invariant);
    // What a test that calls check() as usual sees: the verdict's summary, as an error.
    const error = await twice.check(claims).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TwiceViolation);
    expect((error as TwiceViolation).message).toContain(`${invariant}:`);
  });
});

test("stripe-node resends a closed connection once, even with maxNetworkRetries: 0", async ({ twice }) => {
  // Why the worker wraps the SDK's HTTP client (noResendOnClose): left alone, the SDK sends the
  // lost refund again by itself, under the same key. Here the key is honoured, so the resend is
  // a replay; where keys are ignored or expired it would be a second refund, and either way
  // the worker would believe it sent once.
  const scenario = await twice.loadScenario("lost_refund_reply");
  const stripe = stripeFor(twice.url("payments"), { timeoutMs: scenario.requestTimeoutMs, sdkResendsOnClose: true });
  const intent = scenario.intent("refund-4812");
  const refund = await stripe.refunds.create(
    { payment_intent: String(intent.params.payment_intent), amount: Number(intent.params.amount) },
    { idempotencyKey: "one-call" },
  );
  expect(refund.object).toBe("refund");
  const posts = (await twice.journal("payments")).filter((e) => e.method === "POST");
  expect(posts.map((e) => [e.outcome, e.replayed, e.idempotency_key])).toEqual([
    ["closed", false, "one-call"],
    ["answered", true, "one-call"],
  ]);
});
