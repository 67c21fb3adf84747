"""The twice/1 route for DBOS: `twice run --executor "python twice1.py --app APP"` on a few
payments catalog scenarios, where twice itself starts, SIGKILLs and restarts the DBOS
application processes. The careful app must pass every one (exit 0); the idiomatic app must
fail (exit 1) with the invariants its retries under fresh keys break.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
TWICE_BIN = os.environ.get("TWICE_BIN", str(ROOT / "target" / "debug" / "twice"))
#: Each run's bound (both together stay well under two minutes on a quiet 2-core machine).
RUN_TIMEOUT_S = 90
#: The bound of the whole catalog and 20 generated cases (about two minutes at two at a time).
FULL_RUN_TIMEOUT_S = 600

SCENARIOS = [
    "lost_refund_reply",
    "crash_while_refund_in_flight",
    "key_regenerated_per_attempt",
    "payments_forget_keys",
    "refund_permission_denied",
]
#: What the idiomatic app breaks, per scenario (a subset: each must be among the violations).
IDIOMATIC_VIOLATES = {
    "lost_refund_reply": {"honest-terminal-states"},
    "crash_while_refund_in_flight": {"no-duplicate-effect"},
    "key_regenerated_per_attempt": {"no-duplicate-effect"},
    "payments_forget_keys": {"no-duplicate-effect"},
    "refund_permission_denied": {"refusal-respected"},
}


def run(app: str, report_dir: Path, *, scenarios: list[str] = SCENARIOS, timeout_s: float = RUN_TIMEOUT_S,
        extra: list[str] = []) -> tuple[int, dict]:  # fmt: skip
    if not Path(TWICE_BIN).exists():
        pytest.fail(f"no twice binary at {TWICE_BIN}: set TWICE_BIN, or run `cargo xtask engines --only dbos`")
    command = [
        TWICE_BIN, "run", "--quiet", "--jobs", "2", "--report-dir", str(report_dir),
        "--executor", f"{sys.executable} {HERE / 'twice1.py'} --app {app}", *extra,
    ]  # fmt: skip
    for scenario in scenarios:
        command += ["--scenario", scenario]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
    results_path = report_dir / "results.json"
    assert results_path.exists(), f"twice wrote no results (exit {done.returncode}):\n{done.stdout}\n{done.stderr}"
    return done.returncode, json.loads(results_path.read_text())


def violations(results: dict) -> dict[str, set[str]]:
    """Scenario name -> the invariants twice found violated; a result that is neither passed
    nor violated says its outcome."""
    out: dict[str, set[str]] = {}
    for result in results["results"]:
        # A passing result points at a shared verdict set; a failing one carries its verdicts.
        if "verdicts" in result:
            verdicts = result["verdicts"]
        else:
            verdicts = results["verdict_sets"][result["verdict_set"]]
        found = {v["invariant"] for v in verdicts if v.get("status") == "violated"}
        if result.get("outcome") != "passed" and not found:
            found.add(f"outcome:{result.get('outcome')}")
        out[result["name"]] = found
    return out


@pytest.mark.short
def test_careful_passes(tmp_path: Path) -> None:
    code, results = run("careful", tmp_path / "careful")
    assert code == 0, f"careful: {violations(results)}"
    assert {r["name"] for r in results["results"]} == set(SCENARIOS)


@pytest.mark.short
def test_idiomatic_fails_as_expected(tmp_path: Path) -> None:
    code, results = run("idiomatic", tmp_path / "idiomatic")
    assert code == 1, f"idiomatic exited {code}"
    found = violations(results)
    for scenario, expected in IDIOMATIC_VIOLATES.items():
        assert expected <= found.get(scenario, set()), f"{scenario}: expected {expected}, twice found {found.get(scenario)}"


def test_careful_passes_the_catalog_and_20_generated_cases(tmp_path: Path) -> None:
    """The whole catalog (the intents of other actions are unsupported, and exempt) and 20
    generated cases, with twice starting, killing, pausing and adding DBOS processes."""
    code, results = run("careful", tmp_path / "all", scenarios=[], timeout_s=FULL_RUN_TIMEOUT_S, extra=["--cases", "20"])
    failed = {name: found for name, found in violations(results).items() if found}
    assert code == 0 and not failed, f"careful exited {code}: {failed}"
    generated = [r for r in results["results"] if (r.get("source") or {}).get("kind") == "generated"]
    assert len(generated) == 20, f"{len(generated)} generated cases ran"
