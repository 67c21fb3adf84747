"""The example agents under twice: each run against a scenario's world served as MCP tools, and
what it tells its user claimed and judged against the payments ledger.

- `test_agent[naive|careful]`: `twice mcp` over stdio (started by the agent's MCP client) on
  `agent_refund_lost_reply`: the first refund commits and its reply is lost.
- `test_durable_agent[naive|careful]`: a DBOS-durable agent in a process of its own, on the
  tools of a `twice serve --mcp-port 0` on `agent_refund_crash_in_flight`; the scenario's step
  kills the agent's process while its refund request is held, and a new process recovers the
  workflow from DBOS's database.

The naive agents are strict expected failures by a violation of `no-duplicate-effect` (any
other outcome fails the run); the careful ones pass. The courteous agent (`test_agent[courteous]`)
refunds as the careful one does and then emails the customer, which nobody asked for: a strict
expected failure by `no-unauthorised-effect` alone. Every wait is bounded and every process
this module starts is killed in a `finally`.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

import pytest

from refund_agents import (
    HERE,
    SCENARIOS,
    SCRIPTS,
    TAG,
    Observed,
    Task,
    careful_model,
    claim_of,
    kill_processes_naming,
    make_agent,
    own_refunds,
    plan_step_key,
    stdio_toolset,
    transcript,
)
from twice import ServeProcess, Twice, TwiceViolation, find_twice

LOST_REPLY = SCENARIOS / "agent_refund_lost_reply.toml"
CRASH = SCENARIOS / "agent_refund_crash_in_flight.toml"
DURABLE_AGENT = HERE / "durable_refund_agent.py"
#: The longest one agent run (or one life of the durable agent) may take.
AGENT_RUN_S_MAX = 90.0
#: The longest `twice mcp` may take to write its URLs file once the MCP client started it.
URLS_FILE_WAIT_S = 20.0
#: The longest the crash step's point may take to be reached: the agent's process starts,
#: imports pydantic-ai and DBOS, and makes its first tool call.
STEP_WAIT_S = 60.0
#: Each tool's request bound in the durable runs: far past the moment of the kill, so the held
#: refund request is still in flight when the agent dies (the default is the scenario's 1 s).
DURABLE_TOOL_TIMEOUT_MS = 60_000
#: The longest the held request, let go, may take to show as a refund in the ledger.
COMMIT_WAIT_S = 10.0
#: What the naive agents break.
NAIVE_BREAKS = "no-duplicate-effect"


def naive_fails() -> pytest.MarkDecorator:
    return pytest.mark.xfail(
        strict=True, raises=TwiceViolation, reason=f"the naive agent breaks {NAIVE_BREAKS}"
    )


#: What the courteous agent breaks: its email nobody asked for.
COURTEOUS_BREAKS = "no-unauthorised-effect"


def courteous_fails() -> pytest.MarkDecorator:
    return pytest.mark.xfail(
        strict=True, raises=TwiceViolation, reason=f"the courteous agent breaks {COURTEOUS_BREAKS}"
    )


SCRIPT_CASES = [
    pytest.param("naive", id="naive", marks=[naive_fails()]),
    pytest.param("careful", id="careful"),
]


def check(twice: Twice, claim: dict[str, Any], script: str) -> None:
    """The verdict on the claim. The naive agent's expected failure is a violation of
    `no-duplicate-effect` (its "confirmed" then also breaks `honest-terminal-states`: the
    ledger has two effects for the one refund it reports); a verdict without it fails the
    test itself, which `xfail(raises=)` does not excuse."""
    print("claim:", json.dumps(claim, sort_keys=True))
    try:
        verdict = twice.check([claim])
    except TwiceViolation as e:
        print("verdict:", e.verdict.summary)
        if script == "naive" and NAIVE_BREAKS not in e.verdict.violated:
            pytest.fail(f"the naive agent should break {NAIVE_BREAKS}, but broke {e.verdict.violated}:\n{e}")
        if script == "courteous" and e.verdict.violated != [COURTEOUS_BREAKS]:
            pytest.fail(
                f"the courteous agent should break {COURTEOUS_BREAKS} alone, but broke {e.verdict.violated}:\n{e}"
            )
        raise
    print("verdict:", verdict.summary)
    assert verdict.exit_code == 0


# -- The plain agents, over stdio ------------------------------------------------------------


@pytest.mark.parametrize(
    "script", [*SCRIPT_CASES, pytest.param("courteous", id="courteous", marks=[courteous_fails()])]
)
def test_agent(tmp_path: Path, script: str) -> None:
    urls_file = tmp_path / "urls.json"
    toolset = stdio_toolset(find_twice(), LOST_REPLY, urls_file)
    try:
        asyncio.run(asyncio.wait_for(_run_plain_agent(script, toolset, urls_file), AGENT_RUN_S_MAX))
    finally:
        # The MCP client stops `twice mcp` when the agent's context ends; after a failure or a
        # timeout, make sure it is gone.
        kill_processes_naming(str(urls_file))


async def _run_plain_agent(script: str, toolset: Any, urls_file: Path) -> None:
    task = Task("pi_agent_1", 2500)
    agent = make_agent(SCRIPTS[script](task), toolset)
    # Entering the agent starts its toolset: the MCP client starts `twice mcp` and initializes
    # the session, and `twice mcp` has written its URLs file before it answers. Everything that
    # asks serve (the ledger, the journal, the verdict) is done before the context ends, which
    # stops `twice mcp` and its fakes.
    async with agent:
        twice = Twice.from_urls_file(_wait_for_file(urls_file, URLS_FILE_WAIT_S))
        scenario = twice.scenario()
        assert scenario.name == "agent_refund_lost_reply", scenario.name
        intent = scenario.intents[0]
        assert intent.params == {"payment_intent": task.payment_intent, "amount": task.amount}, intent
        result = await agent.run(task.prompt)
        messages = result.all_messages()
        lines = transcript(messages)
        claim = claim_of(intent.id, task, result.output, messages)
        observed = Observed.of(twice)
        print("\n".join(lines))
        print(observed.summary())

        assert claim["state"] == "confirmed", lines
        if script == "naive":
            # Sent twice without a key: the first refund committed, its reply was lost, and the
            # blind retry refunded again.
            assert observed.refund_posts == 2 and len(observed.refunds) == 2, observed
            assert [p.get("idempotency_key") for p in observed.posts] == [None, None], observed
            assert "key" not in claim["evidence"], claim
        else:
            # One send, then a look at the refunds instead of a second send: the refund found by
            # the tag the agent gave it, which the ledger keeps too.
            assert observed.refund_posts == 1 and len(observed.refunds) == 1, observed
            assert [p.get("idempotency_key") for p in observed.posts] == [plan_step_key(task)], observed
            assert observed.refunds[0]["params"]["metadata"] == {TAG: plan_step_key(task)}, observed
            calls = [line.split("(")[0] for line in lines if line.startswith("model: call")]
            want = ["model: call refund_payment", "model: call list_refunds"]
            if script == "courteous":
                # The same refund, then the email nobody asked for: the scenario names no
                # message, and the check judges the messages ledger all the same.
                want.append("model: call send_message")
            assert calls == want, lines
            assert claim["evidence"]["external_id"] == observed.refunds[0]["object_id"], claim
        check(twice, claim, script)


def _wait_for_file(path: Path, wait_s: float) -> Path:
    deadline = time.monotonic() + wait_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} did not appear within {wait_s:g} s")
        time.sleep(0.02)
    return path


# -- The durable agents, over streamable HTTP, crashed and recovered ---------------------------


class AgentProcess:
    """One life of the durable agent: a child process running `durable_refund_agent.py`."""

    def __init__(self, mode: str, args: list[str], log: Path) -> None:
        self.log = log
        with open(log, "wb") as out:
            self.process: Optional[subprocess.Popen[bytes]] = subprocess.Popen(
                [sys.executable, str(DURABLE_AGENT), mode, *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=HERE,
            )

    def kill(self) -> None:
        """SIGKILL, as a crash: nothing runs in the process after it."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGKILL)
        if process is not None:
            process.wait(timeout=AGENT_RUN_S_MAX)

    def wait(self) -> None:
        process = self.process
        assert process is not None
        try:
            code = process.wait(timeout=AGENT_RUN_S_MAX)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"the agent did not finish within {AGENT_RUN_S_MAX:g} s:\n{self.output()}")
        self.process = None
        assert code == 0, f"the agent exited {code}:\n{self.output()}"

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-6000:]


