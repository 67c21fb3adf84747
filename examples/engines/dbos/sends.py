"""The tests' count of sends: one line per refund request a step is about to send, appended
(and flushed to the OS) before the request leaves, so a send made by a worker that is then
SIGKILLed is counted too. It is evidence for the claims' `attempts`, not something either app
relies on: DBOS's record has each step's final output or error, not how many times it ran.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Optional

#: Where the worker appends; set by worker.py from its command line.
PATH: Optional[Path] = None


def count(workflow_id: Optional[str]) -> None:
    if PATH is None or workflow_id is None:
        return
    line = json.dumps({"workflow_id": workflow_id, "pid": os.getpid()}) + "\n"
    fd = os.open(PATH, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def read(path: Path) -> Counter[str]:
    """Sends per workflow id, over every worker life."""
    if not path.exists():
        return Counter()
    return Counter(json.loads(line)["workflow_id"] for line in path.read_text().splitlines() if line.strip())


def count_of(workflow_id: str) -> int:
    """Sends of one workflow so far, over every worker life (0 before `PATH` is set)."""
    return read(PATH)[workflow_id] if PATH is not None else 0
