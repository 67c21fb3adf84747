/**
 * The keeper of a shared server, as its own process (see `./servers.js`):
 * `node keeper.js STATE_DIR NAME PORT COMMAND...`. `sharedServer` starts it in a session of its
 * own; its output is `<name>.log` in the state directory.
 *
 * @module
 */

import { isObject } from "../protocol.js";
import { INFO_VARIABLE, keep } from "./servers.js";

const [stateDir, name, port, ...command] = process.argv.slice(2);
if (stateDir === undefined || name === undefined || !/^\d+$/.test(port ?? "") || command.length === 0) {
  process.stderr.write("usage: keeper.js STATE_DIR NAME PORT COMMAND...\n");
  process.exit(2);
}
const info: unknown = JSON.parse(process.env[INFO_VARIABLE] || "{}");
process.exit(await keep(stateDir, name, Number(port), command, { info: isObject(info) ? info : {} }));
