"""The twice/1 route for LangGraph: the kit's adapter, `python -m twice.engines.langgraph --app
agent_app:APP`, where twice itself starts, SIGKILLs, SIGSTOPs and restarts the worker processes
that run the graphs on their SqliteSaver.

- The short tests run five payments scenarios: the careful app must pass every one (exit 0);
  the idiomatic app must fail (exit 1) with the invariants its unkeyed tool breaks.
- The README's command is run exactly as written, in a folder holding only `agent_app.py` (as a
  team's project would), over the whole catalog and 20 generated cases.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from twice1_route import (
    SHORT_SCENARIOS,
    app_folder,
    assert_passes_all,
    assert_violates,
    readme_command,
    run_scenarios,
    run_whole_catalog,
    twice_bin,
    violations,
)

HERE = Path(__file__).resolve().parent
#: The packages whose versions the matrix names.
PACKAGES = ("langgraph", "langgraph-checkpoint-sqlite", "langchain-core", "stripe")
APP_FILES = ("agent_app.py",)
#: What the idiomatic app breaks, per scenario (at least one of each set). A kill races the
#: default ("async") durability: the resumed thread runs the tool again (two refunds) or fails
#: (claimed failed while the refund exists).
IDIOMATIC_VIOLATES = {
    "lost_refund_reply": {"honest-terminal-states"},
    "crash_while_refund_in_flight": {"no-duplicate-effect", "honest-terminal-states"},
    "key_regenerated_per_attempt": {"no-duplicate-effect"},
    "payments_forget_keys": {"no-duplicate-effect"},
    "refund_permission_denied": {"refusal-respected"},
}


def executor(app: str) -> str:
    return f"python -m twice.engines.langgraph --app agent_app:{app}"


@pytest.mark.short
def test_careful_passes(tmp_path: Path) -> None:
    code, results = run_scenarios(executor("careful"), app_folder(tmp_path, HERE, APP_FILES), tmp_path / "report")
    assert code == 0, f"careful: {violations(results)}"
    assert {r["name"] for r in results["results"]} == set(SHORT_SCENARIOS)


@pytest.mark.short
def test_idiomatic_fails_as_expected(tmp_path: Path) -> None:
    code, results = run_scenarios(executor("idiomatic"), app_folder(tmp_path, HERE, APP_FILES), tmp_path / "report")
    assert_violates(code, results, IDIOMATIC_VIOLATES)


def test_the_readme_command_passes_the_catalog_and_20_generated_cases(tmp_path: Path) -> None:
    """The whole catalog (a scenario whose intents this app does not do is not run, and says
    so) and 20 generated cases, with twice starting, killing, pausing and adding workers."""
    command = readme_command(HERE / "README.md", "langgraph")
    assert "--app agent_app:careful" in " ".join(command)
    folder = app_folder(tmp_path, HERE, APP_FILES)
    code, results = run_whole_catalog("langgraph", "careful", command, folder, tmp_path / "all", PACKAGES)
    assert_passes_all(code, results, generated=20)


def test_the_idiomatic_app_over_the_catalog_and_20_generated_cases(tmp_path: Path) -> None:
    """The same run for the idiomatic app: it fails, and a full engines run records where."""
    command = [twice_bin(), "run", "--executor", executor("idiomatic")]
    folder = app_folder(tmp_path, HERE, APP_FILES)
    code, results = run_whole_catalog("langgraph", "idiomatic", command, folder, tmp_path / "all", PACKAGES)
    assert code == 1 and any(violations(results).values()), f"exit {code}"