"""The LangGraph refund agent under twice: each scenario's tickets run as graph threads by real
`agent_app.py` processes against serve's payments fake, the scenario's steps performed on them
(a SIGKILL while the refund request is held), a new process resuming from the `SqliteSaver`
file, and what the checkpointer says of each thread claimed and judged.

Every test ends with `engine_findings.judge(...)` (see ../conftest.py): the careful app must
pass every scenario; both apps' outcomes are held to this folder's `findings.json`.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any, Optional, Union

import pytest

from twice import Claim, Scenario, Step, Twice

try:
    import langgraph.checkpoint.sqlite  # noqa: F401  (the engine, and its SQLite checkpointer)
    import langchain_core  # noqa: F401
    import stripe  # noqa: F401
except ImportError as e:  # pragma: no cover - a venv made without this folder's requirements
    raise ImportError(
        f"{e}: LangGraph's packages are missing from this venv. Install them with "
        "`pip install -r examples/engines/langgraph/requirements.txt` (as `cargo xtask engines` does "
        "in target/engines/langgraph/venv), then `pip install --no-deps --no-build-isolation -e clients/python`."
    ) from e

HERE = Path(__file__).parent
APP = HERE / "agent_app.py"
#: The longest one process life may take: a Python start with LangGraph's imports (seconds on
#: a loaded 2-core machine), then a handful of requests each bounded by the scenario's timeout,
#: the RetryPolicy's pauses and the careful read-back.
LIFE_S_MAX = 90.0
#: The longest a step's point may take to be reached once the process is started.
STEP_WAIT_S = 60.0

VERSIONS = {
    name: metadata.version(name)
    for name in ("langgraph", "langgraph-checkpoint", "langgraph-checkpoint-sqlite", "langchain-core", "stripe")
}

#: (scenario, family, short, api): a catalog name or a file of this folder; the Graph API agent
#: or the functional API (`@entrypoint`/`@task` with a `CachePolicy`).
SCENARIOS: list[tuple[Union[str, Path], str, bool, str]] = [
    # The headline: SIGKILL while the refund request is held; the resumed thread re-runs the
    # tools node.
    ("crash_while_refund_in_flight", "worker-killed", True, "graph"),
    # The tool raises on a lost reply; the node's RetryPolicy runs it again.
    ("lost_refund_reply", "lost-reply", False, "graph"),
    (HERE / "lg_lost_partial_refund_reply.toml", "lost-reply", False, "graph"),
    # Held past the client's timeout, committed 1.5 s after it arrived.
    ("unknown_state_required", "late-commit", False, "graph"),
    # A 429, unexecuted.
    (HERE / "lg_refund_rate_limited.toml", "rejected-429", False, "graph"),
    # The engine's own recovery path, in its other API: the refund as an `@task` with a
    # CachePolicy (SqliteCache), the process killed while the task's request is held, the
    # entrypoint resumed in a new process.
    ("crash_while_refund_in_flight", "engine", False, "functional"),
    # The same `@task` and its CachePolicy with nothing failing: two tickets, two real refunds
    # of equal amount on one payment. The cache is keyed on the task's input, so the second
    # ticket gets the first one's cached result and no refund is sent for it.
    (HERE / "lg_two_equal_refunds.toml", "engine", False, "functional"),
]


def _case(ref: Union[str, Path], family: str, short: bool, api: str, app: str) -> Any:
    marks = [pytest.mark.short] if short else []
    name = Path(ref).stem if api == "graph" else f"{Path(ref).stem}-{api}"
    return pytest.param(ref, family, api, app, id=f"{name}-{app}", marks=marks)


CASES = [_case(ref, family, short, api, app) for ref, family, short, api in SCENARIOS for app in ("idiomatic", "careful")]


class AgentApp:
    """The application under test: a SqliteSaver file and agent processes, one per life."""

    def __init__(self, db: Path, twice: Twice, scenario: Scenario, mode: str, api: str) -> None:
        self.db = db
        self.mode = mode
        self.api = api
        self.tickets = [
            (i.id, str(i.params["payment_intent"]), int(i.params["amount"])) for i in scenario.intents
        ]
        payments = scenario.contracts.get("payments") or {}
        timeout_ms = float(scenario.limits.get("request_timeout_ms", 2000))
        settle_s = (float(payments.get("settle_ms_max", 500)) + timeout_ms + 100.0) / 1000.0
        self.command = [
            sys.executable, str(APP), "run", str(db),
            "--api-base", twice.url("payments"), "--mode", mode,
            "--timeout-s", str(timeout_ms / 1000.0), "--settle-s", str(settle_s), "--api", api,
            *(f"{t}:{pi}:{amount}" for t, pi, amount in self.tickets),
        ]  # fmt: skip
        self.process: Optional[subprocess.Popen[bytes]] = None
        self.output: list[str] = []
        self.lives = 0

    def start(self) -> None:
        assert self.process is None, "one process at a time"
        self.lives += 1
        self.process = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def kill(self) -> None:
        """SIGKILL, as a crash: nothing runs, nothing is flushed but what was committed."""
        process, self.process = self.process, None
        assert process is not None, "no process to kill"
        process.send_signal(signal.SIGKILL)
        out, _ = process.communicate(timeout=LIFE_S_MAX)
        self.output.append(f"--- life {self.lives} (killed)\n{out.decode(errors='replace')}")

    def wait(self) -> None:
        process, self.process = self.process, None
        assert process is not None, "no process to wait for"
        try:
            out, _ = process.communicate(timeout=LIFE_S_MAX)
        except subprocess.TimeoutExpired:
            process.kill()
            out, _ = process.communicate(timeout=LIFE_S_MAX)
            pytest.fail(f"the agent process did not finish within {LIFE_S_MAX:g} s:\n{out.decode(errors='replace')}")
        self.output.append(f"--- life {self.lives}\n{out.decode(errors='replace')}")
        assert process.returncode == 0, f"agent process exited {process.returncode}:\n{''.join(self.output)}"

    def stop(self) -> None:
        if self.process is not None:
            self.kill()

    def claims(self, scenario: Scenario) -> list[Claim]:
        """What LangGraph's checkpoints say of each ticket's thread, as claims."""
        import agent_app

        claims = []
        for ticket_id, payment_intent, amount in self.tickets:
            read = agent_app.record_functional if self.api == "functional" else agent_app.record
            rec = read(str(self.db), self.mode, ticket_id, payment_intent, amount)
            state, evidence = (_careful_reading if self.mode == "careful" else _idiomatic_reading)(rec)
            evidence["tool_calls"] = rec["tool_calls"]
            claims.append(
                Claim(
                    id=ticket_id,
                    action=scenario.intent(ticket_id).action,
                    state=state,
                    attempts=max(1, len(rec["tool_results"])) if rec["tool_calls"] else 0,
                    params={"payment_intent": payment_intent, "amount": amount},
                    evidence=evidence,
                )
            )
        return claims


def _idiomatic_reading(rec: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """As a user of the docs reads a thread: finished with the tool's reply naming a refund is
    done; a run that ended in an error (the tool raised, retries spent) failed."""
    import agent_app

    for content, status in rec["tool_results"]:
        found = agent_app.REFUND_ID.search(content)
        if status == "success" and found and rec["finished"]:
            return "confirmed", {"external_id": found.group(0), "tool_result": content}
    return "failed", {"last_error": (rec["errors"] or ["the thread did not finish"])[-1][:300], "next": rec["next"]}


def _careful_reading(rec: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The careful tool returns its outcome as JSON; a tool call without a result (the tool
    raised past its retries, or never returned) may have refunded: unknown."""
    for content, _ in rec["tool_results"]:
        try:
            outcome = json.loads(content)
        except ValueError:
            continue
        evidence = {"key": outcome.get("key")}
        if outcome.get("refund_id"):
            evidence["external_id"] = outcome["refund_id"]
        if outcome.get("via"):
            evidence["via"] = outcome["via"]
        if outcome.get("last_error"):
            evidence["last_error"] = outcome["last_error"]
        return str(outcome["state"]), evidence
    if not rec["tool_calls"]:
        return "failed", {"last_error": "the agent never called the tool"}
    return "unknown", {"last_error": (rec["errors"] or ["the tool call has no result"])[-1][:300], "next": rec["next"]}


