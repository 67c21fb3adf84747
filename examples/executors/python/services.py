"""How each action talks to its service, through the real SDKs: the write, what its answer
means, and the lookup that asks the service what really happened.

- payments.refund, with stripe-python: guarded by the idempotency key; looked up among the
  refunds of the payment intent, by the intent id in metadata[twice_intent].
- workspaces.create, with plain requests: guarded by the idempotency key and, where offered,
  the fencing token; looked up by external id.
- files.put, with boto3: guarded by If-None-Match / If-Match of the version read before the
  first send (S3 has no idempotency key); looked up with HEAD (our ETag is the quoted MD5 of
  the body).
- chain.transfer, with web3.py and eth-account: guarded by the nonce of bytes signed once;
  looked up by the receipt of their hash, then the account's nonce.
- messages.send, with the resend SDK: guarded by the idempotency key; a 200 only says the
  API accepted the message, so it is always read back, and looked up, in the recipient's
  inbox (the messages service's test mailbox), by the intent id in the X-Twice-Intent header.

Heavy SDKs are imported when an action first needs them (web3 takes over a second), so a
worker that only refunds starts fast; stripe and web3 through light_imports.py, which keeps
them from loading what this executor never uses (aiohttp for stripe, py_ecc's BLS code).

Every answer becomes an `Outcome`; the one rule that matters most: **a timeout is never a
"no"**. Only what proves that nothing left the process (the connection was never made) is
"not executed"; everything after the first byte may have been sent is "ambiguous".
"""

import contextlib
import dataclasses
import hashlib
import sys
import threading

import bugs
import light_imports

# What a service promises when init leaves a term out: the cautious reading.
DEFAULT_CONTRACT = {
    "idempotency_keys": "ignored",
    "key_retention_ms": 0,
    "reads": "strong",
    "read_lag_ms_max": 0,
    "acks": "reliable",
    "settle_ms_max": 30_000,
    "unique_business_key": False,
    "fencing": False,
    "conditional_writes": False,
}

# What a write attempt established.
DONE = "done"  # the service says the effect exists (external_id says which)
REJECTED = "rejected"  # a definite refusal: this attempt did not execute
# A definite refusal a person must act on (401, 403: a credential or a permission; 400, 422:
# the input): this attempt did not execute, and resending it gets the same answer.
NEEDS_DECISION = "needs_decision"
# The statuses of such a refusal (vocabulary::DECISION_STATUSES).
DECISION_STATUSES = (400, 401, 403, 422)
NOT_EXECUTED = "not_executed"  # certainly not executed, may be sent again (no connection, 429)
AMBIGUOUS = "ambiguous"  # may or may not have executed: timeout, reset, 5xx, ...
FENCED = "fenced"  # the service refused our fencing token: a newer worker owns the intent
CONFLICT = "conflict"  # the object or account moved on (412, nonce too low): perhaps by us

# What a lookup found.
FOUND = "found"  # the effect exists (params_match: with exactly the authorised parameters)
ABSENT = "absent"  # not there (final only once nothing in flight can land, no read can lag)
SUPERSEDED = "superseded"  # not there and can no longer appear (another version, nonce used)
FAILED = "failed"  # the lookup itself failed

# The metadata key under which a refund carries the intent's id, so that a lookup can tell
# this intent's refund from any other refund of the same payment intent.
INTENT_METADATA_KEY = "twice_intent"
# Pages a refund lookup follows, at most.
LOOKUP_PAGES_MAX = 10
# Gas of a plain value transfer.
TRANSFER_GAS = 21_000


@dataclasses.dataclass
class Outcome:
    kind: str
    error: str = ""
    external_id: str | None = None
    # CONFLICT only: the state certainly moved on (412, nonce too low), rather than a race
    # lost to a concurrent write (409, replacement underpriced).
    definite: bool = False
    # NEEDS_DECISION only: the status, and the service's own code and message.
    status: int | None = None
    words: str = ""


@dataclasses.dataclass
class Lookup:
    kind: str
    external_id: str | None = None
    params_match: bool = True
    detail: str = ""


class NotPrepared(Exception):
    """What a first send must read and record (a precondition, a signature) could not be
    read: nothing is sent."""


def _raised_by(error, module, *names):
    """isinstance() against classes of a module that may not be loaded (an SDK nobody
    imported cannot have raised anything)."""
    loaded = sys.modules.get(module)
    return loaded is not None and isinstance(error, tuple(getattr(loaded, n) for n in names))


