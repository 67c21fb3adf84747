/**
 * The vitest fixtures as a user meets them: `twice` (a serve per test, stopped after it),
 * `twiceSession` (one serve for the file), and `twiceOptions` set for a suite with
 * `test.scoped`.
 */

import { seedFromEnv, ServeStartError } from "../src/index.js";
import { describe, expect, test } from "../src/vitest.js";
import { alive } from "./helpers.js";

describe("the twice fixture", () => {
  const pids: number[] = [];

  test("starts a serve for the test", async ({ twice }) => {
    const pid = twice.serve?.pid as number;
    expect(alive(pid)).toBe(true);
    expect((await twice.health()).ok).toBe(true);
    pids.push(pid);
  });

  test("gives each test its own, and stops the one before", async ({ twice }) => {
    const pid = twice.serve?.pid as number;
    expect(pids).toHaveLength(1);
    expect(pid).not.toBe(pids[0]);
    expect(alive(pids[0] as number)).toBe(false);
    expect((await twice.loadScenario("lost_refund_reply")).seed).toBe(0);
  });
});

describe("the twiceSession fixture", () => {
  let first: number | undefined;

  test("starts one serve for the file", async ({ twiceSession }) => {
    first = twiceSession.serve?.pid;
    expect(alive(first as number)).toBe(true);
    await twiceSession.loadScenario("lost_refund_reply");
  });

  test("and every test of the file shares it", async ({ twiceSession }) => {
    expect(twiceSession.serve?.pid).toBe(first);
    // What the test before set up is still there: share it knowingly, or reset.
    expect((await twiceSession.scenario()).name).toBe("lost_refund_reply");
    await twiceSession.reset();
  });
});

describe("twiceOptions", () => {
  test.scoped({ twiceOptions: { seed: 5, extraArgs: ["-q"] } });

  test("set for a suite start its serves with them", async ({ twice }) => {
    expect((await twice.loadScenario("lost_refund_reply")).seed).toBe(5);
  });
});

test("TWICE_SEED is the fixtures' seed when their options name none", () => {
  expect(seedFromEnv({})).toBeUndefined();
  expect(seedFromEnv({ TWICE_SEED: "" })).toBeUndefined();
  expect(seedFromEnv({ TWICE_SEED: "42" })).toBe(42);
  expect(() => seedFromEnv({ TWICE_SEED: "-3" })).toThrow(ServeStartError);
  expect(() => seedFromEnv({ TWICE_SEED: "one" })).toThrow('TWICE_SEED="one": a whole number, 0 or more');
});
