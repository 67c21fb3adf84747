"""The pytest plugin (entry point `pytest11`, name `twice`): fixtures that start `twice serve`
and hand out a `twice.Twice` client of it.

- `twice_serve`: a serve of the test's own, started before it and stopped after it.
- `twice_serve_session`: one serve for the whole session; every test that uses it should set
  its world up with `load_scenario` (which resets every fake first) or `reset()`.

Options: `--twice-bin PATH` (else `$TWICE_BIN`, else `twice` on the PATH) and `--twice-seed N`
(the seed of every random choice the fakes make; 0 unless given), so a failing test replays
with the same ids and draws.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Optional

import pytest

from twice.client import Twice
from twice.serve import ServeProcess

__all__ = ["pytest_addoption", "twice_serve", "twice_serve_session"]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("twice", "twice serve (fake services, faults, verdicts)")
    group.addoption(
        "--twice-bin",
        default=None,
        metavar="PATH",
        help="the twice binary (default: $TWICE_BIN, else `twice` on the PATH)",
    )
    group.addoption(
        "--twice-seed",
        type=int,
        default=0,
        metavar="N",
        help="seed of the fakes' random choices (ids, fault probabilities); default 0",
    )


def _serve(config: pytest.Config, tmp_dir: Optional[str]) -> ServeProcess:
    return ServeProcess(
        binary=config.getoption("twice_bin"),
        seed=config.getoption("twice_seed"),
        workdir=tmp_dir,
    )


@pytest.fixture
def twice_serve(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Twice]:
    """A `twice serve` of this test's own: a `twice.Twice` client of it, stopped (SIGTERM,
    then SIGKILL) after the test. Its URLs file and log stay in pytest's temporary directory."""
    workdir = tmp_path_factory.mktemp("twice-serve")
    serve = _serve(request.config, str(workdir))
    client = serve.start()
    try:
        yield client
    finally:
        serve.stop()


@pytest.fixture(scope="session")
def twice_serve_session(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Twice]:
    """One `twice serve` for the session: cheaper than a serve per test when there are many.
    Tests share its fakes, so each should begin with `load_scenario(...)` or `reset()`."""
    workdir = tmp_path_factory.mktemp("twice-serve-session")
    serve = _serve(request.config, str(workdir))
    client = serve.start()
    try:
        yield client
    finally:
        serve.stop()
