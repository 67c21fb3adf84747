#!/usr/bin/env node
// The `twice-executor` command of twice-kit: runs the twice-executor binary of this machine's platform package
// (@twice-kit/<platform>-<arch>, an optional dependency) with these arguments and stdio,
// passes SIGINT, SIGTERM and SIGHUP on, and exits as it exited. See src/shim.ts.
import { runShim } from "../dist/shim.js";

runShim("twice-executor");
