"""The twice/1 route for Restate: `python -m twice.engines.restate --app twice-APP.json`, where
twice itself starts, SIGKILLs, SIGSTOPs and restarts workers, each the adapter and the app's Node
endpoint, on a restate-server the adapter keeps for the case (the tests:
`twice1_route.route_tests`)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from twice1_route import RUN_TIMEOUT_S, SHORT_SCENARIOS, Route, app_folder, route_tests, run, twice_bin, violations

ROUTE = Route(
    engine="restate",
    folder=Path(__file__).resolve().parent,
    careful="twice-careful.json",
    idiomatic="twice-idiomatic.json",
    files=("careful.mjs", "idiomatic.mjs", "common.mjs", "services.mjs", "polyfill.mjs", "package.json",
           "twice-careful.json", "twice-idiomatic.json"),  # fmt: skip
    links=("node_modules",),
    packages=("npm:@restatedev/restate-sdk", "npm:@restatedev/restate-server", "npm:viem"),
    # A 403 the idiomatic app comes through: a `TerminalError`, claimed failed.
    idiomatic_violates={
        "lost_refund_reply": {"honest-terminal-states"},
        "crash_while_refund_in_flight": {"no-duplicate-effect"},
        "key_regenerated_per_attempt": {"no-duplicate-effect"},
        "payments_forget_keys": {"no-duplicate-effect"},
    },
)

# The route's four tests, as this module's own (pytest collects them here).
globals().update(route_tests(ROUTE))


@pytest.mark.short
def test_the_readme_node_command_passes_the_short_scenarios(tmp_path: Path) -> None:
    """The README's route without Python: the Node kit's adapter (`npx twice-engine-restate`,
    linked into the folder's node_modules from clients/node), its command exactly as written."""
    start = 'twice run --executor "npx twice-engine-restate'
    lines = [line.strip().strip("`") for line in (ROUTE.folder / "README.md").read_text().splitlines()]
    found = [line[line.index(start):].rstrip("`.") for line in lines if start in line]
    assert len(found) == 1, f"README.md should show one `{start} ...` command, found {found}"
    command = [twice_bin(), *shlex.split(found[0])[1:]]
    folder = app_folder(tmp_path, ROUTE.folder, ROUTE.files, ROUTE.links)
    code, results = run([*command, "--jobs", "2", *[a for s in SHORT_SCENARIOS for a in ("--scenario", s)]],
                        folder, tmp_path / "report", RUN_TIMEOUT_S)  # fmt: skip
    assert code == 0, f"careful through the Node adapter: {violations(results)}"
    assert {r["name"] for r in results["results"]} == set(SHORT_SCENARIOS)
