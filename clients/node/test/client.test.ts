/**
 * The client against a real `twice serve` ($TWICE_BIN, else `twice` on the PATH): every
 * helper over loopback HTTP, with one serve for the file (the `twiceSession` fixture), and the
 * client's own errors (an unreachable serve, one that never answers, a URLs file it cannot use).
 */

import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, test } from "../src/vitest.js";
import {
  Twice,
  TwiceError,
  TwiceHTTPError,
  TwiceTimeout,
  TwiceUnsettled,
  TwiceViolation,
  type Claim,
} from "../src/index.js";
import {
  LATE_COMMIT_TOML,
  LATE_DELIVERY_TOML,
  LOST_REPLY_TOML,
  refund,
  refundsIn,
  sendEmail,
  tempDir,
} from "./helpers.js";

describe("a scenario", () => {
  test("from the catalog is described with its intents, contracts, limits and steps", async ({ twiceSession }) => {
    const scenario = await twiceSession.loadScenario("crash_while_refund_in_flight");
    expect(scenario.name).toBe("crash_while_refund_in_flight");
    expect(scenario.intents.map((i) => [i.id, i.action, i.params])).toEqual([
      ["refund-2207", "payments.refund", { payment_intent: "pi_2207", amount: 800 }],
    ]);
    expect(scenario.expect).toEqual({ "refund-2207": "confirmed" });
    expect(scenario.contracts.payments?.key_retention_ms).toBe(2000);
    expect(scenario.requestTimeoutS).toBe((scenario.limits.request_timeout_ms as number) / 1000);
    expect(scenario.requestTimeoutMs).toBe(scenario.limits.request_timeout_ms);
    expect(scenario.steps).toHaveLength(1);
    const [step] = scenario.steps;
    expect([step?.index, step?.do, step?.by, step?.worker, step?.progress]).toEqual([0, "crash", "test", "w1", "pending"]);
    expect(step?.serveSeesThePoint).toBe(true);
    expect(step?.how).toContain("SIGKILL");
    expect(scenario.intent("refund-2207").action).toBe("payments.refund");
    expect(() => scenario.intent("refund-1")).toThrow(/no intent "refund-1" in crash_while_refund_in_flight/);
    // The same description comes back from GET.
    expect((await twiceSession.scenario()).intents).toEqual(scenario.intents);
  });

  test("that accepts several honest states lists them", async ({ twiceSession }) => {
    const scenario = await twiceSession.loadScenario("refund_permission_denied");
    expect(scenario.expect).toEqual({ "refund-3107": ["escalated", "failed"] });
    expect(scenario.accepts("refund-3107", "failed")).toBe(true);
    expect(scenario.accepts("refund-3107", "escalated")).toBe(true);
    expect(scenario.accepts("refund-3107", "confirmed")).toBe(false);
    expect(scenario.accepts("no-such-intent", "confirmed")).toBe(true);
  });

  test("loads from TOML text, from a path and from a file URL", async ({ twiceSession }) => {
    expect((await twiceSession.loadScenario(LOST_REPLY_TOML)).name).toBe("kit_lost_reply");
    const dir = await tempDir();
    try {
      const path = join(dir.path, "kit_lost_reply.toml");
      await writeFile(path, LOST_REPLY_TOML.replace("kit_lost_reply", "kit_from_file"));
      expect((await twiceSession.loadScenario(path)).name).toBe("kit_from_file");
      expect((await twiceSession.loadScenario(pathToFileURL(path))).name).toBe("kit_from_file");
      // A client of a serve started elsewhere posts the file's text, with its path as origin.
      const elsewhere = new Twice(twiceSession.urls);
      expect(elsewhere.serve).toBeUndefined();
      expect((await elsewhere.loadScenario(path)).name).toBe("kit_from_file");
      await expect(twiceSession.loadScenario(join(dir.path, "missing.toml"))).rejects.toThrow(/no scenario file/);
      await expect(elsewhere.loadScenario(join(dir.path, "missing.toml"))).rejects.toThrow(
        /cannot read the scenario file/,
      );
    } finally {
      await dir.remove();
    }
  });

  test("refused by serve carries serve's own words", async ({ twiceSession }) => {
    const unknown = await twiceSession.loadScenario("lost_refund_replay").catch((e: unknown) => e);
    expect(unknown).toBeInstanceOf(TwiceHTTPError);
    expect((unknown as TwiceHTTPError).status).toBe(400);
    expect((unknown as TwiceHTTPError).serveMessage).toContain('did you mean "lost_refund_reply"');
    expect((unknown as TwiceHTTPError).message).toMatch(/^POST http:\/\/127\.0\.0\.1:\d+\/__twice\/scenario answered 400: /);
    const bad = await twiceSession.loadScenario('name = "x"\nno_such_key = 1\n').catch((e: unknown) => e);
    expect(bad).toBeInstanceOf(TwiceHTTPError);
    expect((bad as TwiceHTTPError).status).toBe(400);
    await twiceSession.reset();
    const none = await twiceSession.scenario().catch((e: unknown) => e);
    expect(none).toBeInstanceOf(TwiceHTTPError);
    expect((none as TwiceHTTPError).status).toBe(409);
    expect((none as TwiceHTTPError).serveMessage).toContain("no scenario is set up");
    expect(() => twiceSession.url("ledgers")).toThrow(TwiceError);
    expect(() => twiceSession.url("ledgers")).toThrow(
      'no service "ledgers" (serve has: chain, files, messages, payments, workspaces)',
    );
  });
});

