import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // Every request the worker makes has the scenario's timeout; these only catch a hang.
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
