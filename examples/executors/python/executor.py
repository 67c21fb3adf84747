#!/usr/bin/env python3
"""A small executor for `twice`, in Python, on the real SDKs: the command the harness starts
for each worker process. What a worker runs is in worker.py (the requests' handling, on the
kit's loop `twice.protocol`, and the Executor), intent_log.py, services.py and actions.py.

Usage:

    executor.py [--bug NAME] [--actions ACTION,ACTION,...] [--single-worker]
                [--refusals {escalated,failed}] [--timing {announced,short,long}]

`--bug NAME` switches on one classic bug (bugs.py); `--actions` announces fewer actions in
`init_ok` (the harness then reports the others' intents as unsupported); `--single-worker`
runs without leases or fencing tokens, as an executor that is only ever one process would;
`--refusals failed` ends a write refused for a decision, where it certainly took no effect,
`failed` rather than `escalated` (the default): the other honest answer; `--timing` picks the
request timeout, margin, lease and pause within the announced limits (README.md).

This file is kept small on purpose. Python compiles the script it is started with every time,
and the harness starts a worker per scenario and again after every crash; a module's bytecode
can be cached. The executor's own modules keep theirs in a cache of their own
(PYTHONPYCACHEPREFIX when it is set), never in __pycache__ beside the sources, and write it
even where PYTHONDONTWRITEBYTECODE is set: compiling them took about 15 ms of CPU per start
(40 starts of `executor.py --help`, with and without). Only these imports are concerned, with
the standard modules they load first; the SDKs, imported later, keep their installed bytecode.
"""

import os
import sys

_DONT_WRITE_BYTECODE, _PYCACHE_PREFIX = sys.dont_write_bytecode, sys.pycache_prefix
sys.dont_write_bytecode = False
sys.pycache_prefix = _PYCACHE_PREFIX or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "twice-python-example"
)
import worker  # noqa: E402  (after the lines above, on purpose)

sys.dont_write_bytecode, sys.pycache_prefix = _DONT_WRITE_BYTECODE, _PYCACHE_PREFIX

if __name__ == "__main__":
    code = worker.main(sys.argv[1:])
    # os._exit: the pass's pool threads are idle; nothing is left to flush (every answer went
    # out already, and the log commits before each one).
    sys.stderr.flush()
    os._exit(code)
