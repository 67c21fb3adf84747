"""Restate under twice: a real `restate-server` and the refund service (Node, the Restate
TypeScript SDK) as child processes of the test, one refund invocation per scenario intent sent
through Restate's ingress, the scenario's crash steps done to the real processes (SIGKILL of the
service, or of the server, at the request point, then a restart on the same state), and what
Restate's own record says of each invocation (`sys_invocation`, the invocation's output) claimed
and judged.

Two apps (`idiomatic.mjs`, `careful.mjs`, see README.md): the docs' `ctx.run("refund", () =>
fetch(...))` without a key, and the same step with a key derived from the invocation id, a
read-back and Restate's ingress idempotency key.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import pytest

from twice import Claim, Scenario, Twice

HERE = Path(__file__).parent
#: How long a process may take to be ready (server healthy, service listening).
READY_S = 30.0
#: How long one invocation may take to complete, crashes and Restate's retries included.
INVOCATION_S = 60.0
#: How long a scenario's step may take to be reached.
STEP_S = 30.0
POLL_S = 0.05
#: The states of `sys_invocation.status` after which Restate does nothing more.
COMPLETED = "completed"
#: No proxy between the test and loopback.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
INSTALL = "run `npm ci` in examples/engines/restate (`cargo xtask engines --only restate` does)"


# -- The engine's processes ------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http(method: str, url: str, body: Any = None, headers: Optional[dict[str, str]] = None, timeout_s: float = 10.0) -> tuple[int, Any]:
    """One HTTP request with a bound; the status and the JSON (or text) answer."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("accept", "application/json")
    if data is not None:
        request.add_header("content-type", "application/json")
    for k, v in (headers or {}).items():
        request.add_header(k, v)
    try:
        with _OPENER.open(request, timeout=timeout_s) as response:
            status, text = response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode(errors="replace")
    try:
        return status, json.loads(text) if text.strip() else None
    except json.JSONDecodeError:
        return status, text


def wait_until(what: str, ready: Any, timeout_s: float, log: Optional[Path] = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if ready():
                return
        except OSError:
            pass
        time.sleep(POLL_S)
    tail = log.read_text(errors="replace")[-3000:] if log and log.exists() else ""
    pytest.fail(f"{what} not ready after {timeout_s:g} s\n{tail}")


class Proc:
    """A child process with its output in a log file; stopped with SIGKILL."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.name, self.argv, self.env, self.log = name, argv, env, log
        self.popen: Optional[subprocess.Popen[bytes]] = None

    def start(self) -> None:
        with open(self.log, "ab") as out:
            out.write(f"--- start {self.name}\n".encode())
            out.flush()
            self.popen = subprocess.Popen(self.argv, env=self.env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def kill(self) -> None:
        """SIGKILL, as the scenario's crash says, and reap it."""
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL)
            self.popen.wait(timeout=10)

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""


def server_binary() -> Path:
    arch = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine().lower(), platform.machine())
    system = {"Linux": "linux", "Darwin": "darwin"}.get(platform.system(), platform.system().lower())
    path = HERE / "node_modules" / "@restatedev" / f"restate-server-{system}-{arch}" / "bin" / "restate-server"
    if not path.is_file():
        pytest.fail(f"no restate-server at {path}: {INSTALL}")
    return path


def node_binary() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.fail("no `node` on the PATH: install Node.js 20 or later (apt-get install nodejs)")
    if not (HERE / "node_modules" / "@restatedev" / "restate-sdk" / "package.json").is_file():
        pytest.fail(f"no @restatedev/restate-sdk in node_modules: {INSTALL}")
    return node


@functools.lru_cache(maxsize=1)
def versions() -> dict[str, str]:
    sdk = json.loads((HERE / "node_modules/@restatedev/restate-sdk/package.json").read_text())["version"]
    server = subprocess.run([str(server_binary()), "--version"], capture_output=True, text=True, timeout=30).stdout.split()[-1]
    node = subprocess.run([node_binary(), "--version"], capture_output=True, text=True, timeout=30).stdout.strip().lstrip("v")
    return {"restate-server": server, "@restatedev/restate-sdk": sdk, "node": node}


