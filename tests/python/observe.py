"""What a client observed, as one JSON line: shared by the scripts in this directory.

A script prints exactly one line on stdout and exits 0 when it ran to the end, whatever the
service did; a nonzero exit means the script itself broke (bad arguments, a bug, an
exception that is not the client's answer).
"""

import json
import sys

# Headers a test may assert on; names lowercased.
HEADERS = ("idempotent-replayed", "idempotency-key", "request-id", "stripe-should-retry")


def headers_of(headers):
    """The relevant response headers, lowercased, from any mapping (or None)."""
    if not headers:
        return {}
    lowered = {str(k).lower(): str(v) for k, v in dict(headers).items()}
    return {k: lowered[k] for k in HEADERS if k in lowered}


def emit(value):
    sys.stdout.write(json.dumps(value, sort_keys=True) + "\n")
    sys.stdout.flush()


def usage(text):
    sys.stderr.write(text.strip() + "\n")
    sys.exit(2)
