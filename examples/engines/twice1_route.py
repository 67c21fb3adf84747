"""What the engines' `twice/1` tests share: running `twice run --executor "python -m
twice.engines.<engine> --app ..."` the way a team does (from a folder holding only its app's
modules, with its venv's `python` first on the PATH), the command of each engine's README
exactly as written, the invariants twice found violated per scenario, the whole-catalog
matrix, and the tests themselves (`route_tests(Route(...))`): an engine's test module is its
`Route`, data.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import pytest

ROOT = Path(__file__).resolve().parents[2]
TWICE_BIN = os.environ.get("TWICE_BIN", str(ROOT / "target" / "debug" / "twice"))
#: A few scenarios' bound (well under two minutes on a quiet 2-core machine).
RUN_TIMEOUT_S = 180
#: The whole catalog and 20 generated cases' bound (two to ten minutes at four at a time).
FULL_RUN_TIMEOUT_S = 1200
#: What the apps of every engine share, from outside their folder: effects.py (the careful step
#: of any action) and what it builds on, the example executor's answers of each SDK.
SHARED_FILES = ("../effects.py", *(f"../../executors/python/{m}.py" for m in ("services", "actions", "bugs", "light_imports")))
#: Five payments scenarios and one per other service that every careful app passes and every
#: idiomatic one fails.
SHORT_SCENARIOS = (
    "lost_refund_reply",
    "crash_while_refund_in_flight",
    "key_regenerated_per_attempt",
    "payments_forget_keys",
    "refund_permission_denied",
    "workspace_created_twice",
    "files_put_drop_after_commit",
    "chain_lost_reply",
    "messages_lost_reply",
)
#: What every idiomatic app breaks in the other services' short scenarios: a retry after a lost
#: reply makes a second workspace, object version, transfer or message (claimed confirmed), or
#: the app reads the retry's refusal as the first's and claims failed what exists.
OTHER_SERVICES_VIOLATE = {
    scenario: {"no-duplicate-effect", "honest-terminal-states"}
    for scenario in ("workspace_created_twice", "files_put_drop_after_commit", "chain_lost_reply", "messages_lost_reply")
}


def twice_bin() -> str:
    if not Path(TWICE_BIN).exists():
        pytest.fail(f"no twice binary at {TWICE_BIN}: set TWICE_BIN, or run `cargo xtask engines`")
    return TWICE_BIN


def environment() -> dict[str, str]:
    """`python` is this venv's (where the engine and the kit are installed), as in an activated venv."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def app_folder(tmp_path: Path, source: Path, files: Iterable[str], links: Iterable[str] = ()) -> Path:
    """A folder holding only the app's modules (and links to what `links` names, such as its
    `node_modules`): the adapter imports the app from where it runs."""
    folder = tmp_path / "project"
    folder.mkdir(exist_ok=True)
    for name in files:
        shutil.copy(source / name, folder / Path(name).name)
    for name in links:
        (folder / name).symlink_to(source / name)
    return folder


def run(command: list[str], cwd: Path, report_dir: Path, timeout_s: float) -> tuple[int, dict]:
    """Runs `command` (a `twice run`) quietly into `report_dir`: its exit code and results."""
    done = subprocess.run([*command, "--quiet", "--report-dir", str(report_dir)], cwd=cwd, env=environment(),
                          capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)  # fmt: skip
    results_path = report_dir / "results.json"
    assert results_path.exists(), f"twice wrote no results (exit {done.returncode}):\n{done.stdout}\n{done.stderr}"
    return done.returncode, json.loads(results_path.read_text())


def run_scenarios(executor: str, cwd: Path, report_dir: Path, scenarios: Iterable[str] = SHORT_SCENARIOS) -> tuple[int, dict]:
    command = [twice_bin(), "run", "--jobs", "2", "--executor", executor]
    for scenario in scenarios:
        command += ["--scenario", scenario]
    return run(command, cwd, report_dir, RUN_TIMEOUT_S)


def violations(results: dict) -> dict[str, set[str]]:
    """Scenario name -> the invariants twice found violated; a result that is neither passed
    nor violated says its outcome."""
    out: dict[str, set[str]] = {}
    for result in results["results"]:
        # A passing result points at a shared verdict set; a failing one carries its verdicts.
        verdicts = result["verdicts"] if "verdicts" in result else results["verdict_sets"][result["verdict_set"]]
        found = {v["invariant"] for v in verdicts if v.get("status") == "violated"}
        if result.get("outcome") != "passed" and not found:
            found.add(f"outcome:{result.get('outcome')}")
        out[result["name"]] = found
    return out


def readme_command(readme: Path, engine: str) -> list[str]:
    """The one `twice run` line of an engine's README, as words, `twice` being the binary under test."""
    start = f'twice run --executor "python -m twice.engines.{engine}'
    runs = [line.strip() for line in readme.read_text().splitlines() if line.strip().startswith(start)]
    assert len(runs) == 1, f"{readme} should show one `{start} ...` command, found {runs}"
    return [twice_bin(), *shlex.split(runs[0])[1:]]


