"""Drives the payments fake with the real stripe-python SDK (16.1.0, StripeClient API).

usage: stripe_refunds.py BASE_URL STEP [STEP ...]

Each STEP is one argument, an operation and its `name=value` parameters:

  create [payment_intent=pi_1|last] [amount=N] [key=IDEMPOTENCY_KEY] [metadata=K:V,K2:V2]
      client.v1.refunds.create; without `key` the SDK makes its own key. `last` is the last
      PaymentIntent a `pi_create` step made. `metadata` is passed as the SDK's `metadata=`
      dict (sent as `metadata[K]=V`).
  pi_create amount=N [currency=usd] [confirm=true] [payment_method=pm_card_visa] [key=K]
      client.v1.payment_intents.create.
  pi_retrieve [id=pi_...]
  pi_confirm [id=pi_...] [payment_method=pm_...]
  pi_cancel [id=pi_...] [cancellation_reason=...]
      client.v1.payment_intents.retrieve / confirm / cancel; the id defaults to the last
      PaymentIntent a `pi_create` step made.
  list [payment_intent=pi_1]
      client.v1.refunds.list.
  pi_list [limit=N] [ending_before=pi_...]
      client.v1.payment_intents.list(...).auto_paging_iter(), every page: the step is the
      first page, with "ids", the ids in the order the SDK yielded them.
  retrieve [id=re_...]
      client.v1.refunds.retrieve; the id defaults to the last refund created.
  events [type=charge.refunded] [limit=N]
      client.v1.events.list(...).auto_paging_iter(), every page, then client.v1.events.retrieve
      of the newest: the step is that event, with "types", the types in the order yielded.
  jump by_ms=N
      POST BASE_URL/__twice/clock/jump (the fake's control API), not the SDK.
  seed_key key=rk_... permissions=rak_refund_read[,rak_...]
      POST BASE_URL/__twice/seed: makes `key` a restricted key with these permissions.
  use_key key=...
      The steps after it use a client with this API key.

The client is StripeClient("sk_test_x", base_addresses={"api": BASE_URL},
max_network_retries=2), until a `use_key` step. Prints one JSON line: {"steps": [...]}, one entry per STEP with
"ok", "status", "headers" (relevant response headers, lowercased), and either "class" and
"object" (the SDK object's class name and data) or "error" (the exception's class, message,
type and code).
"""

import json
import sys
import urllib.request

import stripe

from observe import emit, headers_of, usage


def params_of(words):
    params = {}
    for word in words:
        name, sep, value = word.partition("=")
        if not sep or not name:
            usage(f"expected name=value, got {word!r}\n\n{__doc__}")
        params[name] = value
    return params


def pairs(text):
    """`K:V,K2:V2` as a dict."""
    return dict(item.split(":", 1) for item in text.split(",") if item)


def success(op, obj):
    response = obj.last_response
    return {
        "op": op,
        "ok": True,
        "status": response.code if response is not None else None,
        "headers": headers_of(response.headers if response is not None else None),
        "class": type(obj).__name__,
        "object": obj.to_dict(recursive=True, for_json=True),
    }


def failure(op, e):
    error = e.error
    return {
        "op": op,
        "ok": False,
        "status": e.http_status,
        "headers": headers_of(e.headers),
        "error": {
            "class": type(e).__name__,
            "message": e.user_message,
            "type": getattr(error, "type", None) if error is not None else None,
            "code": e.code,
            "param": getattr(error, "param", None) if error is not None else None,
        },
    }


