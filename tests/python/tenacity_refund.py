"""A refund the naive way: `requests.post` wrapped in a tenacity retry, no idempotency key.

usage: tenacity_refund.py BASE_URL [PAYMENT_INTENT] [AMOUNT]

Retries any requests exception (connection errors and, through raise_for_status, error
statuses) up to 3 attempts, 50 ms apart: each attempt is a new request that the service
cannot tell from a new refund. Prints one JSON line: "ok", "attempts", "errors" (one line per
failed attempt) and, on success, "status", "headers" and "object" (the JSON body).
"""

import sys

import requests
from tenacity import retry, retry_if_exception_type, stop_after_attempt, wait_fixed

from observe import emit, headers_of, usage


def main(argv):
    if not 2 <= len(argv) <= 4:
        usage(__doc__)
    base_url = argv[1].rstrip("/")
    data = {"payment_intent": argv[2] if len(argv) > 2 else "pi_1"}
    if len(argv) > 3:
        data["amount"] = argv[3]
    errors = []

    @retry(
        stop=stop_after_attempt(3),
        wait=wait_fixed(0.05),
        retry=retry_if_exception_type(requests.exceptions.RequestException),
        reraise=True,
    )
    def refund():
        try:
            response = requests.post(
                base_url + "/v1/refunds",
                data=data,
                headers={"Authorization": "Bearer sk_test_x"},
                timeout=5,
            )
            response.raise_for_status()
            return response
        except requests.exceptions.RequestException as e:
            errors.append(f"{type(e).__name__}: {e}")
            raise

    try:
        response = refund()
    except requests.exceptions.RequestException as e:
        emit({"ok": False, "attempts": len(errors), "errors": errors, "error": type(e).__name__})
        return
    emit(
        {
            "ok": True,
            "attempts": len(errors) + 1,
            "errors": errors,
            "status": response.status_code,
            "headers": headers_of(response.headers),
            "object": response.json(),
        }
    )


if __name__ == "__main__":
    main(sys.argv)
