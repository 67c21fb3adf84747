#!/usr/bin/env node
// The `twice-engine-restate` command of twice-kit: a Restate app (its endpoint's command and a
// handler per action, named by `--app FILE.json`) as a twice/1 executor, for
// `twice run --executor "npx twice-engine-restate --app twice-app.json"`. See src/engines/restate.ts.
import { run } from "../dist/engines/restate.js";

await run();