def main(argv):
    if len(argv) < 3:
        usage(__doc__)
    base_url = argv[1].rstrip("/")

    def client_for(api_key):
        return stripe.StripeClient(api_key, base_addresses={"api": base_url}, max_network_retries=2)

    client = client_for("sk_test_x")
    steps = []
    last_refund = None
    last_intent = None

    def intent_id(params):
        intent = params.pop("id", last_intent)
        if intent is None:
            usage("this step needs id=... or an earlier successful pi_create")
        return intent

    for step in argv[2:]:
        words = step.split()
        if not words:
            usage(f"empty step\n\n{__doc__}")
        op, params = words[0], params_of(words[1:])
        try:
            if op == "create":
                create = {"payment_intent": params.pop("payment_intent", "pi_1")}
                if create["payment_intent"] == "last":
                    create["payment_intent"] = last_intent
                if "amount" in params:
                    create["amount"] = int(params.pop("amount"))
                if "metadata" in params:
                    create["metadata"] = pairs(params.pop("metadata"))
                options = {}
                if "key" in params:
                    options["idempotency_key"] = params.pop("key")
                refund = client.v1.refunds.create(params=create, options=options)
                last_refund = refund.id
                steps.append(success(op, refund))
            elif op == "pi_create":
                create = {"amount": int(params.pop("amount")), "currency": params.pop("currency", "usd")}
                if "confirm" in params:
                    create["confirm"] = params.pop("confirm") == "true"
                if "payment_method" in params:
                    create["payment_method"] = params.pop("payment_method")
                options = {}
                if "key" in params:
                    options["idempotency_key"] = params.pop("key")
                intent = client.v1.payment_intents.create(params=create, options=options)
                last_intent = intent.id
                steps.append(success(op, intent))
            elif op == "pi_retrieve":
                steps.append(success(op, client.v1.payment_intents.retrieve(intent_id(params))))
            elif op == "pi_confirm":
                intent = intent_id(params)
                confirm = {}
                if "payment_method" in params:
                    confirm["payment_method"] = params.pop("payment_method")
                steps.append(success(op, client.v1.payment_intents.confirm(intent, params=confirm)))
            elif op == "pi_cancel":
                intent = intent_id(params)
                cancel = {}
                if "cancellation_reason" in params:
                    cancel["cancellation_reason"] = params.pop("cancellation_reason")
                steps.append(success(op, client.v1.payment_intents.cancel(intent, params=cancel)))
            elif op == "list":
                listing = client.v1.refunds.list(params={"payment_intent": params.pop("payment_intent", "pi_1")})
                steps.append(success(op, listing))
            elif op == "pi_list":
                listing = {"limit": int(params.pop("limit", "10"))}
                if "ending_before" in params:
                    listing["ending_before"] = params.pop("ending_before")
                first = client.v1.payment_intents.list(params=listing)
                ids = [intent.id for intent in first.auto_paging_iter()]
                steps.append({**success(op, first), "ids": ids})
            elif op == "events":
                listing = {"limit": int(params.pop("limit", "10"))}
                if "type" in params:
                    listing["type"] = params.pop("type")
                kinds = [event.type for event in client.v1.events.list(params=listing).auto_paging_iter()]
                newest = client.v1.events.list(params={"limit": 1}).data[0]
                steps.append({**success(op, client.v1.events.retrieve(newest.id)), "types": kinds})
            elif op == "retrieve":
                refund_id = params.pop("id", last_refund)
                if refund_id is None:
                    usage("retrieve needs id=... or an earlier successful create")
                steps.append(success(op, client.v1.refunds.retrieve(refund_id)))
            elif op in ("jump", "seed_key"):
                if op == "jump":
                    path, body = "/__twice/clock/jump", {"by_ms": int(params.pop("by_ms"))}
                else:
                    key = {"key": params.pop("key"), "permissions": params.pop("permissions").split(",")}
                    path, body = "/__twice/seed", {"restricted_keys": [key]}
                request = urllib.request.Request(
                    base_url + path,
                    data=json.dumps(body).encode(),
                    headers={"Content-Type": "application/json"},
                    method="POST",
                )
                with urllib.request.urlopen(request, timeout=10) as response:
                    steps.append({"op": op, "ok": True, "status": response.status, "object": json.load(response)})
            elif op == "use_key":
                client = client_for(params.pop("key"))
                steps.append({"op": op, "ok": True})
            else:
                usage(f"unknown operation {op!r}\n\n{__doc__}")
        except stripe.StripeError as e:
            steps.append(failure(op, e))
        if params:
            usage(f"unknown parameters for {op}: {sorted(params)}")
    emit({"steps": steps})


if __name__ == "__main__":
    main(sys.argv)