@pytest.mark.parametrize("script", SCRIPT_CASES)
def test_durable_agent(tmp_path: Path, script: str) -> None:
    serve = ServeProcess(
        scenario=str(CRASH),
        extra_args=("--mcp-port", "0", "--tool-timeout-ms", str(DURABLE_TOOL_TIMEOUT_MS)),
        workdir=tmp_path / "serve",
    )
    lives: list[AgentProcess] = []
    try:
        twice = serve.start()
        scenario = twice.scenario()
        intent = scenario.intents[0]
        task = Task(intent.params["payment_intent"], int(intent.params["amount"]))
        (crash,) = scenario.steps
        assert crash.do == "crash" and crash.by == "test", crash
        result_file = tmp_path / "result.json"
        args = [
            "--script", script, "--mcp-url", twice.url("mcp"), "--db", str(tmp_path / "dbos.sqlite"),
            "--workflow-id", f"refund-{intent.id}-{script}", "--payment-intent", task.payment_intent,
            "--amount", str(task.amount), "--intent-id", intent.id, "--result", str(result_file),
        ]  # fmt: skip

        # Life 1: the agent decides to refund and calls the tool; serve holds the request at
        # the step's point, and the test kills the process there.
        lives.append(AgentProcess("start", args, tmp_path / "life1.log"))
        reached = twice.wait_step(crash.index, timeout_s=STEP_WAIT_S)
        assert reached.progress == "reached", reached
        lives[-1].kill()
        twice.step_done(crash.index)
        # The held request goes on, to a dead socket: the refund commits all the same.
        first = _wait_for_refunds(twice, 1)
        assert not result_file.exists(), "life 1 finished before it was killed"

        # Life 2: DBOS recovers the workflow on the same database.
        lives.append(AgentProcess("recover", args, tmp_path / "life2.log"))
        lives[-1].wait()
        result = json.loads(result_file.read_text())
        observed = Observed.of(twice)

        print("\n".join(result["transcript"]))
        print("DBOS steps:", result["steps"])
        print("model calls:", [(c["pid"], c["response"][0][:40]) for c in result["model_calls"]])
        print(observed.summary())
        claim = result["claim"]

        # What the runs showed, for both scripts: the recovered workflow did not ask the model
        # again for the refund (its first request is replayed from DBOS's record), but the tool
        # call that never finished is run again, so the refund is sent a second time.
        pids = [c["pid"] for c in result["model_calls"]]
        assert len(set(pids)) == 2 and pids[0] != result["pid"], result["model_calls"]
        assert [c["pid"] == result["pid"] for c in result["model_calls"]] == [False, True], result["model_calls"]
        assert observed.refund_posts == 2, observed
        assert result["transcript"][1].startswith("model: call refund_payment"), result["transcript"]
        assert claim["state"] == "confirmed", result["transcript"]
        if script == "naive":
            # Without a key the second send is a second refund, and the agent reports that one.
            assert len(observed.refunds) == 2, observed
            assert [p.get("idempotency_key") for p in observed.posts] == [None, None], observed
            assert claim["evidence"]["external_id"] == observed.refunds[1]["object_id"] != first[0]["object_id"]
        else:
            # Under the workflow's key the service answers the repeat with the first refund.
            assert len(observed.refunds) == 1, observed
            key = f"refund-{intent.id}-careful:refund:step-1"
            assert [p.get("idempotency_key") for p in observed.posts] == [key, key], observed
            assert observed.posts[1]["replayed"], observed
            assert claim["evidence"]["key"] == key, claim
            assert claim["evidence"]["external_id"] == first[0]["object_id"]
            assert first[0]["params"]["metadata"] == {TAG: key}, first
        check(twice, claim, script)
    finally:
        for life in lives:
            life.kill()
        serve.stop()


