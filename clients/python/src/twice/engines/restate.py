"""Restate as a `twice/1` executor: `python -m twice.engines.restate --app twice-restate.json`.

A Restate app is a service endpoint in any language (the examples' is Node) behind a
`restate-server`; this adapter needs no Restate SDK of its own, only HTTP. The app is named by a
small JSON file beside it::

    {
      "command": ["node", "careful.mjs"],
      "port_env": "PORT",
      "env": {"PAYMENTS_URL": "{payments.url}", "SETTLE_MS": "{payments.contract.settle_ms_max|30000}"},
      "actions": {
        "payments.refund": {
          "handler": "Refunds/refund",
          "input": {"order_id": "{intent.id}", "payment_intent": "{params.payment_intent}", "amount": "{params.amount}"}
        }
      },
      "claim": {"external_id": "refund_id"},
      "raised": "escalated"
    }

`{...}` in `env` and `input` is filled from `init` (`SERVICE.url`, `SERVICE.contract.TERM`,
`limits.NAME`, `secrets.NAME`, `worker_id`) and from the intent (`intent.id`, `params.NAME`); `|default` is
used when the value is absent, and a string that is one placeholder keeps the value's type.

- Each twice worker is the adapter plus the app's endpoint (`command`, with `port_env` set to a
  loopback port kept per worker id, so that a restarted worker serves the invocations Restate
  pinned to its deployment, and reserved for the case, so that no other case's endpoint takes
  it while the worker is down: `servers.reserved_port`), in one process group: twice's SIGKILL and SIGSTOP reach both.
  The worker registers its endpoint with the server (`POST /deployments`, `force`).
- The server is a `restate-server` of the case (the app's `node_modules` has it, as
  `@restatedev/restate-server` installs it, or the PATH), started by the first worker, shared by
  every worker of the case and outliving their kills (`twice.engines.servers`).
- A job is an invocation sent through the ingress with `idempotency-key: <intent id>`: a second
  send attaches to the same invocation. Its id is noted in `restate-sent.sqlite`.
- The record is Restate's (`sys_invocation`, the invocation's output): completed with success
  is `succeeded`, with a failure (a `TerminalError`) `failed`; anything else `pending`, since
  Restate retries until it succeeds. An invocation belongs to Restate, not to a worker.
"""

from __future__ import annotations

import inspect
import json
import os
import platform
import re
import shutil
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from twice.engines import App, AppNotFound, Engine, Record, main, read_output
from twice.engines.servers import ServerError, free_port, reserved_port, shared_server
from twice.protocol import Init

#: How long the server and the app's endpoint may take to be ready.
READY_S_MAX = 60.0
#: One HTTP call's bound.
CALL_S_MAX = 10.0
PLACEHOLDER = re.compile(r"\{([a-z0-9_.]+)(?:\|([^}]*))?\}")


@dataclass
class Handler:
    """An action done by a Restate handler (`Service/handler`), its input a template."""

    handler: str
    input: Any
    params: list[str] = field(default_factory=list)

    @property
    def __signature__(self) -> inspect.Signature:
        kind = inspect.Parameter.KEYWORD_ONLY
        return inspect.Signature([inspect.Parameter(name, kind) for name in self.params])


@dataclass
class RestateApp(App):
    """An app of a mapping file: `spec` is the file's content, `folder` where it lies (the
    endpoint's command runs there)."""

    spec: dict[str, Any] = field(default_factory=dict)
    folder: Path = Path(".")


def fill(template: Any, values: dict[str, Any]) -> Any:
    """`template` with its placeholders filled from `values` (dotted names)."""
    if isinstance(template, dict):
        return {k: fill(v, values) for k, v in template.items()}
    if isinstance(template, list):
        return [fill(v, values) for v in template]
    if not isinstance(template, str):
        return template

    def value_of(match: re.Match[str]) -> Any:
        name, default = match.group(1), match.group(2)
        if name in values and values[name] is not None:
            return values[name]
        if default is None:
            raise KeyError(f"{{{name}}} has no value and no default")
        return default

    whole = PLACEHOLDER.fullmatch(template)
    if whole is not None:
        return value_of(whole)
    return PLACEHOLDER.sub(lambda m: str(value_of(m)), template)


def init_values(init: Init) -> dict[str, Any]:
    values: dict[str, Any] = {"worker_id": init.worker_id}
    for name, service in init.services.items():
        values[f"{name}.url"] = service.get("url")
        for term, value in (service.get("contract") or {}).items():
            values[f"{name}.contract.{term}"] = value
    for name, value in init.limits.items():
        values[f"limits.{name}"] = value
    for name, value in init.secrets.items():
        values[f"secrets.{name}"] = value  # e.g. the chain account's key, for the endpoint's env
    return values