def _never_sent(error):
    """True only when no byte of the request can have left the process."""
    if isinstance(error, NotPrepared):
        return True
    if _raised_by(error, "requests.exceptions", "ConnectTimeout"):
        return True
    if _raised_by(error, "requests.exceptions", "ConnectionError"):
        # requests wraps urllib3's failure to connect; anything else (a reset, a closed
        # connection) happened after the request may have been written.
        reason = error.args[0] if error.args else None
        reason = getattr(reason, "reason", reason)
        return _raised_by(reason, "urllib3.exceptions", "NewConnectionError")
    return _raised_by(error, "botocore.exceptions", "EndpointConnectionError", "ConnectTimeoutError")


def _timed_out(error):
    return _raised_by(error, "requests.exceptions", "Timeout") or _raised_by(
        error, "botocore.exceptions", "ReadTimeoutError"
    )


def transport_outcome(error, timeout_ms):
    """What an exception from the HTTP stack means."""
    if _never_sent(error):
        return Outcome(NOT_EXECUTED, f"not sent: {error}")
    if _timed_out(error):
        if bugs.BUG == "timeout-as-failure":
            # The bug: no answer is taken as "it did not happen", a definite no.
            return Outcome(REJECTED, f"timed out after {timeout_ms} ms, taken as a refusal")
        return Outcome(AMBIGUOUS, f"no answer within {timeout_ms} ms")
    return Outcome(AMBIGUOUS, f"{type(error).__name__}: {error}")


def decision_outcome(status, words):
    """A refusal that needs a person's decision, in the service's own words."""
    if bugs.BUG == "retry-403":
        # The bug: a refusal is a bad moment, like a 429; once the permission is granted or
        # the input accepted, the retry goes through, and nobody decided anything.
        return Outcome(NOT_EXECUTED, f"HTTP {status}: {words}, retried")
    return Outcome(NEEDS_DECISION, f"HTTP {status}: {words}", status=status, words=words)


def http_outcome(status, code, kind, message):
    """What an HTTP error status means, for the JSON services (Stripe-style error bodies)."""
    error = f"HTTP {status}: {message}"
    if status == 409:
        if code == "stale_fencing_token":
            return Outcome(FENCED, error)
        # In flight under this key, or a create whose business id exists (perhaps ours): only
        # a lookup can tell.
        return Outcome(AMBIGUOUS, error)
    if status == 429:
        # Stripe saves no result for a 429: the request did not execute.
        return Outcome(NOT_EXECUTED, error)
    if status == 408 or kind == "idempotency_error":
        # The same key with other parameters: whose request the key holds, only a lookup tells.
        return Outcome(AMBIGUOUS, error)
    if status in DECISION_STATUSES:
        return decision_outcome(status, f"{code or kind}: {message}" if (code or kind) else message)
    if 400 <= status < 500:
        return Outcome(REJECTED, error)
    return Outcome(AMBIGUOUS, error)


def quoted_md5(text):
    """S3's ETag for a simple PUT of `text`."""
    return '"' + hashlib.md5(text.encode("utf-8")).hexdigest() + '"'