def perform(twice: Twice, app: AgentApp, step: Step) -> None:
    reached = twice.wait_step(step.index, timeout_s=STEP_WAIT_S)
    assert reached.progress == "reached", reached
    if step.do == "crash":
        # A real SIGKILL of the process running the graph while serve holds its refund
        # request; a new process resumes every unfinished thread from the SqliteSaver file.
        app.kill()
        twice.step_done(step.index)
        app.start()
    else:
        raise AssertionError(f"this example performs crashes only, not {step.do}: {step.how}")


@pytest.mark.parametrize("scenario_ref,family,api,app_mode", CASES)
def test_langgraph(
    twice_serve: Twice,
    engine_findings: Any,
    tmp_path: Path,
    scenario_ref: Union[str, Path],
    family: str,
    api: str,
    app_mode: str,
) -> None:
    scenario = twice_serve.load_scenario(scenario_ref)
    for intent in scenario.intents:
        assert intent.action == "payments.refund", f"{scenario.name}: {intent}"
    app = AgentApp(tmp_path / "checkpoints.sqlite", twice_serve, scenario, app_mode, api)
    try:
        app.start()
        for step in scenario.steps:
            if step.by == "test":
                perform(twice_serve, app, step)
        app.wait()
    finally:
        app.stop()
    # A commit the service still owes (held past the client's timeout, committed later) lands
    # within the contract's settle bound; the check waits for it before it judges.
    print("".join(app.output))
    claims = app.claims(scenario)
    print(json.dumps([c.__dict__ for c in claims], default=str, indent=1))
    verdict = engine_findings.judge(
        twice_serve,
        claims,
        app=app_mode,
        scenario=scenario.name,
        family=family,
        versions=VERSIONS,
        variant="functional API" if api == "functional" else "",
    )
    print(verdict.summary)
    print("payments journal:", _journal_line(twice_serve))


def _journal_line(twice: Twice) -> str:
    """The requests the app made, one word each: what a reader of the test's output needs."""
    words = []
    for entry in twice.journal("payments"):
        faults = entry.get("faults") or []
        fault = ",".join(str(f.get("fault")) for f in faults if isinstance(f, dict))
        words.append(f"{entry.get('method')} {entry.get('path')} {entry.get('status', '')} {entry.get('ended') or entry.get('outcome') or ''} {fault}".strip())
    return "; ".join(words)