def load_mapping(path: Path) -> RestateApp:
    """The app of a mapping file (see the module's doc), as an `App`."""
    try:
        spec = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: {e}") from e
    actions: dict[str, Any] = {}
    for action, handler in (spec.get("actions") or {}).items():
        names = sorted({m.group(1)[len("params."):] for m in PLACEHOLDER.finditer(json.dumps(handler.get("input")))
                        if m.group(1).startswith("params.")})  # fmt: skip
        actions[action] = Handler(str(handler["handler"]), handler.get("input"), names)
    renames: dict[str, str] = dict(spec.get("claim") or {})

    def claim(output: Any) -> dict[str, Any]:
        if isinstance(output, dict):
            output = {**output, **{ours: output.get(theirs) for ours, theirs in renames.items()}}
        return read_output(output)

    return RestateApp(actions=actions, read_output=claim, raised=str(spec.get("raised", "failed")), spec=spec,
                      folder=path.resolve().parent)  # fmt: skip


def http(method: str, url: str, body: Any = None, headers: Optional[dict[str, str]] = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers={"content-type": "application/json", "accept": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=CALL_S_MAX) as answer:
            text = answer.read()
            return answer.status, json.loads(text) if text else None
    except urllib.error.HTTPError as e:
        text = e.read()
        try:
            return e.code, json.loads(text)
        except ValueError:
            return e.code, text.decode(errors="replace")


def server_binary(app_dir: Path) -> str:
    system = {"Linux": "linux", "Darwin": "darwin"}.get(platform.system(), platform.system().lower())
    arch = {"x86_64": "x64", "AMD64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine(), platform.machine())
    for folder in [app_dir, *app_dir.parents]:
        found = folder / "node_modules" / "@restatedev" / f"restate-server-{system}-{arch}" / "bin" / "restate-server"
        if found.is_file():
            return str(found)
    on_path = shutil.which("restate-server")
    if on_path is None:
        raise ServerError(f"no restate-server in node_modules above {app_dir} nor on the PATH (npm install @restatedev/restate-server)")
    return on_path


def wait_for(what: str, ready: Callable[[], bool], timeout_s: float = READY_S_MAX) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            raise ServerError(f"{what} was not ready within {timeout_s:g} s")
        time.sleep(0.1)


def healthy(url: str) -> bool:
    try:
        return http("GET", url)[0] == 200
    except OSError:
        return False


class RestateEngine(Engine):
    name = "restate"

    def __init__(self) -> None:
        self.admin = self.ingress = ""
        self.endpoint: Optional[subprocess.Popen[bytes]] = None
        self.sent: Optional[sqlite3.Connection] = None

    def launch(self, init: Init, app: App, state_dir: Path) -> None:
        if not isinstance(app, RestateApp):
            raise TypeError("a Restate app comes from a mapping file (--app FILE.json)")
        spec, app_dir = app.spec, app.folder
        self.start_server(state_dir, app_dir)
        self.sent = sqlite3.connect(state_dir / "restate-sent.sqlite", check_same_thread=False, timeout=30, isolation_level=None)
        self.sent.execute("PRAGMA journal_mode=WAL")
        self.sent.execute("CREATE TABLE IF NOT EXISTS sent (intent_id TEXT PRIMARY KEY, invocation_id TEXT NOT NULL)")
        port = self.endpoint_port(state_dir, init.worker_id)
        env = {**os.environ, **{k: str(fill(v, init_values(init))) for k, v in (spec.get("env") or {}).items()},
               str(spec.get("port_env", "PORT")): str(port)}  # fmt: skip
        # The endpoint: in this process group (no new session), so that twice's signals reach it.
        self.endpoint = subprocess.Popen([str(a) for a in spec["command"]], cwd=app_dir, env=env, stdin=subprocess.DEVNULL)
        wait_for(f"the app's endpoint on port {port}", lambda: self.listening(port))
        status, answer = http("POST", f"{self.admin}/deployments", {"uri": f"http://127.0.0.1:{port}", "force": True})
        if status not in (200, 201):
            raise ServerError(f"registering the endpoint on port {port}: {status} {answer}")

    def start_server(self, state_dir: Path, app_dir: Path) -> None:
        ingress, admin, node = free_port(), free_port(), free_port()
        command = [
            server_binary(app_dir), "--base-dir", str(state_dir / "restate-data"), "--bind-ip", "127.0.0.1",
            "--bind-port", str(node), "--listen-mode", "tcp", "--default-num-partitions", "1", "--no-logo",
        ]  # fmt: skip
        env = {
            "RESTATE_INGRESS__BIND_ADDRESS": f"127.0.0.1:{ingress}",
            "RESTATE_ADMIN__BIND_ADDRESS": f"127.0.0.1:{admin}",
            "RESTATE_DISABLE_TELEMETRY": "true",
            "RESTATE_LOG_DISABLE_ANSI_CODES": "true",
        }
        found = shared_server(state_dir, "restate", command, admin, info={"ingress": ingress}, env=env)
        self.admin, self.ingress = f"http://127.0.0.1:{found['port']}", f"http://127.0.0.1:{found['ingress']}"
        wait_for("restate-server", lambda: healthy(f"{self.admin}/health") and healthy(f"{self.ingress}/restate/health"))

    def endpoint_port(self, state_dir: Path, worker_id: str) -> int:
        """The same port for every life of a worker: Restate keeps calling the deployment an
        invocation started on. Reserved for the case (`reserved_port`), so that no other case's
        endpoint takes it while this worker is down."""
        path = state_dir / f"restate-endpoint-{worker_id}.port"
        if path.exists():
            return int(path.read_text())
        port = reserved_port(state_dir)
        path.write_text(str(port))
        return port

    def listening(self, port: int) -> bool:
        if self.endpoint is not None and self.endpoint.poll() is not None:
            raise ServerError(f"the app's endpoint exited with {self.endpoint.returncode} (its output is on stderr)")
        import socket

        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            return False

    def start(self, intent_id: str, work: Callable[..., Any], params: dict[str, Any]) -> None:
        assert isinstance(work, Handler) and self.sent is not None
        values = {"intent.id": intent_id, **{f"params.{k}": v for k, v in params.items()}}
        status, answer = http("POST", f"{self.ingress}/{work.handler}/send", fill(work.input, values), {"idempotency-key": intent_id})
        if status not in (200, 202) or not isinstance(answer, dict) or "invocationId" not in answer:
            raise RuntimeError(f"ingress {work.handler}/send: {status} {answer}")
        self.sent.execute("INSERT OR IGNORE INTO sent (intent_id, invocation_id) VALUES (?, ?)", (intent_id, answer["invocationId"]))

    def query(self, sql: str) -> list[dict[str, Any]]:
        """Rows of Restate's SQL introspection; asked again (bounded) while the partition is
        not known yet."""
        deadline = time.monotonic() + CALL_S_MAX
        while True:
            status, answer = http("POST", f"{self.admin}/query", {"query": sql})
            if status == 200:
                return list(answer["rows"])
            if time.monotonic() > deadline:
                raise RuntimeError(f"{sql}: {status} {answer}")
            time.sleep(0.2)

    def records(self, ids: Sequence[str]) -> dict[str, Record]:
        assert self.sent is not None
        sent = {i: inv for i, inv in self.sent.execute("SELECT intent_id, invocation_id FROM sent") if i in set(ids)}
        if not sent:
            return {}
        listed = ", ".join(f"'{inv}'" for inv in sent.values())
        rows = {r["id"]: r for r in self.query(f"SELECT id, status, completion_result, completion_failure, modified_at FROM sys_invocation WHERE id IN ({listed})")}
        out: dict[str, Record] = {}
        for intent_id, invocation_id in sent.items():
            row = rows.get(invocation_id)
            status = str((row or {}).get("status") or "unknown")
            if row is None or status != "completed":
                out[intent_id] = Record("pending", engine_status=status)
            elif row.get("completion_result") == "success":
                code, output = http("GET", f"{self.ingress}/restate/invocation/{invocation_id}/output")
                if code != 200:
                    raise RuntimeError(f"the output of {invocation_id}: {code} {output}")
                out[intent_id] = Record("succeeded", output=output, engine_status=status)
            else:
                out[intent_id] = Record("failed", error=str(row.get("completion_failure") or "")[:300], engine_status=status)
        return out

    def pending(self, ids: Sequence[str], worker_id: str) -> tuple[int, int]:
        running = sum(1 for r in self.records(ids).values() if r.status == "pending")
        return running, running

    def close(self) -> None:
        if self.endpoint is not None and self.endpoint.poll() is None:
            self.endpoint.kill()


def load(spec: str) -> tuple[App, str]:
    """`--app FILE`: the mapping file (see the module's doc), not a Python module."""
    try:
        return load_mapping(Path(spec)), Path(spec).stem
    except (ValueError, KeyError, TypeError) as e:
        raise AppNotFound(f"--app {spec}: {e}") from e


if __name__ == "__main__":
    from twice.engines.restate import RestateEngine as _Engine
    from twice.engines.restate import load as _load

    main(_Engine(), sys.argv[1:], description=__doc__ or "", load=_load)
