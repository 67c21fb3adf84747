// Opens a new intent log of the TypeScript example while another connection holds the file's
// write lock, as happens when workers start together on a new state directory: one of them is
// creating the log while the others switch it to WAL. SQLite answers that switch with
// SQLITE_BUSY at once, without waiting out the busy timeout; the log must wait for the lock and
// open. The lock is held from a worker thread, since the log's constructor blocks this one.
// Prints one JSON line: {"opened": true} or {"error": "..."}.
//
// usage: node wal_busy.mjs INTENT_LOG_JS SCRATCH_DIR HOLD_MS

import { join } from "node:path";
import { createRequire } from "node:module";
import { Worker, isMainThread, parentPort, workerData } from "node:worker_threads";

const require = createRequire(import.meta.url);

if (isMainThread) {
  const [intentLogJs, scratch, holdMs] = process.argv.slice(2);
  const path = join(scratch, "intents.sqlite");
  const { IntentLog } = require(intentLogJs);
  const holder = new Worker(new URL(import.meta.url), { workerData: { intentLogJs, path, holdMs: Number(holdMs) } });
  await new Promise((resolve, reject) => {
    holder.once("message", resolve);
    holder.once("error", reject);
  });
  let outcome;
  try {
    new IntentLog(path);
    outcome = { opened: true };
  } catch (error) {
    outcome = { error: `${error.code ?? ""} ${error.message}` };
  }
  await new Promise((resolve) => holder.once("exit", resolve));
  console.log(JSON.stringify(outcome));
} else {
  // better-sqlite3 is the example's own dependency: load it from beside the log's module.
  const Database = createRequire(workerData.intentLogJs)("better-sqlite3");
  const db = new Database(workerData.path);
  db.exec("BEGIN IMMEDIATE");
  parentPort.postMessage("held");
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, workerData.holdMs);
  db.exec("COMMIT");
  db.close();
}
