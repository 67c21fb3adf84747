"""The servers an engine's workers share within one twice case (a Redis broker, a Temporal dev
server): started once, by whichever worker needs one first, and stopped when the case's last
worker is gone.

twice kills a worker with everything it started (each process it spawns carries a marker in its
environment, which twice looks for), and twice SIGKILLs and restarts workers in mid-case, while
the broker or server they share must go on. So a server is started by a **keeper**: a small
process of its own session, without twice's marker, that starts the server, writes where it
listens (`<name>.json` in the case's state directory) and watches the workers that registered
there (`workers/<pid>`). When no registered worker has been alive for `GRACE_S` (a restart
takes well under it), when the state directory is gone, or after `LIFETIME_S` in all, it stops
the server and exits. A keeper that lost its parent is adopted by twice (a child subreaper),
which kills it at the end of the run whatever happens.

    url = shared_redis(state_dir)   # "redis://127.0.0.1:PORT/0", the same for every worker
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import socket
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

#: How long a keeper waits with no registered worker alive before it stops its server.
GRACE_S = 15.0
#: The longest a keeper keeps a server, whatever the workers do.
LIFETIME_S = 1800.0
#: The longest a server may take to answer once started.
READY_S_MAX = 60.0
#: twice's marker variable: not passed on to a keeper, so that killing a worker spares it.
MARKER_VARIABLE = "TWICE_EXECUTOR_PROCESS"
#: How a keeper is told what else to write beside its server's port (JSON).
INFO_VARIABLE = "TWICE_KEEPER_INFO"


class ServerError(Exception):
    """A shared server could not be started or did not answer in time."""


def register_worker(state_dir: Path) -> None:
    """Notes this worker process in `state_dir`, for the keepers to watch."""
    workers = state_dir / "workers"
    workers.mkdir(parents=True, exist_ok=True)
    (workers / str(os.getpid())).write_text(str(time.time()))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: Where the adapters note, machine-wide, the endpoint ports they reserved: a file per port
#: naming the state directory of the case that holds it.
PORTS_DIR = Path(tempfile.gettempdir()) / "twice-engine-ports"
#: How many ports below the kernel's ephemeral range the reservations are made from.
RESERVED_PORTS = 10_000


def reserved_range() -> tuple[int, int]:
    """Ports `[low, high)` that no `bind` to port 0 on this machine is given: just below the
    kernel's ephemeral range (Linux: `ip_local_port_range`; elsewhere 20000 to 30000, under
    the BSDs' 49152)."""
    try:
        ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 20_000, 30_000
    return max(1024, ephemeral_low - RESERVED_PORTS), ephemeral_low


def bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def reserved_port(owner: Path) -> int:
    """A loopback port for an app's endpoint that no other case is given while `owner` (this
    case's state directory) exists, even while nothing listens on it. A Restate server keeps
    calling the endpoint an invocation started on at its address, also while twice has killed
    that worker; a port the kernel handed to another case in that window (the other case's
    endpoint, say) would run this case's invocation against the other case's services. So the
    port comes from below the kernel's ephemeral range, and is noted in `PORTS_DIR`, under a
    lock, until its owner's directory is gone."""
    low, high = reserved_range()
    PORTS_DIR.mkdir(parents=True, exist_ok=True)
    with open(PORTS_DIR / "ports.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        # Where the search starts only spreads the cases out; any free port will do.
        start = random.randrange(low, high)
        for i in range(high - low):
            port = low + (start - low + i) % (high - low)
            claim = PORTS_DIR / str(port)
            try:
                holder = claim.read_text()
            except OSError:
                holder = ""
            if (holder and Path(holder).exists()) or not bindable(port):
                continue
            claim.write_text(str(owner.resolve()))
            return port
    raise ServerError(f"no free port left in {low}..{high} (reservations in {PORTS_DIR})")


def answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def shared_server(state_dir: Path, name: str, command: list[str], port: int, info: Optional[dict[str, object]] = None,
                  env: Optional[dict[str, str]] = None) -> dict[str, object]:  # fmt: skip
    """The server `name` of this case: the one a worker of it started (read from
    `<name>.json`), or a new one run from `command` listening on `port` by a keeper, with `env`
    added to its environment and `info` (other ports, say) written beside its port. Under a
    lock, so that two workers starting together get one server."""
    state_dir.mkdir(parents=True, exist_ok=True)
    register_worker(state_dir)
    with open(state_dir / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = _running(state_dir / f"{name}.json")
        if found is not None:
            return found
        keeper_env = {k: v for k, v in os.environ.items() if k != MARKER_VARIABLE}
        keeper_env.update(env or {})
        keeper_env[INFO_VARIABLE] = json.dumps(info or {})
        log = open(state_dir / f"{name}.log", "ab")
        subprocess.Popen(
            [sys.executable, "-m", "twice.engines.servers", str(state_dir), name, str(port), *command],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=keeper_env, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + READY_S_MAX
        while time.monotonic() < deadline:
            found = _running(state_dir / f"{name}.json")
            if found is not None:
                return found
            time.sleep(0.05)
        raise ServerError(f"{name} did not answer on 127.0.0.1:{port} within {READY_S_MAX:g} s; see {state_dir / (name + '.log')}")


def shared_redis(state_dir: Path) -> str:
    """A Redis of this case's workers (no persistence, loopback): its URL."""
    binary = os.environ.get("REDIS_SERVER") or shutil.which("redis-server")
    if binary is None:
        raise ServerError("redis-server is not on the PATH (Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis)")
    port = free_port()
    command = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    found = shared_server(state_dir, "redis", command, port)
    return f"redis://127.0.0.1:{found['port']}/0"


def _running(path: Path) -> Optional[dict[str, object]]:
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) and answers(int(found["port"])) else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is gone for our purpose
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _workers_alive(state_dir: Path) -> bool:
    try:
        pids = [int(p.name) for p in (state_dir / "workers").iterdir() if p.name.isdigit()]
    except OSError:
        return False
    return any(_alive(pid) for pid in pids)


def keep(state_dir: Path, name: str, port: int, command: list[str]) -> int:
    """The keeper: runs `command`, says where it listens once it answers, and stops it when no
    worker is left (see the module's doc)."""
    server = subprocess.Popen(command, stdin=subprocess.DEVNULL)
    started = time.monotonic()
    while not answers(port):
        if server.poll() is not None or time.monotonic() - started > READY_S_MAX:
            print(f"keeper: {name} exited or did not answer on port {port}", file=sys.stderr)
            server.kill()
            return 1
        time.sleep(0.05)
    tmp = state_dir / f"{name}.json.tmp"
    info = json.loads(os.environ.pop(INFO_VARIABLE, "{}") or "{}")
    tmp.write_text(json.dumps({**info, "port": port, "pid": server.pid, "keeper": os.getpid()}))
    os.replace(tmp, state_dir / f"{name}.json")
    last_seen = time.monotonic()
    while server.poll() is None:
        now = time.monotonic()
        if _workers_alive(state_dir):
            last_seen = now
        if not state_dir.exists() or now - last_seen > GRACE_S or now - started > LIFETIME_S:
            break
        time.sleep(0.5)
    stop(server)
    return 0


def stop(process: "subprocess.Popen[bytes]", grace_s: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after `grace_s`: a server stopped, bounded."""
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=grace_s)


if __name__ == "__main__":
    sys.exit(keep(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4:]))
