"""Drives the messages fake with the real resend SDK (2.51.0), and reads its test mailbox.

usage: messages_resend.py BASE_URL STEP [STEP ...]

Each STEP is one argument, an operation and its `name=value` parameters:

  send [to=ada@example.com] [subject=S] [text=T] [from=F] [key=IDEMPOTENCY_KEY]
       [api_key=re_...] [without=FIELD] [headers=NAME:VALUE,...] [tags=NAME:VALUE,...]
      resend.Emails.send; without `key` no Idempotency-Key is sent. `without=subject` leaves
      that field out of the request. `headers` is the SDK's `headers` dict, `tags` its list
      of {"name", "value"}.
  get [id=UUID|last]
      resend.Emails.get; the id defaults to the last email a `send` step was answered.
  inbox [address=ada@example.com]
      GET BASE_URL/mailboxes/ADDRESS/messages (twice's test mailbox, not the SDK).

resend.api_url is BASE_URL, resend.api_key `re_test_x` unless a step says otherwise, and the
SDK's HTTP client times out after 10 s. Prints one JSON line: {"steps": [...]}, one entry per
STEP with "ok" and either "object" (the SDK's answer, without its http_headers, which go to
"headers", lowercased) or "error" (the exception's class, code, error_type and message).
"""

import json
import sys
import urllib.request

import resend
from resend.http_client_requests import RequestsClient

from observe import emit, usage

# Response headers a test may assert on, lowercased.
HEADERS = ("idempotent-replayed", "idempotency-key", "retry-after")


def params_of(words):
    params = {}
    for word in words:
        name, sep, value = word.partition("=")
        if not sep or not name:
            usage(f"expected name=value, got {word!r}\n\n{__doc__}")
        params[name] = value
    return params


def pairs(text):
    """`K:V,K2:V2` as a dict, in order."""
    return dict(item.split(":", 1) for item in text.split(",") if item)


def answer(op, obj):
    data = dict(obj)
    headers = {str(k).lower(): str(v) for k, v in (data.pop("http_headers", None) or {}).items()}
    return {"op": op, "ok": True, "object": data, "headers": {k: headers[k] for k in HEADERS if k in headers}}


def failure(op, e):
    headers = {str(k).lower(): str(v) for k, v in (getattr(e, "headers", None) or {}).items()}
    return {
        "op": op,
        "ok": False,
        "error": {
            "class": type(e).__name__,
            "code": str(getattr(e, "code", "")),
            "error_type": getattr(e, "error_type", None),
            "message": getattr(e, "message", str(e)),
        },
        "headers": {k: headers[k] for k in HEADERS if k in headers},
    }


def main(argv):
    if len(argv) < 3:
        usage(__doc__)
    base = argv[1].rstrip("/")
    resend.api_url = base
    resend.default_http_client = RequestsClient(timeout=10)
    last_id = None
    steps = []
    for step in argv[2:]:
        op, *words = step.split()
        params = params_of(words)
        resend.api_key = params.get("api_key", "re_test_x")
        try:
            if op == "send":
                email = {
                    "from": params.get("from", "Acme <billing@acme.example>"),
                    "to": params.get("to", "ada@example.com"),
                    "subject": params.get("subject", "Invoice 42"),
                    "text": params.get("text", "Your invoice."),
                }
                if "headers" in params:
                    email["headers"] = pairs(params["headers"])
                if "tags" in params:
                    email["tags"] = [{"name": k, "value": v} for k, v in pairs(params["tags"]).items()]
                email.pop(params.get("without", ""), None)
                options = {"idempotency_key": params["key"]} if "key" in params else None
                sent = resend.Emails.send(email, options)
                last_id = sent["id"]
                steps.append(answer(op, sent))
            elif op == "get":
                email_id = params.get("id", "last")
                steps.append(answer(op, resend.Emails.get(last_id if email_id == "last" else email_id)))
            elif op == "inbox":
                address = params.get("address", "ada@example.com")
                with urllib.request.urlopen(f"{base}/mailboxes/{address}/messages", timeout=10) as response:
                    steps.append({"op": op, "ok": True, "object": json.loads(response.read())})
            else:
                usage(f"unknown step {op!r}\n\n{__doc__}")
        except resend.exceptions.ResendError as e:
            steps.append(failure(op, e))
    emit({"steps": steps})


if __name__ == "__main__":
    main(sys.argv)