class Service:
    """One service from init: its URL and contract, and what every action shares."""

    def __init__(self, url, contract, secrets, timeout_ms):
        self.url = url.rstrip("/")
        self.contract = contract
        self.secrets = secrets
        self.timeout_ms = timeout_ms
        self.timeout_s = timeout_ms / 1000

    def guards_offered(self):
        """(fencing tokens, conditional writes): what the contract offers against a stale
        writer. Where it is offered, it is used."""
        offered = (self.contract["fencing"], self.contract["conditional_writes"])
        if bugs.BUG == "no-fencing":
            # The bug: the guards are ignored, so a stale worker's write can win.
            offered = (False, False)
        return offered

    def success_may_be_hollow(self):
        """Where acks may lie, a success may be a silent no-op: a key never replays what
        happened, and once "not there" is final the intent goes again under a new key."""
        return self.contract["acks"] == "may_lie"

    def reads_back_success(self):
        """A success that may be hollow is believed only once a read-back shows it."""
        if bugs.BUG == "trust-200":
            # The bug: a 200 is taken at its word.
            return False
        return self.success_may_be_hollow()

    def warm(self):
        """Imports the SDK (and makes what can be made once), before anything is timed: a
        key's retention and a lease run from the moment we record, not from when a slow
        import let the request leave."""
        import requests  # noqa: F401  (every service below speaks HTTP through it)

    def needs_preparation(self, intent):
        """Whether the first send must read and record something first."""
        return False

    def resend_is_guarded(self):
        """Whether a resend can land at most once without an idempotency key."""
        return False

    def current_result(self, intent, params, field):
        """`--bug re-resolve`: result field `field` of `intent` as the service shows it now (by
        a lookup), rather than as the executor recorded it. Raises NotPrepared when it cannot."""
        found = self.lookup(intent, params)
        if found.kind != FOUND or not found.external_id:
            raise NotPrepared(f"{intent.id}: its result is not found now ({found.kind} {found.detail})".strip())
        return found.external_id

    def write(self, intent, params, fencing_token):
        """One write attempt under the intent's key."""
        try:
            if bugs.BUG == "naive-retry":
                # The bug: whatever went wrong, again at once (tenacity), and without the
                # intent's key (stripe-python then makes up a new one for every request).
                import tenacity

                retrying = tenacity.Retrying(stop=tenacity.stop_after_attempt(3), reraise=True)
                answer = retrying(self.send, intent, params, None, fencing_token)
            else:
                answer = self.send(intent, params, intent.key, fencing_token)
        except Exception as error:  # every error is an answer to classify, never a crash
            return self.outcome_of_error(intent, error)
        try:
            return self.outcome_of_answer(intent, params, answer)
        except Exception as error:  # a success we cannot read proves nothing
            return Outcome(AMBIGUOUS, f"an unreadable success: {type(error).__name__}: {error}")


# ---------------------------------------------------------------------------------------
# payments.refund: stripe-python


class Payments(Service):
    def warm(self):
        import requests  # noqa: F401

        light_imports.import_stripe()

    @contextlib.contextmanager
    def _stripe(self):
        """A client on a connection of its own: a connection a fault closed is never reused,
        and no retry of the SDK's own (max_network_retries=0): resending is our decision."""
        import requests

        stripe = light_imports.import_stripe()
        stripe.enable_telemetry = False
        session = requests.Session()
        try:
            yield stripe.StripeClient(
                self.secrets.get("payments_api_key", "sk_test_twice"),
                base_addresses={"api": self.url},
                max_network_retries=0,
                http_client=stripe.RequestsClient(timeout=self.timeout_s, session=session),
            )
        finally:
            session.close()

    def send(self, intent, params, key, fencing_token):
        with self._stripe() as client:
            return client.v1.refunds.create(
                params={
                    "payment_intent": params["payment_intent"],
                    "amount": params["amount"],
                    "metadata": {INTENT_METADATA_KEY: intent.id},
                },
                options={"idempotency_key": key} if key else {},
            )

    def outcome_of_error(self, intent, error):
        stripe = light_imports.import_stripe()
        if isinstance(error, stripe.APIConnectionError):
            # The SDK wraps the requests exception; that one tells whether anything was sent.
            return transport_outcome(error.__cause__ or error, self.timeout_ms)
        if isinstance(error, stripe.StripeError) and error.http_status:
            kind = getattr(error.error, "type", None) if error.error else None
            return http_outcome(error.http_status, error.code, kind, error.user_message or str(error))
        return transport_outcome(error, self.timeout_ms)

    def outcome_of_answer(self, intent, params, refund):
        refund = refund.to_dict()  # a StripeObject is not a dict; its data is
        wanted = (params["payment_intent"], params["amount"])
        if (refund.get("payment_intent"), refund.get("amount")) == wanted:
            return Outcome(DONE, external_id=refund["id"])
        return Outcome(AMBIGUOUS, f"a success whose parameters differ from the intent's: {refund}")

    def lookup(self, intent, params):
        """The refunds of the payment intent, paged; ours carries our intent id."""
        try:
            with self._stripe() as client:
                query = {"payment_intent": params["payment_intent"], "limit": 100}
                for _ in range(LOOKUP_PAGES_MAX):
                    page = client.v1.refunds.list(params=query).to_dict()
                    for refund in page["data"]:
                        if (refund.get("metadata") or {}).get(INTENT_METADATA_KEY) == intent.id:
                            match = refund.get("amount") == params["amount"]
                            return Lookup(FOUND, external_id=refund["id"], params_match=match)
                    if not page.get("has_more") or not page["data"]:
                        return Lookup(ABSENT)
                    query["starting_after"] = page["data"][-1]["id"]
        except Exception as error:  # a failed lookup is an answer too: "cannot tell yet"
            return Lookup(FAILED, detail=f"listing refunds: {error}")
        return Lookup(FAILED, detail=f"more than {LOOKUP_PAGES_MAX} pages of refunds")

    # -- intents an event starts: the worker's endpoint, and the payment an event is about ---

    def register_endpoint(self, url, event_types, key):
        """`POST /v1/webhook_endpoints` under `key`: (id, whsec_ secret) of the new endpoint,
        which the create's answer alone carries. Raises whatever the SDK raises."""
        with self._stripe() as client:
            made = client.v1.webhook_endpoints.create(
                params={"url": url, "enabled_events": list(event_types)}, options={"idempotency_key": key}
            ).to_dict()  # a StripeObject is not a dict; its data is
        if not made.get("id") or not made.get("secret"):
            raise ValueError(f"the endpoint's answer has no id and secret: {made}")
        return made["id"], made["secret"]

    def move_endpoint(self, endpoint_id, url):
        """`POST /v1/webhook_endpoints/{id}` with `url`: the endpoint now delivers there."""
        with self._stripe() as client:
            client.v1.webhook_endpoints.update(endpoint_id, params={"url": url})

    def endpoint_url(self, endpoint_id):
        """`GET /v1/webhook_endpoints/{id}`: the URL the endpoint delivers to as the API shows it
        now, or None where the API does not have it (404). Where acks may lie, a registration's
        (or a move's) 200 proves nothing until this shows it. Raises on any other failure."""
        stripe = light_imports.import_stripe()
        try:
            with self._stripe() as client:
                return client.v1.webhook_endpoints.retrieve(endpoint_id).to_dict().get("url")
        except stripe.InvalidRequestError as error:
            if error.http_status == 404:
                return None
            raise

    def events(self, event_type):
        """`GET /v1/events?type=...&limit=100`: the service's own events of `event_type`, newest
        first, as dicts. The API is authenticated, so what it lists is genuine: what a worker
        that may have missed a delivery reads its events from. Raises whatever the SDK raises."""
        with self._stripe() as client:
            page = client.v1.events.list(params={"type": event_type, "limit": 100}).to_dict()
        return page.get("data") or []

    def payment_status(self, payment_intent):
        """The payment intent's status as the API shows it now (an event's copy of it may be
        stale, or a lie). Raises whatever the SDK raises."""
        with self._stripe() as client:
            return client.v1.payment_intents.retrieve(payment_intent).to_dict().get("status")


