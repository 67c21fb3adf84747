// The node:test fixture as a user meets it, through the package's own exports (the built
// dist/, so `npm run build` first): `useTwice()` for a suite, `useTwice({ each: true })` for
// a serve per test. Run by `npm run test:node` (node --test), not by vitest.

import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { TwiceError, TwiceViolation } from "twice-kit";
import { useTwice } from "twice-kit/node-test";

/** Whether a process with this id is alive. */
function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

const suitePids = [];
let shared;

describe("useTwice() in a describe", () => {
  shared = useTwice({ seed: 4 });

  test("starts one serve before the suite's tests", async () => {
    const twice = shared.client;
    suitePids.push(twice.serve.pid);
    assert.equal(alive(twice.serve.pid), true);
    assert.equal((await twice.health()).ok, true);
    assert.equal((await twice.loadScenario("lost_refund_reply")).seed, 4);
  });

  test("that every test of the suite shares, and that judges claims", async () => {
    const twice = shared.client;
    suitePids.push(twice.serve.pid);
    const scenario = await twice.loadScenario("key_regenerated_per_attempt");
    await twice.clearRules("payments");
    const [intent] = scenario.intents;
    // Two refunds without a key: the second is a duplicate.
    for (let i = 0; i < 2; i++) {
      const response = await fetch(`${twice.url("payments")}/v1/refunds`, {
        method: "POST",
        headers: { Authorization: "Bearer sk_test_x", "Content-Type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({
          payment_intent: String(intent.params.payment_intent),
          amount: String(intent.params.amount),
        }),
        signal: AbortSignal.timeout(10_000),
      });
      assert.equal(response.status, 200);
    }
    await assert.rejects(twice.check([{ id: intent.id, action: intent.action, state: "confirmed" }]), (error) => {
      assert.ok(error instanceof TwiceViolation);
      assert.match(error.message, /no-duplicate-effect: intent refund-1193 has 2 effects/);
      return true;
    });
    assert.equal(suitePids[0], suitePids[1]);
  });
});

describe("useTwice({ each: true })", () => {
  const serve = useTwice({ each: true });
  const pids = [];

  for (const name of ["first", "second"]) {
    test(`gives the ${name} test a serve of its own`, async () => {
      const twice = serve.client;
      pids.push(twice.serve.pid);
      assert.equal((await twice.health()).ok, true);
      if (pids.length === 2) {
        assert.notEqual(pids[0], pids[1]);
        assert.equal(alive(pids[0]), false, "the first test's serve is stopped after it");
      }
    });
  }
});

test("after its suite, the serve is stopped and the handle says so", () => {
  assert.equal(suitePids.length, 2);
  assert.equal(alive(suitePids[0]), false);
  assert.throws(() => shared.client, (error) => {
    assert.ok(error instanceof TwiceError);
    assert.match(error.message, /useTwice: serve is not running here/);
    return true;
  });
});