describe("a fake's control API", () => {
  test("rules, seeds, ledger and journal show a lost reply and its replay", async ({ twiceSession: twice }) => {
    await twice.reset();
    await twice.seed("payments", { payment_intents: [{ id: "pi_9", amount: 5000 }] });
    const ids = await twice.addRule("payments", {
      id: "lost",
      method: "POST",
      path: "/v1/refunds",
      nth: 1,
      fault: "drop_after_commit",
    });
    expect(ids).toEqual(["lost"]);
    const payments = twice.url("payments");

    expect((await refund(payments, "pi_9", 1000, "key-9")).status).toBeNull();
    const replay = await refund(payments, "pi_9", 1000, "key-9");
    expect(replay.status).toBe(200);
    const body = replay.status === null ? {} : replay.body;
    expect(body.object).toBe("refund");

    // One refund: the retry under the same key got the saved one back.
    const refunds = refundsIn(await twice.ledger("payments"));
    expect(refunds.map((e) => [e.object_id, e.idempotency_key])).toEqual([[body.id, "key-9"]]);
    const journal = (await twice.journal("payments")).filter((e) => e.path === "/v1/refunds");
    expect(journal.map((e) => [e.outcome, e.replayed])).toEqual([
      ["closed", false],
      ["answered", true],
    ]);
    const armed = await twice.rules("payments");
    expect(armed.map((r) => [r.id, r.fired])).toEqual([["lost", 1]]);
    await twice.clearRules("payments", "lost");
    expect(await twice.rules("payments")).toEqual([]);
    await twice.addRule("payments", [
      { method: "POST", path: "/v1/refunds", fault: "refuse" },
      { method: "GET", path: "/v1/refunds", fault: { kind: "reject", status: 429 } },
    ]);
    expect(await twice.rules("payments")).toHaveLength(2);
    await twice.clearRules("payments");
    expect(await twice.rules("payments")).toEqual([]);
    const refused = await twice.addRule("payments", { fault: "no_such_fault" }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(TwiceHTTPError);
    expect((refused as TwiceHTTPError).serveMessage).toContain("no_such_fault");
    expect((await twice.contract("payments")).idempotency_keys).toBe("honored");
  });

  test("a clock jump expires keys, so the same key refunds again", async ({ twiceSession: twice }) => {
    await twice.reset();
    await twice.seed("payments", { payment_intents: [{ id: "pi_8", amount: 5000 }] });
    const before = (await twice.clock("payments")).now_ms;
    expect((await refund(twice.url("payments"), "pi_8", 100, "key-8")).status).toBe(200);
    // Past the default contract's 24 h of key retention.
    const after = await twice.jumpClock("payments", 25 * 3600 * 1000);
    expect(after.now_ms).toBeGreaterThanOrEqual(before + 25 * 3600 * 1000);
    expect((await refund(twice.url("payments"), "pi_8", 100, "key-8")).status).toBe(200);
    expect(refundsIn(await twice.ledger("payments"))).toHaveLength(2);
    await expect(twice.jumpClock("payments", -1)).rejects.toThrow(/negative/);
  });
});

describe("webhooks", () => {
  test("a webhook scenario waits for a listener, and waitWebhooks is bounded", async ({ twice }) => {
    const scenario = await twice.loadScenario("fault_duplicate_webhook");
    const [intent] = scenario.intents;
    expect(intent?.onEvent).toEqual({ type: "payment_intent.succeeded", paymentIntent: "pi_order_1", forged: false });

    // Nobody listens: nothing is owed yet, and the verdict says what the payment waits for.
    const report = await twice.waitWebhooks(1);
    expect(report.awaiting_payments).toEqual([{ payment_intent: "pi_order_1", forged: false, due_ms: null }]);
    const verdict = await twice.check([], { raiseOnViolation: false });
    expect(verdict.pending.map((p) => p.what)).toEqual(["awaiting-listener"]);
    expect(verdict.violated).toContain("expected-states");

    // An endpoint on a port nobody listens at: the event is owed, and the wait gives up in time.
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, "127.0.0.1", resolve));
    const port = (closed.address() as AddressInfo).port;
    await new Promise<void>((resolve) => closed.close(() => resolve()));
    const answer = await fetch(`${twice.url("payments")}/v1/webhook_endpoints`, {
      method: "POST",
      headers: { Authorization: "Bearer sk_test_kit", "Content-Type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({ url: `http://127.0.0.1:${port}/hooks`, "enabled_events[0]": "payment_intent.succeeded" }),
    });
    expect(((await answer.json()) as { secret: string }).secret).toMatch(/^whsec_/);
    await expect(twice.waitWebhooks(0.5)).rejects.toThrow(TwiceTimeout);
  });
});

