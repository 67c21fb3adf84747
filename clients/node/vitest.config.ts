import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    // The node:test file (test/*.test.mjs) is run by `npm run test:node`, not by vitest.
    include: ["test/**/*.test.ts"],
    // Every wait in the tests has its own, shorter bound; these only catch a hang.
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