# ---------------------------------------------------------------------------------------
# workspaces.create: plain requests


class Workspaces(Service):
    def send(self, intent, params, key, fencing_token):
        import requests

        headers = {}
        if key:
            headers["Idempotency-Key"] = key
        fencing, _ = self.guards_offered()
        if bugs.BUG == "constant-fencing-token":
            # The bug: a token that never changes looks like fencing, and the service takes it,
            # but it cannot tell a stale worker from its successor.
            headers["Fencing-Token"] = "1"
        elif fencing and not bugs.SINGLE_WORKER:
            # The lease epoch: the service refuses a token lower than one it has seen for this
            # external id, so a worker paused past its lease cannot win against its successor.
            headers["Fencing-Token"] = str(fencing_token)
        # requests.post opens a connection of its own for this request.
        response = requests.post(
            f"{self.url}/v1/workspaces",
            json={"external_id": params["external_id"], "name": params["name"]},
            headers=headers,
            timeout=self.timeout_s,
        )
        response.raise_for_status()
        return response

    def outcome_of_error(self, intent, error):
        import requests

        if isinstance(error, requests.HTTPError) and error.response is not None:
            try:
                body = error.response.json().get("error") or {}
            except ValueError:
                body = {}
            message = body.get("message") or error.response.text[:200]
            return http_outcome(error.response.status_code, body.get("code"), body.get("type"), message)
        return transport_outcome(error, self.timeout_ms)

    def outcome_of_answer(self, intent, params, response):
        try:
            workspace = response.json()
        except ValueError:
            return Outcome(AMBIGUOUS, f"an unreadable success: HTTP {response.status_code}")
        if (
            isinstance(workspace, dict)
            and workspace.get("id")
            and workspace.get("external_id") == params["external_id"]
            and workspace.get("name") == params["name"]
        ):
            return Outcome(DONE, external_id=workspace["id"])
        return Outcome(AMBIGUOUS, f"a success whose parameters differ from the intent's: {workspace}")

    def lookup(self, intent, params):
        """External ids are unique per intent: a workspace with ours is ours."""
        import requests

        try:
            response = requests.get(
                f"{self.url}/v1/workspaces",
                params={"external_id": params["external_id"]},
                timeout=self.timeout_s,
            )
            if response.status_code != 200:
                return Lookup(FAILED, detail=f"HTTP {response.status_code}: {response.text[:200]}")
            for workspace in response.json().get("data", []):
                if workspace.get("external_id") == params["external_id"]:
                    match = workspace.get("name") == params["name"]
                    return Lookup(FOUND, external_id=workspace.get("id"), params_match=match)
            return Lookup(ABSENT)
        except Exception as error:  # "cannot tell yet"
            return Lookup(FAILED, detail=f"listing workspaces: {error}")


