"""Opens a new intent log of the Python example while another connection holds the file's
write lock, as happens when workers start together on a new state directory: one of them is
creating the log while the others switch it to WAL. SQLite answers that switch with "database
is locked" at once, without waiting out the busy timeout; the log must wait for the lock and
open. Prints one JSON line: {"opened": true} or {"error": "..."}.

usage: wal_busy.py EXAMPLE_DIR SCRATCH_DIR HOLD_MS"""

import json
import os
import sqlite3
import sys
import threading
import time

example, scratch, hold_ms = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path.insert(0, example)
import intent_log  # noqa: E402

path = os.path.join(scratch, "intents.sqlite")
holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
holder.execute("BEGIN IMMEDIATE")


def release():
    time.sleep(hold_ms / 1000)
    holder.execute("COMMIT")


releaser = threading.Thread(target=release)
releaser.start()
try:
    intent_log.IntentLog(path).db.close()
    outcome = {"opened": True}
except Exception as error:  # noqa: BLE001: the failure is the finding
    outcome = {"error": repr(error)}
releaser.join()
print(json.dumps(outcome))