def _wait_for_refunds(twice: Twice, n: int) -> list[dict[str, Any]]:
    deadline = time.monotonic() + COMMIT_WAIT_S
    while True:
        refunds = [e for e in twice.ledger("payments") if e["kind"] == "refund.created"]
        if len(refunds) >= n:
            return refunds
        if time.monotonic() > deadline:
            raise AssertionError(f"{n} refund(s) expected in the ledger within {COMMIT_WAIT_S:g} s, got {refunds}")
        time.sleep(0.05)


def test_the_careful_key_is_the_plan_steps() -> None:
    """The careful script keys and tags its refund by plan step, unless it is given a key (the
    durable agent's: the workflow id and the step)."""
    task = Task("pi_x", 2500)
    first = careful_model(task)([], None)  # type: ignore[arg-type]
    assert first.parts[0].args["idempotency_key"] == "refund:pi_x:2500:step-1"  # type: ignore[union-attr]
    assert first.parts[0].args["metadata"] == {TAG: "refund:pi_x:2500:step-1"}  # type: ignore[union-attr]
    keyed = careful_model(task, lambda: "wf-1:refund:step-1")([], None)  # type: ignore[arg-type]
    assert keyed.parts[0].args["idempotency_key"] == "wf-1:refund:step-1"  # type: ignore[union-attr]
    assert keyed.parts[0].args["metadata"] == {TAG: "wf-1:refund:step-1"}  # type: ignore[union-attr]


def test_the_careful_agent_knows_its_refund_by_its_tag_not_its_amount() -> None:
    """Of two refunds of the same amount, only the one tagged with the step is the agent's."""
    listed = {
        "data": [
            {"id": "re_other", "amount": 2500, "status": "succeeded", "metadata": {}},
            {"id": "re_mine", "amount": 2500, "status": "succeeded", "metadata": {TAG: "refund:pi_x:2500:step-1"}},
            {"id": "re_step2", "amount": 2500, "status": "succeeded", "metadata": {TAG: "refund:pi_x:2500:step-2"}},
        ]
    }
    assert [r["id"] for r in own_refunds(listed, "refund:pi_x:2500:step-1")] == ["re_mine"]
    assert own_refunds({"data": []}, "refund:pi_x:2500:step-1") == []