# ---------------------------------------------------------------------------------------
# files.put: boto3


class Files(Service):
    def __init__(self, *args):
        super().__init__(*args)
        self._client = None
        self._client_lock = threading.Lock()

    def _s3(self):
        """One client per process (boto3 clients are thread-safe, and cost ~0.2 s to make):
        path-style addressing, no retries of its own, our timeout."""
        with self._client_lock:
            if self._client is None:
                import boto3
                from botocore.config import Config

                self._client = boto3.client(
                    "s3",
                    endpoint_url=self.url,
                    aws_access_key_id="twice",
                    aws_secret_access_key="twice",
                    region_name="us-east-1",
                    config=Config(
                        s3={"addressing_style": "path"},
                        retries={"total_max_attempts": 1},
                        connect_timeout=self.timeout_s,
                        read_timeout=self.timeout_s,
                    ),
                )
            return self._client

    def warm(self):
        self._s3()

    def needs_preparation(self, intent):
        _, conditional = self.guards_offered()
        return conditional and "precondition" not in intent.evidence

    def resend_is_guarded(self):
        # Once one send of a conditional put landed, its condition no longer holds.
        _, conditional = self.guards_offered()
        return conditional

    def prepare(self, intent, params, intent_log):
        """HEAD the object, and record what every send must require of it: that it still does
        not exist, or that it is still the version read now."""
        try:
            head = self._s3().head_object(Bucket=params["bucket"], Key=params["key"])
        except Exception as error:
            if _status_of(error) == 404:
                return {"precondition": "if_none_match"}
            raise NotPrepared(f"HEAD {params['bucket']}/{params['key']}: {error}") from error
        return {"precondition": {"if_match": head["ETag"]}}

    def current_result(self, intent, params, field):
        """`--bug re-resolve`: the object's ETag now (HEAD), whoever wrote its current version."""
        try:
            return self._s3().head_object(Bucket=params["bucket"], Key=params["key"])["ETag"]
        except Exception as error:
            raise NotPrepared(f"HEAD {params['bucket']}/{params['key']}: {error}") from error

    def send(self, intent, params, key, fencing_token):
        # S3 has no idempotency key; the precondition is what makes a resend land once.
        call = {"Bucket": params["bucket"], "Key": params["key"], "Body": params["body"].encode("utf-8")}
        _, conditional = self.guards_offered()
        if bugs.BUG == "constant-fencing-token" and conditional:
            # The bug: "only if it exists" looks like a precondition, but any version matches,
            # so a stale worker's put lands on whatever its successor wrote.
            precondition = intent.evidence.get("precondition")
            call["IfNoneMatch" if precondition == "if_none_match" else "IfMatch"] = "*"
        elif conditional:
            precondition = intent.evidence.get("precondition")
            if precondition == "if_none_match":
                call["IfNoneMatch"] = "*"
            elif isinstance(precondition, dict):
                call["IfMatch"] = precondition["if_match"]
            else:
                raise NotPrepared("no precondition was recorded before the first send")
        return self._s3().put_object(**call)

    def outcome_of_error(self, intent, error):
        status = _status_of(error)
        if status is None:
            return transport_outcome(error, self.timeout_ms)
        message = f"HTTP {status}: {error}"
        if status == 412:
            # PreconditionFailed: the object is no longer what we read. Our own earlier send
            # may be what changed it, so this is for a read-back, not a refusal.
            return Outcome(CONFLICT, message, definite=True)
        if status == 409:
            # ConditionalRequestConflict: a concurrent conditional write won a race.
            return Outcome(CONFLICT, message, definite=False)
        if status == 429:
            return Outcome(NOT_EXECUTED, message)
        s3 = error.response.get("Error", {})
        if status == 400 and s3.get("Code") == "RequestTimeout":
            # A body that stopped arriving: nothing was stored, and the same put may go through.
            return Outcome(NOT_EXECUTED, message)
        if status in DECISION_STATUSES:
            words = ": ".join(w for w in (s3.get("Code"), s3.get("Message")) if w) or str(error)
            return decision_outcome(status, words)
        if 400 <= status < 500 and status != 408:
            return Outcome(REJECTED, message)
        return Outcome(AMBIGUOUS, message)

    def outcome_of_answer(self, intent, params, answer):
        etag = answer.get("ETag")
        if etag == quoted_md5(params["body"]):
            return Outcome(DONE, external_id=etag)
        return Outcome(AMBIGUOUS, f"a success with ETag {etag}, not the MD5 of the body that was sent")

    def lookup(self, intent, params):
        """HEAD: our body's ETag is ours; the version read before the first send means ours has
        not landed (and still can); any other version means it never will."""
        before = intent.evidence.get("precondition")
        where = f"{params['bucket']}/{params['key']}"
        try:
            etag = self._s3().head_object(Bucket=params["bucket"], Key=params["key"])["ETag"]
        except Exception as error:
            if _status_of(error) != 404:
                return Lookup(FAILED, detail=f"HEAD {where}: {error}")
            if isinstance(before, dict):
                gone = f"{where} was deleted since version {before['if_match']} was read"
                return Lookup(SUPERSEDED, detail=gone)
            return Lookup(ABSENT)
        if etag == quoted_md5(params["body"]):
            return Lookup(FOUND, external_id=etag)
        if before is None or (isinstance(before, dict) and before["if_match"] == etag):
            return Lookup(ABSENT)
        other = f"{where} holds version {etag}: neither ours nor the one read before the first send"
        return Lookup(SUPERSEDED, detail=other)