class RestateServer:
    """`restate-server` on loopback ports of its own, its data in `base_dir`, so that a
    restart after a SIGKILL recovers what it had."""

    def __init__(self, tmp: Path) -> None:
        self.base_dir = tmp / "restate-data"
        self.ingress_port, self.admin_port, self.node_port = free_port(), free_port(), free_port()
        env = {
            **os.environ,
            "RESTATE_INGRESS__BIND_ADDRESS": f"127.0.0.1:{self.ingress_port}",
            "RESTATE_ADMIN__BIND_ADDRESS": f"127.0.0.1:{self.admin_port}",
            "RESTATE_DISABLE_TELEMETRY": "true",
            "RESTATE_LOG_DISABLE_ANSI_CODES": "true",
        }
        argv = [
            str(server_binary()),
            "--base-dir", str(self.base_dir),
            "--bind-ip", "127.0.0.1",
            "--bind-port", str(self.node_port),
            "--listen-mode", "tcp",
            "--default-num-partitions", "1",
            "--no-logo",
        ]
        self.proc = Proc("restate-server", argv, env, tmp / "restate-server.log")

    @property
    def admin(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    @property
    def ingress(self) -> str:
        return f"http://127.0.0.1:{self.ingress_port}"

    def start(self) -> None:
        self.proc.start()

        def healthy() -> bool:
            if not self.proc.alive():
                pytest.fail(f"restate-server exited ({self.proc.popen.returncode if self.proc.popen else '?'}):\n{self.proc.log_tail()}")
            return http("GET", f"{self.admin}/health", timeout_s=2)[0] == 200 and http("GET", f"{self.ingress}/restate/health", timeout_s=2)[0] == 200

        wait_until("restate-server", healthy, READY_S, self.proc.log)

    def register(self, service_url: str) -> None:
        status, answer = http("POST", f"{self.admin}/deployments", {"uri": service_url})
        assert status in (200, 201), f"registering {service_url}: {status} {answer}"

    def query(self, sql: str, timeout_s: float = READY_S) -> list[dict[str, Any]]:
        """Rows of Restate's SQL introspection. Right after a restart the partition's node may
        not be known yet (500 "node lookup for partition 0 failed"): asked again, bounded."""
        deadline = time.monotonic() + timeout_s
        while True:
            status, answer = http("POST", f"{self.admin}/query", {"query": sql})
            if status == 200:
                return list(answer["rows"])
            if time.monotonic() > deadline:
                pytest.fail(f"{sql}: {status} {answer}\n{self.proc.log_tail()}")
            time.sleep(0.2)

    def send(self, handler: str, body: Any, idempotency_key: Optional[str]) -> str:
        """Starts an invocation through the ingress; its id."""
        headers = {"idempotency-key": idempotency_key} if idempotency_key else {}
        status, answer = http("POST", f"{self.ingress}/{handler}/send", body, headers)
        assert status in (200, 202), f"ingress {handler}/send: {status} {answer}"
        return str(answer["invocationId"])


class Service:
    """The refund service (`idiomatic.mjs` or `careful.mjs`) on a loopback port of its own."""

    def __init__(self, app: str, tmp: Path, env: dict[str, str]) -> None:
        self.port = free_port()
        self.proc = Proc(app, [node_binary(), str(HERE / f"{app}.mjs")], {**os.environ, **env, "PORT": str(self.port)}, tmp / f"{app}.log")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.proc.start()

        def listening() -> bool:
            if not self.proc.alive():
                pytest.fail(f"the service exited:\n{self.proc.log_tail()}")
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True

        wait_until(f"the service on {self.port}", listening, READY_S, self.proc.log)


@dataclass
class Engine:
    server: RestateServer
    service: Service


@pytest.fixture
def engine_parts(tmp_path: Path) -> Iterator[list[Any]]:
    """Whatever the test starts, killed in this fixture's finally, also when the test fails."""
    parts: list[Any] = []
    try:
        yield parts
    finally:
        for part in reversed(parts):
            part.proc.kill()


def start_engine(parts: list[Any], tmp: Path, app: str, twice: Twice, scenario: Scenario) -> Engine:
    server = RestateServer(tmp)
    parts.append(server)
    server.start()
    settle_ms = (scenario.contracts.get("payments") or {}).get("settle_ms_max", 30_000)
    service = Service(
        app,
        tmp,
        {
            "PAYMENTS_URL": twice.url("payments"),
            "REQUEST_TIMEOUT_MS": str(int(scenario.request_timeout_s * 1000)),
            "SETTLE_MS": str(settle_ms),
        },
    )
    parts.append(service)
    service.start()
    server.register(service.url)
    return Engine(server, service)


# -- What Restate's record says ----------------------------------------------------------------


def wait_invocation(server: RestateServer, invocation_id: str, timeout_s: float) -> dict[str, Any]:
    """The invocation's `sys_invocation` row once completed, or as it is after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    sql = f"SELECT * FROM sys_invocation WHERE id = '{invocation_id}'"
    row: dict[str, Any] = {}
    while time.monotonic() < deadline:
        rows = server.query(sql)
        row = rows[0] if rows else {}
        if row.get("status") == COMPLETED:
            return row
        time.sleep(0.1)
    return row


def claim_of(app: str, server: RestateServer, intent: Any, invocation_id: str, row: dict[str, Any]) -> Claim:
    """What Restate's record says of the intent's invocation, as a claim.

    - completed with an output: `confirmed`, the refund id of the step's journaled reply;
    - completed with a failure (a TerminalError): the idiomatic app reads it as the refund's
      refusal, `failed`; the careful app, whose step may have landed in an earlier run,
      `escalated`, with the failure as evidence;
    - not completed in time (Restate still retrying): `unknown`.
    """
    # Restate counts an invocation's attempts while it runs (`retry_count`) and drops the
    # count once it completes; a completed invocation's claim leaves `attempts` out.
    attempts = int(row["retry_count"]) + 1 if row.get("retry_count") is not None else None
    evidence: dict[str, Any] = {"restate_invocation": invocation_id, "restate_status": row.get("status")}
    if row.get("status") != COMPLETED:
        evidence["last_failure"] = str(row.get("last_failure") or "")[:300]
        state = "unknown"
    elif row.get("completion_result") == "success":
        status, output = http("GET", f"{server.ingress}/restate/invocation/{invocation_id}/output")
        assert status == 200, f"output of {invocation_id}: {status} {output}"
        # The careful handler answers a refusal with the state it knows (`escalated`).
        state = str(output.get("state", "confirmed"))
        if output.get("refund_id"):
            evidence["external_id"] = output["refund_id"]
        for field in ("key", "decision"):
            if output.get(field):
                evidence[field] = output[field]
    else:
        evidence["last_error"] = str(row.get("completion_failure") or "")[:300]
        state = "failed" if app == "idiomatic" else "escalated"
    return Claim(id=intent.id, action=intent.action, state=state, attempts=attempts, params=dict(intent.params), evidence=evidence)


# -- The tests -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    scenario: str  # a catalog name, or a file in this folder
    family: str
    victim: Optional[str] = None  # what a `crash` step kills: "service" or "server"
    short: bool = False

    @property
    def source(self) -> Any:
        path = HERE / f"{self.scenario}.toml"
        return path if path.is_file() else self.scenario


CASES = [
    Case("crash_while_refund_in_flight", "worker-killed", victim="service", short=True),
    Case("lost_refund_reply", "lost-reply"),
    Case("restate_lost_partial_refund_reply", "lost-reply"),
    Case("restate_refund_commit_after_timeout", "late-commit"),
    Case("restate_refund_429", "rejected-429"),
    Case("silent_noop_refund", "silent-noop"),
    Case("payments_forget_keys", "key-forgotten"),
    Case("stale_read_back", "stale-read"),
    Case("restate_server_killed_mid_refund", "engine", victim="server"),
]


def params() -> list[Any]:
    out = []
    for case in CASES:
        for app in ("idiomatic", "careful"):
            marks = [pytest.mark.short] if case.short else []
            out.append(pytest.param(app, case, id=f"{app}-{case.scenario}", marks=marks))
    return out


@pytest.mark.parametrize(("app", "case"), params())
def test_restate(app: str, case: Case, twice_serve: Twice, engine_findings: Any, engine_parts: list[Any], tmp_path: Path) -> None:
    scenario = twice_serve.load_scenario(case.source)
    engine = start_engine(engine_parts, tmp_path, app, twice_serve, scenario)

    invocations = []
    for intent in scenario.intents:
        order = {"order_id": intent.id, **intent.params}
        # The careful caller names the invocation by the order: a resent request attaches to it.
        key = intent.id if app == "careful" else None
        invocations.append((intent, engine.server.send("Refunds/refund", order, key)))

    for step in scenario.steps:
        if step.by != "test":
            continue
        assert step.do == "crash" and case.victim in ("service", "server"), f"{case.scenario}: no way to do step {step}"
        twice_serve.wait_step(step.index, timeout_s=STEP_S)
        victim = engine.service if case.victim == "service" else engine.server
        victim.proc.kill()  # SIGKILL while payments holds the refund request
        victim.start()  # a new life on the same state (the server on its data directory)
        twice_serve.step_done(step.index)  # the held request goes on, to a dead socket

    rows = [wait_invocation(engine.server, inv, INVOCATION_S) for _, inv in invocations]
    # A refund held past the client's timeout commits up to the contract's settle bound after
    # it arrived: the check waits for it before it judges.
    claims = [claim_of(app, engine.server, intent, inv, row) for (intent, inv), row in zip(invocations, rows)]
    if os.environ.get("RESTATE_EXAMPLE_DEBUG"):
        print(json.dumps({"rows": rows, "claims": [c.to_json() for c in claims], "ledger": twice_serve.ledger("payments"), "journal": twice_serve.journal("payments")}, indent=1))
    engine_findings.judge(twice_serve, claims, app=app, scenario=case.scenario, family=case.family, versions=dict(versions()))
