"""What every engine's tests share: one finding per run of an app through a scenario, judged by
`twice serve`, written where `cargo xtask engines` collects it and held to the engine's
committed `findings.json`.

An engine's test ends with

    finding = engine_findings.judge(twice_serve, claims, app="idiomatic", scenario="lost_refund_reply",
                                    family="lost-reply", versions={"celery": celery.__version__})

which checks the claims, records the finding and then:

- for the *careful* app, fails the test unless every invariant held (a careful app that does
  something twice is a bug in the example, never a finding);
- for both apps, fails the test when its outcome or its violated invariants differ from the
  engine's `findings.json` (unless `TWICE_ENGINES_UPDATE=1`, which `cargo xtask engines` sets when
  it refreshes them), so that `docs/engines.md` states what the latest run showed. Where the
  engine itself races (a kill that lands before or after a checkpoint it writes in the
  background), a result's `also_seen` lists the other outcomes a run has shown, each with its
  evidence and date; a run that gives one of them passes, and the table states them all.

Environment: `TWICE_ENGINES_OUT` (a JSON-lines file each finding is appended to),
`TWICE_ENGINES_UPDATE` (record without comparing). Marker: `short`, the tests
`cargo xtask engines --short` (and so CI) runs.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

import pytest

from twice import Twice, Verdict

#: The failure-mode families of `docs/engines.md`, in its order: slug -> what it says.
FAMILIES: dict[str, str] = {
    "lost-reply": "lost reply after commit",
    "late-commit": "timeout then late commit",
    "worker-killed": "worker killed mid-step",
    "worker-paused": "worker paused past its lease or visibility timeout",
    "rejected-429": "429 then retry",
    "silent-noop": "silent no-op",
    "key-forgotten": "key forgotten",
    "stale-read": "stale read",
    "engine": "the engine's own failure path",
}
APPS = ("idiomatic", "careful")


@dataclass
class Finding:
    """One app through one scenario: what twice's check said of it."""

    engine: str
    app: str
    scenario: str
    family: str
    outcome: str
    violated: list[str]
    hazards: list[str]
    test: str
    replay: str
    versions: dict[str, str] = field(default_factory=dict)
    evidence: list[str] = field(default_factory=list)
    variant: str = ""


class EngineFindings:
    """Judges claims through `twice serve` and records each result as a finding."""

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self._request = request
        self._folder = Path(str(request.node.fspath)).parent
        self.engine = self._folder.name

    def judge(
        self,
        twice: Twice,
        claims: Iterable[Any],
        *,
        app: str,
        scenario: str,
        family: str,
        versions: Mapping[str, str],
        variant: str = "",
    ) -> Verdict:
        """Checks `claims`, records the finding, and fails the test as the module says.
        `variant` tells apart two tests of one app on one scenario (another API of the engine,
        say); the findings table shows it beside the scenario."""
        if app not in APPS:
            raise ValueError(f"app {app!r} is none of {APPS}")
        if family not in FAMILIES:
            raise ValueError(f"family {family!r} is none of {sorted(FAMILIES)}")
        verdict = twice.check(list(claims), raise_on_violation=False)
        results = verdict.results.get("results") or [{}]
        hazards = sorted({str(h.get("kind")) for h in results[0].get("hazards") or []})
        evidence = [f"{line.invariant}: {e}" for line in verdict.lines if line.status == "violated" for e in line.evidence]
        name = self._request.node.name
        finding = Finding(
            engine=self.engine,
            app=app,
            scenario=scenario,
            family=family,
            outcome="passed" if verdict.held else "violated",
            violated=verdict.violated,
            hazards=hazards,
            test=name,
            replay=f"cargo xtask engines --only {self.engine} -- -k '{name}'",
            versions=dict(versions),
            evidence=evidence[:6],
            variant=variant,
        )
        out = os.environ.get("TWICE_ENGINES_OUT")
        if out:
            with open(out, "a", encoding="utf-8") as f:
                f.write(json.dumps(asdict(finding), sort_keys=True) + "\n")
        if app == "careful" and not verdict.held:
            pytest.fail(f"the careful {self.engine} app broke an invariant in {scenario}:\n{verdict.summary}")
        if not os.environ.get("TWICE_ENGINES_UPDATE"):
            self._compare(finding, verdict)
        return verdict

    def _compare(self, finding: Finding, verdict: Verdict) -> None:
        committed = self._committed(finding.test)
        if committed is None:
            return
        seen = (finding.outcome, finding.violated)
        expected = (committed.get("outcome"), committed.get("violated"))
        also = [(other.get("outcome"), other.get("violated")) for other in committed.get("also_seen") or []]
        if seen != expected and seen in also:
            print(f"{finding.test}: {seen[0]} {seen[1]}, an outcome findings.json lists under also_seen")
        elif seen != expected:
            pytest.fail(
                f"{finding.test}: this run gave {seen[0]} {seen[1]}, but {self._folder.name}/findings.json "
                f"says {expected[0]} {expected[1]}. If the engine's behaviour changed, "
                f"`cargo xtask engines --only {self.engine}` reruns it and refreshes the findings; if the "
                f"engine races and both outcomes happen, add this one to the result's `also_seen`.\n"
                f"{verdict.summary}"
            )

    def _committed(self, test: str) -> Optional[Mapping[str, Any]]:
        path = self._folder / "findings.json"
        if not path.exists():
            return None
        findings = json.loads(path.read_text(encoding="utf-8"))
        for result in findings.get("results", []):
            if result.get("test") == test:
                return result
        return None


@pytest.fixture
def engine_findings(request: pytest.FixtureRequest) -> EngineFindings:
    """The recorder of this engine's findings (see the module)."""
    return EngineFindings(request)