def _status_of(error):
    """The HTTP status of a botocore ClientError, or None for any other exception."""
    if not _raised_by(error, "botocore.exceptions", "ClientError"):
        return None
    return error.response.get("ResponseMetadata", {}).get("HTTPStatusCode")


# ---------------------------------------------------------------------------------------
# chain.transfer: web3.py and eth-account


class Chain(Service):
    def _web3(self):
        """web3 on a session of its own, without its retry of failed requests (it would resend
        a timed-out eth_sendRawTransaction on its own) and without middleware (no extra calls
        we did not ask for)."""
        import requests

        light_imports.import_chain_sdks()
        from web3 import HTTPProvider, Web3

        provider = HTTPProvider(
            self.url,
            request_kwargs={"timeout": self.timeout_s},
            session=requests.Session(),
            exception_retry_configuration=None,
        )
        return Web3(provider, middleware=[])

    def _account(self):
        light_imports.import_chain_sdks()
        from eth_account import Account

        return Account.from_key(self.secrets["chain_private_key"])

    def warm(self):
        light_imports.import_chain_sdks()

    def needs_preparation(self, intent):
        return "raw_tx" not in intent.evidence

    def resend_is_guarded(self):
        # The same signed bytes can be mined once: their nonce is used once.
        return True

    def reads_back_success(self):
        # A node answers the hash when the transaction enters its pool, before it is mined.
        return True

    def prepare(self, intent, params, intent_log):
        """Sign the transfer once: read the chain id, the pending nonce and the fees, take the
        lowest nonce at or above the pending one that no intent of the log has signed with (a
        node that lags cannot make us reuse one), and return the signed bytes and their hash,
        which the executor records before the first broadcast."""
        from eth_utils import to_checksum_address

        try:
            w3, account = self._web3(), self._account()
            chain_id = w3.eth.chain_id
            pending = w3.eth.get_transaction_count(account.address, "pending")
            gas_price = w3.eth.gas_price
            tip = w3.eth.max_priority_fee
        except Exception as error:
            raise NotPrepared(f"reading the chain: {error}") from error
        sender = account.address.lower()
        taken = intent_log.claimed_nonces(sender)
        nonce = pending
        while nonce in taken:
            nonce += 1
        signed = account.sign_transaction(
            {
                "type": 2,
                "chainId": chain_id,
                "nonce": nonce,
                "to": to_checksum_address(params["to"]),
                "value": int(params["value"]),
                "gas": TRANSFER_GAS,
                # Room for the base fee to double, plus the node's suggested tip.
                "maxFeePerGas": 2 * gas_price + tip,
                "maxPriorityFeePerGas": tip,
            }
        )
        return {
            "raw_tx": "0x" + bytes(signed.raw_transaction).hex(),
            "tx_hash": "0x" + bytes(signed.hash).hex(),
            "nonce": nonce,
            "from": sender,
        }

    def send(self, intent, params, key, fencing_token):
        # Always the recorded bytes: never a new signature.
        return self._web3().eth.send_raw_transaction(intent.evidence["raw_tx"])

    def outcome_of_error(self, intent, error):
        import requests

        light_imports.import_chain_sdks()
        from web3.exceptions import Web3RPCError

        if isinstance(error, Web3RPCError):
            rpc = (error.rpc_response or {}).get("error") or {}
            message, code = str(rpc.get("message", error)), rpc.get("code")
            text = f"JSON-RPC error {code}: {message}"
            lower = message.lower()
            if "already known" in lower:
                # The node holds exactly these bytes already: a broadcast of ours arrived.
                return Outcome(DONE, text, external_id=intent.evidence["tx_hash"])
            if "nonce too low" in lower:
                # The nonce is used, perhaps by these very bytes: for the receipt to tell.
                return Outcome(CONFLICT, text, definite=True)
            if "replacement transaction underpriced" in lower:
                return Outcome(CONFLICT, text, definite=False)
            if code == -32603:
                # An internal error says nothing of whether the transaction was pooled.
                return Outcome(AMBIGUOUS, text)
            return Outcome(REJECTED, text)
        if isinstance(error, requests.HTTPError) and error.response is not None:
            status = error.response.status_code
            message = f"HTTP {status}: {error.response.text[:200]}"
            if status == 429:
                return Outcome(NOT_EXECUTED, message)
            if status in DECISION_STATUSES:
                # What stands in front of the node (its JWT or host check, a gateway) refused us.
                try:
                    rpc = error.response.json().get("error") or {}
                    words = f"JSON-RPC error {rpc['code']}: {rpc['message']}"
                except (ValueError, AttributeError, KeyError, TypeError):
                    words = error.response.text[:200]
                return decision_outcome(status, words)
            if 400 <= status < 500 and status != 408:
                return Outcome(REJECTED, message)
            return Outcome(AMBIGUOUS, message)
        return transport_outcome(error, self.timeout_ms)

    def outcome_of_answer(self, intent, params, tx_hash):
        ours = intent.evidence["tx_hash"]
        answered = "0x" + bytes(tx_hash).hex()
        if answered.lower() == ours.lower():
            return Outcome(DONE, external_id=ours)
        return Outcome(AMBIGUOUS, f"the node answered {answered}, not the hash {ours}")

    def lookup(self, intent, params):
        """The receipt of our hash; without one, whether another transaction used our nonce,
        or ours waits in the pool, or the node does not know it (then it may be broadcast
        again: the same bytes cannot be mined twice)."""
        light_imports.import_chain_sdks()
        from web3.exceptions import TransactionNotFound

        evidence = intent.evidence
        if "raw_tx" not in evidence:
            return Lookup(ABSENT)  # never signed, so never broadcast
        tx_hash, nonce, sender = evidence["tx_hash"], evidence["nonce"], evidence["from"]
        try:
            w3 = self._web3()

            def mined():
                try:
                    receipt = w3.eth.get_transaction_receipt(tx_hash)
                except TransactionNotFound:
                    return None
                if receipt["status"] == 1:
                    return Lookup(FOUND, external_id=tx_hash)
                reverted = f"{tx_hash} was mined in block {receipt['blockNumber']} and reverted"
                return Lookup(SUPERSEDED, detail=reverted)

            found = mined()
            if found is not None:
                return found
            from eth_utils import to_checksum_address

            latest = w3.eth.get_transaction_count(to_checksum_address(sender), "latest")
            if latest > nonce:
                # The receipt read above may predate the block that used the nonce: only one
                # read after the nonce was seen used can tell whose transaction used it.
                found = mined()
                if found is not None:
                    return found
                used = f"nonce {nonce} of {sender} is used, and {tx_hash} has no receipt"
                return Lookup(SUPERSEDED, detail=used)
            try:
                w3.eth.get_transaction(tx_hash)
            except TransactionNotFound:
                return Lookup(ABSENT)
            return Lookup(FAILED, detail=f"{tx_hash} waits in the node's pool, not mined yet")
        except Exception as error:  # "cannot tell yet"
            return Lookup(FAILED, detail=f"looking up {tx_hash}: {error}")