describe("steps", () => {
  test("a step is reached, its request held, and let go", async ({ twiceSession: twice }) => {
    const scenario = await twice.loadScenario("crash_while_refund_in_flight");
    const intent = scenario.intent("refund-2207");
    let settled = false;
    const sent = refund(
      twice.url("payments"),
      intent.params.payment_intent as string,
      intent.params.amount as number,
      "key-2207",
    ).finally(() => {
      settled = true;
    });
    let done;
    try {
      const step = await twice.waitStep(0, 10);
      expect(step.progress).toBe("reached");
      expect(step.request).toBe("POST /v1/refunds at payments");
      expect(step.reachedAtMs).toBeTypeOf("number");
      // Held: no answer while the step is not done (an absence, so it can only be watched
      // for a while).
      expect(settled).toBe(false);
      expect(await Promise.race([sent.then(() => "answered"), sleep(200, "held")])).toBe("held");
    } finally {
      done = await twice.stepDone(0);
    }
    expect(done.progress).toBe("done");
    expect((await sent).status).toBe(200);
    expect((await twice.steps()).map((s) => s.progress)).toEqual(["done"]);
  });

  test("waiting for a step that is never reached is bounded", async ({ twiceSession: twice }) => {
    await twice.loadScenario("crash_while_refund_in_flight");
    const started = performance.now();
    const late = await twice.waitStep(0, 0.3).catch((e: unknown) => e);
    expect(late).toBeInstanceOf(TwiceTimeout);
    expect((late as Error).message).toMatch(/^step 0 \(crash\) still pending after 0.3 s: its point .* The step says: /);
    expect(performance.now() - started).toBeLessThan(5000);
    const missing = await twice.waitStep(3, 0.1).catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(TwiceHTTPError);
    expect((missing as Error).message).toContain("no step 3");
  });
});

