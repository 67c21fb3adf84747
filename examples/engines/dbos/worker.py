"""One life of a DBOS worker process, for either app: DBOS launched on the SQLite system
database, the given workflows started (first life only), every workflow waited for.

DBOS's `launch()` recovers the workflows this executor (`local`, same application version)
left PENDING when its previous process died, in a background thread: skips the steps that
finished (their outputs are in the system database) and runs the interrupted one again.
So a life after a SIGKILL starts nothing itself: it launches, and DBOS goes on.

    python worker.py idiomatic|careful DB --api-base URL --timeout-s S --sends FILE \
        [--start ID PAYMENT_INTENT AMOUNT]... --wait ID [--wait ID]... [--deadline-s S]

Exit 0 once every `--wait` workflow is finished (SUCCESS, ERROR, CANCELLED, or past its
recovery attempts), 3 if the deadline passes first.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path

from dbos import DBOS, DBOSConfig, SetWorkflowID

import sends

APPS = ("idiomatic", "careful")
#: DBOS's statuses after which a workflow does nothing more by itself.
FINISHED = ("SUCCESS", "ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED")
POLL_S = 0.05


def config(db: Path) -> DBOSConfig:
    """The app's DBOS configuration: a SQLite system database and no admin server (nothing
    else is changed from DBOS's defaults)."""
    return {
        "name": "dbos-refunds",
        "system_database_url": f"sqlite:///{db}",
        "run_admin_server": False,
        "log_level": "WARNING",
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("app", choices=APPS)
    parser.add_argument("db", type=Path)
    parser.add_argument("--api-base", required=True)
    parser.add_argument("--timeout-s", type=float, required=True)
    parser.add_argument("--sends", type=Path, required=True)
    parser.add_argument("--start", nargs=3, action="append", default=[], metavar=("ID", "PAYMENT_INTENT", "AMOUNT"))
    parser.add_argument("--wait", action="append", default=[], metavar="ID")
    parser.add_argument("--deadline-s", type=float, default=60.0)
    args = parser.parse_args(argv)

    app = importlib.import_module(args.app)
    app.configure(args.api_base, args.timeout_s)
    sends.PATH = args.sends
    DBOS(config=config(args.db))
    DBOS.launch()
    try:
        for workflow_id, payment_intent, amount in args.start:
            if hasattr(app, "started_here"):
                app.started_here.add(workflow_id)
            with SetWorkflowID(workflow_id):
                DBOS.start_workflow(app.refund_workflow, payment_intent, int(amount))
        print(f"worker {args.app}: started {[s[0] for s in args.start]}", flush=True)
        deadline = time.monotonic() + args.deadline_s
        pending = list(args.wait)
        while pending:
            status = DBOS.get_workflow_status(pending[0])
            if status is not None and status.status in FINISHED:
                print(f"worker {args.app}: {pending[0]} {status.status}", flush=True)
                pending.pop(0)
                continue
            if time.monotonic() > deadline:
                print(f"worker {args.app}: {pending} not finished after {args.deadline_s:g} s", flush=True)
                return 3
            time.sleep(POLL_S)
        return 0
    finally:
        DBOS.destroy()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
