"""The classic bugs, one switch each, for the conformance kit.

`executor.py --bug NAME` turns on exactly one of them; without `--bug` the executor is
correct. Each bug is one `if bugs.BUG == "NAME":` in the code, at the place where the wrong
belief acts, so `grep -n 'bugs.BUG ==' *.py` lists every difference from the correct
executor. The README says which catalog scenario catches each one, and with which invariant.
"""

# The bug that is switched on (set once at start-up by worker.main), or None.
BUG = None

# `--single-worker` (not a bug): the executor runs as the only worker, so it takes no leases
# and sends no fencing token. Correct where it is the only worker; where a second worker
# takes over from a stopped one, the stale-worker scenarios show what that costs.
SINGLE_WORKER = False

# `--refusals` (not a bug): how an intent ends when a refusal that needs a decision (400, 401,
# 403, 422) certainly left it without effect. "escalated": to a person, could_duplicate false;
# "failed": no effect exists and none can appear, for it is never sent again. Both are honest
# (docs/protocol.md §7); the harness's verdicts must hold for either.
REFUSALS = "escalated"

# `--timing` (not a bug): the timing choices the executor makes for itself within the limits
# it is told (docs/accuracy.md's grid). "announced": the announced request timeout, lease and
# pass pause, and a margin of 100 ms. "short": a request timeout of at most 200 ms, a 25 ms
# margin, half the lease (never less than two request timeouts and the margin) and a 1 ms
# pause. "long": the announced limits, a 500 ms margin and a 200 ms pause. A verdict must hold
# for each, and each bug must be caught at each.
TIMING = "announced"

# Every bug, with the wrong belief it stands for.
BUGS = {
    "naive-retry": "any error is retried at once (tenacity), without the intent's idempotency key",
    "key-per-attempt": "every attempt gets a new idempotency key",
    "memory-only": "intents live in memory only: a crash forgets them",
    "timeout-as-failure": 'a timeout means "it did not happen": failed',
    "trust-200": "a success is believed without a read-back, even where acks may lie",
    "trust-202": "an email the API accepted is taken as delivered: the recipient's inbox is never read",
    "re-sign-after-timeout": "after an uncertain broadcast, the transfer is signed again with the next nonce",
    "resend-after-key-expiry": "the key is believed to protect for ever: resent without a lookup",
    "replacement-while-unknown": "a replacement runs while the intent it replaces is unknown",
    "no-fencing": "no fencing token on creates and no precondition on puts",
    "constant-fencing-token": "a constant Fencing-Token: 1 and If-Match: * keep a stale worker out, so leases and row versions are not needed",
    "redo-workflow": "after a restart, an unfinished workflow runs again from its start: done steps sent again",
    "re-resolve": "a step's references are read from the services at every send, not from its own record",
    "retry-403": "a refusal that needs a decision (401, 403, 400, 422) is a bad moment, retried like a 429",
    "webhook-no-dedupe": "every delivery is new work: its event id is never looked for, and each delivery starts its intents afresh, under a new key, even where they exist",
    "webhook-ack-first": "a delivery is answered 200 at once; the event is kept in memory for the pass to act on",
    "webhook-trusts-body": "an event's body is believed: no signature check, and its copy of the payment's status is the payment's",
}
