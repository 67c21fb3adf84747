"""Receives the payments fake's webhooks and checks them with stripe-python's own helper.

usage: stripe_webhooks.py BASE_URL

Starts an endpoint on loopback (the standard library's HTTP server, answering 200), registers
it with client.v1.webhook_endpoints.create (every event type), makes one refund of pi_1, and
waits (at most 20 s) for its two events. Each delivery is checked with
stripe.Webhook.construct_event(body, Stripe-Signature, secret) as an app checks it, then again
as an attacker would send it: signed under a secret it guessed, with its body altered, and
re-signed with a timestamp ten minutes old (stripe-python's own generate_signature_header,
under the real secret). Lists, retrieves and deletes the endpoint through the SDK at the end.

Prints one JSON line: {"endpoint": {...}, "deliveries": [{"type", "id", "verified", "forged",
"altered", "stale", "amount_refunded"}], "listed", "retrieved_secret", "deleted"}.
"""

import hashlib
import hmac
import http.server
import json
import sys
import threading
import time

import stripe

from observe import emit, usage

WAIT_S = 20


class Endpoint(http.server.BaseHTTPRequestHandler):
    received = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode("utf-8")
        Endpoint.received.append((body, self.headers.get("Stripe-Signature")))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


def refused(body, header, secret):
    """The SDK's refusal of a delivery, or None if it accepted it."""
    try:
        stripe.Webhook.construct_event(body, header, secret)
        return None
    except stripe.SignatureVerificationError as e:
        return str(e.user_message or e)


def main(argv):
    if len(argv) != 2:
        usage(__doc__)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Endpoint)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/stripe/webhooks"

    client = stripe.StripeClient("sk_test_x", base_addresses={"api": argv[1]})
    endpoint = client.v1.webhook_endpoints.create(params={"url": url, "enabled_events": ["*"]})
    secret = endpoint.secret
    client.v1.refunds.create(params={"payment_intent": "pi_1", "amount": 700})
    deadline = time.monotonic() + WAIT_S
    while len(Endpoint.received) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)

    deliveries = []
    for body, header in Endpoint.received:
        event = stripe.Webhook.construct_event(body, header, secret)
        t = header.split(",")[0].split("=")[1]
        guessed = hmac.new(b"whsec_guessed", f"{t}.{body}".encode(), hashlib.sha256).hexdigest()
        stale = stripe.WebhookSignature.generate_signature_header(body, secret, timestamp=int(time.time()) - 600)
        deliveries.append({
            "type": event.type,
            "id": event.id,
            "verified": True,
            "forged": refused(body, f"t={t},v1={guessed}", secret),
            "altered": refused(body.replace('"livemode":false', '"livemode":true', 1), header, secret),
            "stale": refused(body, stale, secret),
            "amount_refunded": event.data.object.to_dict().get("amount_refunded"),
        })
    listed = [e.id for e in client.v1.webhook_endpoints.list().data]
    retrieved = client.v1.webhook_endpoints.retrieve(endpoint.id)
    deleted = client.v1.webhook_endpoints.delete(endpoint.id)
    server.shutdown()
    emit({
        "endpoint": {"id": endpoint.id, "secret_prefix": secret[:6], "status": endpoint.status},
        "deliveries": sorted(deliveries, key=lambda d: d["type"]),
        "listed": listed,
        "retrieved_secret": retrieved.to_dict().get("secret"),
        "deleted": deleted.deleted,
    })


if __name__ == "__main__":
    main(sys.argv)
