"""What both apps read from the environment the test (or your deployment) gives the worker.

Both Celery apps are ordinary modules that `celery -A celery_idiomatic worker` (or
`celery_careful`) imports; the test starts each worker with these variables set:

- `CELERY_BROKER_URL`: the Redis the test started (`redis://127.0.0.1:PORT/0`); it is the
  result backend too.
- `TWICE_PAYMENTS_URL`: where stripe-python sends its requests (`stripe.api_base`): twice's
  payments fake.
- `TWICE_REQUEST_TIMEOUT_S`: the HTTP timeout of each Stripe request (the scenario's
  `request_timeout_ms`; stripe-python's own default is 80 s).
- `TWICE_VISIBILITY_TIMEOUT_S`: kombu's Redis `visibility_timeout` (Celery's default: 3600 s).
  The tests that kill or pause a worker shorten it, so a message the dead worker held comes
  back in seconds instead of an hour.
- `TWICE_SETTLE_MS`, `TWICE_READ_LAG_MS` (the careful app only): how long a write may take to
  land and a read may trail it, from the payments contract: the time after which "not
  there" is final.
"""

from __future__ import annotations

import os
from typing import Any

BROKER_URL = os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0")
PAYMENTS_URL = os.environ.get("TWICE_PAYMENTS_URL", "http://127.0.0.1:4242")
REQUEST_TIMEOUT_S = float(os.environ.get("TWICE_REQUEST_TIMEOUT_S", "2.0"))
VISIBILITY_TIMEOUT_S = float(os.environ.get("TWICE_VISIBILITY_TIMEOUT_S", "3600"))
SETTLE_MS = int(os.environ.get("TWICE_SETTLE_MS", "30000"))
READ_LAG_MS = int(os.environ.get("TWICE_READ_LAG_MS", "0"))
#: The fake accepts any API key, as long as there is one.
STRIPE_API_KEY = "sk_test_twice"


def from_twice(init: Any) -> None:
    """Under twice/1 (`python -m twice.engines.celery`): the same settings from the worker's
    `init` instead of the environment. kombu's visibility timeout is Celery's lease on a
    message a worker took: the scenario's `lease_ms`."""
    global PAYMENTS_URL, REQUEST_TIMEOUT_S, VISIBILITY_TIMEOUT_S, SETTLE_MS, READ_LAG_MS
    PAYMENTS_URL = init.url("payments") or PAYMENTS_URL
    REQUEST_TIMEOUT_S = int(init.limits.get("request_timeout_ms", 2000)) / 1000.0
    VISIBILITY_TIMEOUT_S = max(int(init.limits.get("lease_ms", 3000)) / 1000.0, 1.0)
    contract = init.contract("payments")
    SETTLE_MS = int(contract.get("settle_ms_max", 30000))
    READ_LAG_MS = int(contract.get("read_lag_ms_max", 0))


def configure_app(app: Any) -> None:
    """Points stripe-python and the Celery app's transport at the settings as they are now."""
    import stripe

    stripe.api_key = STRIPE_API_KEY
    stripe.api_base = PAYMENTS_URL
    stripe.default_http_client = stripe.RequestsClient(timeout=REQUEST_TIMEOUT_S)
    app.conf.update(
        broker_transport_options=broker_transport_options(),
        result_backend_transport_options=broker_transport_options(),
    )


def broker_transport_options() -> dict[str, float]:
    """kombu's Redis transport options: the visibility timeout, and the sweep that gives
    unacknowledged messages back once it is over, made to run every second (the defaults,
    `unacked_restore_interval` 10 s times `unacked_restore_throttle` 10, sweep every 100 s)."""
    options: dict[str, float] = {"visibility_timeout": VISIBILITY_TIMEOUT_S}
    if VISIBILITY_TIMEOUT_S < 3600:
        options.update(unacked_restore_interval=1, unacked_restore_throttle=1)
    return options