def assert_passes_all(code: int, results: dict, generated: int) -> None:
    failed = {name: found for name, found in violations(results).items() if found}
    assert code == 0 and not failed, f"exit {code}: {failed}"
    ran = [r for r in results["results"] if (r.get("source") or {}).get("kind") == "generated"]
    assert len(ran) == generated, f"{len(ran)} generated cases ran"


def assert_violates(code: int, results: dict, expected: dict[str, set[str]]) -> None:
    """Exit 1, and in each scenario of `expected` at least one of its invariants violated (an
    engine that races, e.g. a kill before or after a checkpoint, may break one or the other)."""
    assert code == 1, f"exit {code}: {violations(results)}"
    found = violations(results)
    for scenario, invariants in expected.items():
        assert invariants & found.get(scenario, set()), f"{scenario}: expected one of {invariants}, twice found {found.get(scenario)}"


# ---- the whole-catalog matrix ------------------------------------------------------------------

#: Evidence is cut to this many characters in the matrix (one line per cell).
EVIDENCE_CHARS_MAX = 200


def _families() -> dict[str, str]:
    """Catalog scenario name -> its `failure_mode`, from the scenario files."""
    import tomllib

    out = {}
    for path in sorted((ROOT / "scenarios" / "catalog").glob("*.toml")):
        with open(path, "rb") as f:
            found = tomllib.load(f)
        out[str(found.get("name", path.stem))] = str(found.get("failure_mode", "other"))
    return out


def matrix_rows(results: dict) -> list[dict[str, object]]:
    """One row per scenario of a `twice run`: what ran, what it broke, one line of evidence."""
    families = _families()
    rows = []
    for result in sorted(results["results"], key=lambda r: r.get("position", 0)):
        kind = (result.get("source") or {}).get("kind", "catalog")
        unsupported = sorted((result.get("observed") or {}).get("unsupported", []))
        intents = (result.get("summary") or {}).get("intents", [])
        verdicts = result["verdicts"] if "verdicts" in result else results["verdict_sets"][result["verdict_set"]]
        violated = [v for v in verdicts if v.get("status") == "violated"]
        ran = any(i[1] is not None for i in intents)
        outcome = str(result.get("outcome"))
        if unsupported and not ran and outcome == "passed":
            outcome = "not-run"
        evidence = next((str(v["evidence"][0]) for v in violated if v.get("evidence")), "")
        if outcome == "executor_error" or (outcome not in ("passed", "violated", "not-run") and not evidence):
            evidence = str(result.get("error") or result.get("reason") or "")
        rows.append({
            "scenario": result["name"],
            "kind": kind,
            "family": families.get(result["name"], "generated" if kind == "generated" else "other"),
            "outcome": outcome,
            "violated": [v["invariant"] for v in violated],
            "unsupported": unsupported,
            "evidence": " ".join(evidence.split())[:EVIDENCE_CHARS_MAX],
            "replay": result.get("replay", ""),
        })  # fmt: skip
    return rows


def record_matrix(engine: str, app: str, command: list[str], results: dict, packages: Iterable[str]) -> None:
    """With `TWICE_ENGINES_UPDATE=1` (a full `cargo xtask engines` run): writes this app's whole
    run into `examples/engines/<engine>/matrix.json`, which `docs/engines.md` is made from."""
    if os.environ.get("TWICE_ENGINES_UPDATE") != "1":
        return
    import datetime
    from importlib.metadata import PackageNotFoundError, version

    path = ROOT / "examples" / "engines" / engine / "matrix.json"
    try:
        matrix = json.loads(path.read_text())
    except (OSError, ValueError):
        matrix = {"engine": engine, "apps": {}}
    versions = {}
    for package in packages:
        if package.startswith("npm:"):  # a Node package of the engine's folder
            manifest = ROOT / "examples" / "engines" / engine / "node_modules" / package[4:] / "package.json"
            try:
                versions[package[4:]] = str(json.loads(manifest.read_text())["version"])
            except (OSError, ValueError, KeyError):
                versions[package[4:]] = "?"
            continue
        try:
            versions[package] = version(package)
        except PackageNotFoundError:
            versions[package] = "?"
    shown = ["twice", *command[1:]]
    matrix["apps"][app] = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "command": shlex.join(shown),
        "versions": versions,
        "totals": results["totals"],
        "results": matrix_rows(results),
    }
    matrix["apps"] = dict(sorted(matrix["apps"].items()))
    path.write_text(json.dumps(matrix, indent=2, sort_keys=False) + "\n")