# ---------------------------------------------------------------------------------------
# messages.send: the resend SDK, and the recipient's inbox


# The email header that carries the intent's id into the inbox, so that a read-back tells
# this intent's message from any other to the same address (the key cannot: it changes when
# it is rotated, and an inbox never shows it).
INTENT_HEADER = "X-Twice-Intent"
# Who the executor's messages come from.
SENDER = "twice executor <executor@twice.invalid>"


class Messages(Service):
    def warm(self):
        import requests  # noqa: F401
        import resend
        from resend.http_client_requests import RequestsClient

        # The SDK keeps its settings in the module; every send of this process goes to the one
        # messages service it was told of, with one key. Its HTTP client makes a connection
        # per request (requests.request), with our timeout, and never retries.
        resend.api_key = self.secrets.get("messages_api_key", "re_test_twice")
        resend.api_url = self.url
        resend.default_http_client = RequestsClient(timeout=self.timeout_s)

    def success_may_be_hollow(self):
        # Whatever the contract says: the answer is the API accepting the message, the effect
        # is its delivery to the inbox.
        return True

    def reads_back_success(self):
        if bugs.BUG == "trust-202":
            # The bug: the API's 200 is taken for the delivery.
            return False
        return True

    def send(self, intent, params, key, fencing_token):
        import resend

        email = {
            "from": SENDER,
            "to": params["to"],
            "subject": params["subject"],
            "text": params["body"],
            "headers": {INTENT_HEADER: intent.id},
        }
        return resend.Emails.send(email, options={"idempotency_key": key} if key else None)

    def outcome_of_error(self, intent, error):
        import resend

        if isinstance(error, resend.exceptions.ResendError):
            if error.error_type == "HttpClientError":
                # The SDK turns whatever the HTTP stack raised into this; the requests
                # exception underneath tells whether anything was sent.
                wrapped = error.__context__
                cause = getattr(wrapped, "__cause__", None) or wrapped or error
                return transport_outcome(cause, self.timeout_ms)
            status = int(error.code) if str(error.code).isdigit() else 500
            return http_outcome(status, error.error_type, None, error.message)
        return transport_outcome(error, self.timeout_ms)

    def outcome_of_answer(self, intent, params, answer):
        email_id = answer.get("id") if hasattr(answer, "get") else None
        if isinstance(email_id, str) and email_id:
            # Accepted, not delivered: the executor reads the inbox before it believes it.
            return Outcome(DONE, external_id=email_id)
        return Outcome(AMBIGUOUS, f"an unreadable success: {answer}")

    def lookup(self, intent, params):
        """The recipient's inbox, paged, oldest first; ours carries our intent id."""
        import requests

        url = f"{self.url}/mailboxes/{params['to']}/messages"
        query = {"limit": 100}
        try:
            for _ in range(LOOKUP_PAGES_MAX):
                response = requests.get(url, params=query, timeout=self.timeout_s)
                if response.status_code != 200:
                    return Lookup(FAILED, detail=f"HTTP {response.status_code}: {response.text[:200]}")
                page = response.json()
                for message in page.get("data", []):
                    headers = {k.lower(): v for k, v in (message.get("headers") or {}).items()}
                    if headers.get(INTENT_HEADER.lower()) == intent.id:
                        match = (message.get("subject"), message.get("text")) == (params["subject"], params["body"])
                        return Lookup(FOUND, external_id=message.get("email_id"), params_match=match)
                if not page.get("has_more") or not page.get("data"):
                    return Lookup(ABSENT)
                query["after"] = page["data"][-1]["id"]
        except Exception as error:  # "cannot tell yet"
            return Lookup(FAILED, detail=f"reading the inbox of {params['to']}: {error}")
        return Lookup(FAILED, detail=f"more than {LOOKUP_PAGES_MAX} pages in the inbox of {params['to']}")


SERVICES = {"payments": Payments, "workspaces": Workspaces, "files": Files, "chain": Chain, "messages": Messages}
