"""`twice serve` as a child process: found, started, waited for, and stopped.

Serve writes its URLs file whole and renames it into place once every listener is up
(`docs/byo.md`), so the file appearing is the signal that serve is ready; until then the
process is watched, and if it dies its own output is what the error shows.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sysconfig
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Optional, Union

from twice.client import Twice, TwiceError

__all__ = [
    "START_TIMEOUT_S_DEFAULT",
    "STOP_TIMEOUT_S_DEFAULT",
    "ServeProcess",
    "ServeStartError",
    "bundled_twice",
    "find_twice",
]

#: How long serve may take to write its URLs file (it is ready in well under a second).
START_TIMEOUT_S_DEFAULT = 20.0
#: How long serve has to exit after SIGTERM before it gets SIGKILL, and again after that.
STOP_TIMEOUT_S_DEFAULT = 5.0
#: How often the URLs file is looked for.
_POLL_S = 0.02
#: How much of serve's output an error shows.
_LOG_TAIL_BYTES = 4000


class ServeStartError(TwiceError):
    """`twice serve` could not be found, started, or did not become ready in time."""


def find_twice(explicit: Optional[str] = None) -> str:
    """The `twice` binary: `explicit` if given, else `$TWICE_BIN`, else `twice` on the PATH,
    else the one installed with this package (the wheel carries it as a script)."""
    for source, candidate in (("the --twice-bin option", explicit), ("TWICE_BIN", os.environ.get("TWICE_BIN"))):
        if candidate:
            if not (os.path.isfile(candidate) and os.access(candidate, os.X_OK)):
                raise ServeStartError(f"{source} names {candidate!r}, which is not an executable file")
            return candidate
    found = shutil.which("twice") or bundled_twice()
    if found is None:
        raise ServeStartError(
            "cannot find the twice binary: no --twice-bin option, TWICE_BIN is not set, `twice` is "
            "not on the PATH, and this twice-kit was installed without one (its wheel for this "
            "platform carries it: `pip install twice-kit`). Set TWICE_BIN to its path (after "
            "`cargo build --bins`: target/debug/twice) or put the directory holding `twice` on the PATH."
        )
    return found


def bundled_twice(name: str = "twice") -> Optional[str]:
    """The binary `name` (`twice` or `twice-executor`) that a twice-kit wheel installed beside
    its Python code: in the scripts directory of this interpreter's environment (a venv's
    `bin/`), or of the user's (`pip install --user`). None when it is in neither."""
    exe = f"{name}.exe" if os.name == "nt" else name
    directories = [sysconfig.get_path("scripts")]
    user_scheme = f"{os.name}_user"
    if user_scheme in sysconfig.get_scheme_names():
        directories.append(sysconfig.get_path("scripts", user_scheme))
    for directory in directories:
        candidate = os.path.join(directory, exe)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


class ServeProcess:
    """One `twice serve` child process with its URLs file and log in a directory of its own.

    Use `start()` (or a `with` block), `client` for the `Twice` client of its URLs, and
    `stop()`: SIGTERM, then SIGKILL if it has not exited within `stop_timeout_s`.
    """

    def __init__(
        self,
        *,
        binary: Optional[str] = None,
        seed: int = 0,
        scenario: Optional[str] = None,
        extra_args: tuple[str, ...] = (),
        workdir: Optional[Union[str, os.PathLike[str]]] = None,
        start_timeout_s: float = START_TIMEOUT_S_DEFAULT,
        stop_timeout_s: float = STOP_TIMEOUT_S_DEFAULT,
    ) -> None:
        self.binary = find_twice(binary)
        self.seed = seed
        self.scenario = scenario
        self.extra_args = extra_args
        self._own_workdir = workdir is None
        self.workdir = Path(tempfile.mkdtemp(prefix="twice-serve-") if workdir is None else workdir)
        self.urls_file = self.workdir / "urls.json"
        self.log_file = self.workdir / "serve.log"
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self._process: Optional[subprocess.Popen[bytes]] = None
        self._client: Optional[Twice] = None

    @property
    def command(self) -> list[str]:
        """The command line serve is started with."""
        command = [self.binary, "serve", "--urls-file", str(self.urls_file), "--seed", str(self.seed)]
        if self.scenario is not None:
            command += ["--scenario", self.scenario]
        return command + list(self.extra_args)

    @property
    def pid(self) -> Optional[int]:
        return None if self._process is None else self._process.pid

    @property
    def client(self) -> Twice:
        """The client of this serve's URLs; only once started."""
        if self._client is None:
            raise TwiceError("serve is not started: call start() first")
        return self._client

    def start(self) -> Twice:
        """Starts serve and waits, at most `start_timeout_s`, for its URLs file."""
        if self._process is not None:
            return self.client
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.urls_file.exists():
            self.urls_file.unlink()
        # Output goes to a file, not a pipe: a pipe nobody reads fills up and blocks serve.
        with open(self.log_file, "wb") as log:
            try:
                self._process = subprocess.Popen(
                    self.command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
                )
            except OSError as e:
                raise ServeStartError(f"cannot start {' '.join(self.command)}: {e}") from None
        deadline = time.monotonic() + self.start_timeout_s
        while not self.urls_file.exists():
            code = self._process.poll()
            if code is not None:
                tail = self.log_tail()
                self._process = None
                self._cleanup()
                raise ServeStartError(f"twice serve exited with {code} before writing its URLs file:\n{tail}")
            if time.monotonic() > deadline:
                tail = self.log_tail()
                self.stop()
                raise ServeStartError(
                    f"twice serve did not write its URLs file within {self.start_timeout_s:g} s; "
                    f"it was stopped. Its output:\n{tail}"
                )
            time.sleep(_POLL_S)
        self._client = Twice.from_urls_file(self.urls_file)
        self._client.serve = self
        return self._client

    def stop(self) -> Optional[int]:
        """Stops serve: SIGTERM, then SIGKILL after `stop_timeout_s`. Returns its exit code
        (None if it was not running). Idempotent."""
        process, self._process = self._process, None
        self._client = None
        if process is None:
            return None
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                try:
                    process.wait(timeout=self.stop_timeout_s)
                except subprocess.TimeoutExpired:
                    raise TwiceError(
                        f"twice serve (pid {process.pid}) did not exit within {self.stop_timeout_s:g} s "
                        "of SIGKILL"
                    ) from None
        self._cleanup()
        return process.returncode

    def _cleanup(self) -> None:
        # Only a directory this object made is removed; a caller's is left as it is.
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def log_tail(self) -> str:
        """The end of serve's output (stdout and stderr), for error messages."""
        try:
            data = self.log_file.read_bytes()
        except OSError:
            return "(no output)"
        text = data[-_LOG_TAIL_BYTES:].decode("utf-8", "replace").rstrip()
        return text or "(no output)"

    def __enter__(self) -> Twice:
        return self.start()

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.stop()