describe("check", () => {
  test("returns the verdict when every invariant held", async ({ twiceSession: twice }) => {
    const scenario = await twice.loadScenario(LOST_REPLY_TOML);
    const intent = scenario.intent("refund-77");
    expect((await refund(twice.url("payments"), "pi_77", 700, "k77")).status).toBeNull();
    expect((await refund(twice.url("payments"), "pi_77", 700, "k77")).status).toBe(200);
    const verdict = await twice.check([
      { id: intent.id, action: intent.action, state: "confirmed", attempts: 2, evidence: { key: "k77" } },
    ]);
    expect([verdict.held, verdict.exitCode, verdict.violated]).toEqual([true, 0, []]);
    expect(verdict.line("no-duplicate-effect").status).toBe("held");
    expect(() => verdict.line("no-such-invariant")).toThrow(/no verdict on "no-such-invariant" \(there are: /);
    expect(verdict.results.driver).toBe("serve");
  });

  test("throws the verdict's summary when an invariant is violated", async ({ twiceSession: twice }) => {
    await twice.loadScenario(LOST_REPLY_TOML);
    // No key: the retry is a second refund.
    expect((await refund(twice.url("payments"), "pi_77", 700)).status).toBeNull();
    expect((await refund(twice.url("payments"), "pi_77", 700)).status).toBe(200);
    const claim: Claim = { id: "refund-77", action: "payments.refund", state: "confirmed", attempts: 2 };
    const caught = await twice.check([claim]).catch((e: unknown) => e);
    expect(caught).toBeInstanceOf(TwiceViolation);
    expect(caught).toBeInstanceOf(Error);
    expect(caught).not.toBeInstanceOf(TwiceError);
    const verdict = (caught as TwiceViolation).verdict;
    expect((caught as Error).message).toBe(verdict.summary);
    expect(verdict.violated).toContain("no-duplicate-effect");
    const [first, second] = refundsIn(await twice.ledger("payments"));
    expect(verdict.summary).toContain("no-duplicate-effect: intent refund-77 has 2 effects");
    expect(verdict.summary).toContain(first?.object_id);
    expect(verdict.summary).toContain(second?.object_id);
    // Asked not to throw, check hands the same verdict back.
    const again = await twice.check([claim], { raiseOnViolation: false });
    expect([again.exitCode, again.held, again.violated]).toEqual([1, false, verdict.violated]);
  });

  test("waits for a late commit, so a retry under a new key is a duplicate", async ({ twice }) => {
    await twice.loadScenario(LATE_COMMIT_TOML);
    // A naive app: the first refund times out (it commits later), the retry has a new key.
    expect((await refund(twice.url("payments"), "pi_78", 700, "k78-1", 300)).status).toBeNull();
    expect((await refund(twice.url("payments"), "pi_78", 700, "k78-2")).status).toBe(200);
    const claim: Claim = { id: "refund-78", action: "payments.refund", state: "confirmed", attempts: 2 };

    // Asked at once, the check sees one refund and says the world had not settled: nothing
    // violated yet is no pass (the late refund may still land), so it throws TwiceUnsettled.
    const early = await twice.check([claim], { wait: false }).catch((e: unknown) => e);
    expect(early).toBeInstanceOf(TwiceUnsettled);
    const atOnce = (early as TwiceUnsettled).verdict;
    expect((early as TwiceUnsettled).message).toBe(atOnce.summary);
    expect([atOnce.held, atOnce.settled, atOnce.exitCode]).toEqual([true, false, 3]);
    const late = atOnce.pending.filter((p) => p.what === "late-commit");
    expect(late.map((p) => [p.service, p.request])).toEqual([["payments", "POST /v1/refunds"]]);
    expect(atOnce.summary).toContain("judged before the world settled (asked not to wait)");
    expect(late[0]?.due_ms ?? 0).toBeGreaterThan(atOnce.ledgersReadAtMs ?? Infinity);

    // By default it waits for the late commit, and the retry is a second refund.
    const caught = await twice.check([claim]).catch((e: unknown) => e);
    expect(caught).toBeInstanceOf(TwiceViolation);
    const verdict = (caught as TwiceViolation).verdict;
    expect(verdict.violated).toContain("no-duplicate-effect");
    expect(verdict.settled).toBe(true);
    expect(refundsIn(await twice.ledger("payments"))).toHaveLength(2);
  });

  test("waits for a late delivery, so a confirmed email passes", async ({ twice }) => {
    const scenario = await twice.loadScenario(LATE_DELIVERY_TOML);
    const intent = scenario.intent("welcome-ada");
    // The app sends once and claims confirmed on the API's 200, before the inbox has it.
    const sent = await sendEmail(twice.url("messages"), intent.params as { to: string; subject: string; body: string });
    expect(sent.status).toBe(200);
    const claim: Claim = { id: intent.id, action: intent.action, state: "confirmed", attempts: 1 };

    const atOnce = await twice.check([claim], { wait: false, raiseOnViolation: false });
    expect(atOnce.settled).toBe(false);
    expect(atOnce.pending.map((p) => p.what)).toEqual(["delivery"]);
    expect(atOnce.violated).toContain("honest-terminal-states");
    expect(atOnce.summary).toContain("judged before the world settled");

    const verdict = await twice.check([claim]);
    expect([verdict.held, verdict.settled]).toEqual([true, true]);
  });

  test("a malformed claim is refused with the field, never judged", async ({ twiceSession: twice }) => {
    await twice.loadScenario(LOST_REPLY_TOML);
    const claim = { id: "refund-77", action: "payments.refund", state: "done" } as unknown as Claim;
    const refused = await twice.check([claim]).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(TwiceHTTPError);
    expect((refused as Error).message).toContain('claims[0].state: "done" is not a state');
  });
});

describe("the client's own errors", () => {
  test("a serve that is not there is named, with the URL asked", async () => {
    // A port nobody listens on: one that was just listened on and closed.
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as AddressInfo;
    await new Promise((resolve) => server.close(resolve));
    const twice = new Twice({ control: `http://127.0.0.1:${port}/` });
    expect(twice.control).toBe(`http://127.0.0.1:${port}`);
    const error = await twice.health().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TwiceError);
    expect((error as Error).message).toMatch(
      new RegExp(`^GET http://127\\.0\\.0\\.1:${port}/__twice/health: .*ECONNREFUSED.* \\(is \`twice serve\` running`),
    );
  });

  test("a serve that never answers is a TwiceTimeout after the request's bound", async () => {
    const server = createServer(() => {
      // never answers
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    try {
      const { port } = server.address() as AddressInfo;
      const twice = new Twice({ control: `http://127.0.0.1:${port}` }, { requestTimeoutMs: 200 });
      const started = performance.now();
      const error = await twice.reset().catch((e: unknown) => e);
      expect(error).toBeInstanceOf(TwiceTimeout);
      expect((error as Error).message).toContain("no answer within 0.2 s");
      expect(performance.now() - started).toBeLessThan(5000);
    } finally {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
  });

  test("a URLs file: strings are URLs, accounts the chain's, anything else left alone", async () => {
    const dir = await tempDir();
    try {
      const file = join(dir.path, "urls.json");
      await writeFile(
        file,
        JSON.stringify({
          control: "http://127.0.0.1:1",
          payments: "http://127.0.0.1:2/",
          accounts: [
            { address: "0xabc", private_key: "0x01", balance_wei: "10000000000000000000000" },
            { address: "0xdef", private_key: "0x02", balance_wei: "lots" },
            "not an account",
          ],
          future: { anything: [1, 2] },
          count: 3,
        }),
      );
      const twice = await Twice.fromUrlsFile(file);
      expect(twice.urls).toEqual({ control: "http://127.0.0.1:1", payments: "http://127.0.0.1:2" });
      expect(twice.accounts).toEqual([{ address: "0xabc", privateKey: "0x01", balanceWei: 10n ** 22n }]);
      expect(new Twice({ control: "http://x" }).accounts).toEqual([]);
      expect(new Twice({ control: "http://x", accounts: { not: "an array" } }).accounts).toEqual([]);
      await writeFile(file, JSON.stringify({ payments: "http://127.0.0.1:2" }));
      await expect(Twice.fromUrlsFile(file)).rejects.toThrow(/no 'control' entry \(payments\)/);
      await writeFile(file, "[]");
      await expect(Twice.fromUrlsFile(file)).rejects.toThrow(/expected a JSON object of URLs, got an array/);
      await expect(Twice.fromUrlsFile(join(dir.path, "none.json"))).rejects.toThrow(/cannot read the URLs file/);
    } finally {
      await dir.remove();
    }
  });
});