#: Cases at a time in a whole-catalog run, per app. The cases mostly wait (on the engine's own
#: retry backoff, on a settle bound), they do not compute: one engine at a time, six cases kept
#: a 2-core machine's load under 10 with every `init` in its bound; at eight, a DBOS and a
#: Temporal worker each missed the 30 s `init` bound once.
WHOLE_CATALOG_JOBS = {"careful": 6, "idiomatic": 6}
#: Where an app's cases may go more at a time: Restate's idiomatic jobs, retried for ever, hold
#: their cases through every reconcile round (some minutes) waiting, with no worker starting.
WHOLE_CATALOG_JOBS_OF = {("restate", "idiomatic"): 8}


def run_whole_catalog(engine: str, app: str, command: list[str], cwd: Path, report_dir: Path,
                      packages: Iterable[str]) -> tuple[int, dict]:  # fmt: skip
    """The whole catalog and 20 generated cases (the default of a live run),
    `WHOLE_CATALOG_JOBS[app]` at a time (or what `WHOLE_CATALOG_JOBS_OF` says for this engine),
    recorded in the engine's matrix on a full engines run."""
    jobs = WHOLE_CATALOG_JOBS_OF.get((engine, app), WHOLE_CATALOG_JOBS[app])
    command = [*command, "--jobs", str(jobs)]
    code, results = run(command, cwd, report_dir, FULL_RUN_TIMEOUT_S)
    record_matrix(engine, app, command, results, packages)
    return code, results


# ---- the tests every engine's twice/1 route runs -----------------------------------------------


@dataclass(frozen=True)
class Route:
    """One engine's adapter and example apps: `careful` and `idiomatic` are their `--app` values,
    `files` the modules a team's folder would hold, `packages` the versions the matrix names,
    `idiomatic_violates` what the idiomatic app breaks in the short payments scenarios (at
    least one invariant of each set: an engine that races may break one or the other; the other
    services' are OTHER_SERVICES_VIOLATE)."""

    engine: str
    folder: Path
    careful: str
    idiomatic: str
    files: tuple[str, ...]
    packages: tuple[str, ...]
    idiomatic_violates: dict[str, set[str]]
    links: tuple[str, ...] = ()

    def executor(self, app: str) -> str:
        return f"python -m twice.engines.{self.engine} --app {getattr(self, app)}"


def route_tests(route: Route) -> dict[str, Callable[[Path], None]]:
    """The four tests of an engine's route, by name, for its test module to take as its own
    (`globals().update(route_tests(ROUTE))`):

    - short: the careful app passes the five short scenarios, the idiomatic one fails them;
    - the README's command, exactly as written, passes the whole catalog and 20 generated cases;
    - the idiomatic app over the same run fails; a full engines run records both in the matrix.
    """

    @pytest.mark.short
    def test_careful_passes(tmp_path: Path) -> None:
        folder = app_folder(tmp_path, route.folder, route.files, route.links)
        code, results = run_scenarios(route.executor("careful"), folder, tmp_path / "report")
        assert code == 0, f"careful: {violations(results)}"
        assert {r["name"] for r in results["results"]} == set(SHORT_SCENARIOS)

    @pytest.mark.short
    def test_idiomatic_fails_as_expected(tmp_path: Path) -> None:
        folder = app_folder(tmp_path, route.folder, route.files, route.links)
        code, results = run_scenarios(route.executor("idiomatic"), folder, tmp_path / "report")
        assert_violates(code, results, {**OTHER_SERVICES_VIOLATE, **route.idiomatic_violates})

    def test_the_readme_command_passes_the_catalog_and_20_generated_cases(tmp_path: Path) -> None:
        command = readme_command(route.folder / "README.md", route.engine)
        assert f"--app {route.careful}" in " ".join(command)
        folder = app_folder(tmp_path, route.folder, route.files, route.links)
        code, results = run_whole_catalog(route.engine, "careful", command, folder, tmp_path / "all", route.packages)
        assert_passes_all(code, results, generated=20)

    def test_the_idiomatic_app_over_the_catalog_and_20_generated_cases(tmp_path: Path) -> None:
        # Shrinking an idiomatic app's failing generated cases says little more than the cases
        # themselves: 20 s of it, not the default 60 s, keeps the full engines run short.
        command = [twice_bin(), "run", "--shrink-budget", "20", "--executor", route.executor("idiomatic")]
        folder = app_folder(tmp_path, route.folder, route.files, route.links)
        code, results = run_whole_catalog(route.engine, "idiomatic", command, folder, tmp_path / "all", route.packages)
        assert code == 1 and any(violations(results).values()), f"exit {code}"

    tests = (
        test_careful_passes,
        test_idiomatic_fails_as_expected,
        test_the_readme_command_passes_the_catalog_and_20_generated_cases,
        test_the_idiomatic_app_over_the_catalog_and_20_generated_cases,
    )
    return {test.__name__: test for test in tests}
