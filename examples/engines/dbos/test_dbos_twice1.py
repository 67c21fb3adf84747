"""The twice/1 route for DBOS: `python -m twice.engines.dbos --app APP`, where twice itself
starts, SIGKILLs, SIGSTOPs and restarts the DBOS application processes (the tests:
`twice1_route.route_tests`), and a module without an `App`, refused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from twice1_route import SHARED_FILES, Route, route_tests

ROUTE = Route(
    engine="dbos",
    folder=Path(__file__).resolve().parent,
    careful="careful",
    idiomatic="idiomatic",
    # sends.py counts sends; effects.py and the example executor's services.py do the careful
    # steps of files, transfers and messages.
    files=("careful.py", "careful_workspaces.py", "idiomatic.py", "sends.py", *SHARED_FILES),
    packages=("dbos", "stripe"),
    idiomatic_violates={
        "lost_refund_reply": {"honest-terminal-states"},
        "crash_while_refund_in_flight": {"no-duplicate-effect"},
        "key_regenerated_per_attempt": {"no-duplicate-effect"},
        "payments_forget_keys": {"no-duplicate-effect"},
        "refund_permission_denied": {"refusal-respected"},
    },
)

# The route's four tests, as this module's own (pytest collects them here).
globals().update(route_tests(ROUTE))


def test_an_app_module_without_an_app_is_a_clear_error(tmp_path: Path) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "plain.py").write_text("x = 1\n")
    done = subprocess.run([sys.executable, "-m", "twice.engines.dbos", "--app", "plain"], cwd=folder,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)  # fmt: skip
    assert done.returncode == 2, done
    assert "plain has no twice_app = twice.engines.App(actions={...})" in done.stderr, done.stderr
