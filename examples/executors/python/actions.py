"""The five actions an agent may propose: their parameters, checked and put in canonical form.

What is checked here is what `docs/protocol.md` (§3.2) asks of each action, and no more. The
canonical form is what the intent log stores and hashes: keys sorted, no spaces, integers
only (RFC 8785 for the values actions carry). An intent's parameters never change after
`propose`: what was authorised is what is executed.
"""

import hashlib
import json
import re

# Every action this executor knows, and the service that carries it out.
SERVICE_OF = {
    "payments.refund": "payments",
    "workspaces.create": "workspaces",
    "files.put": "files",
    "chain.transfer": "chain",
    "messages.send": "messages",
}
ACTIONS = tuple(SERVICE_OF)

# The secret `chain.transfer` signs with (init.secrets).
CHAIN_KEY_SECRET = "chain_private_key"

_BUCKET = re.compile(r"^[A-Za-z0-9!\-_.*'()]+$")
_OBJECT_KEY = re.compile(r"^[A-Za-z0-9!\-_.*'()/]+$")
_ADDRESS = re.compile(r"^0x[0-9a-f]{40}$")
_WEI = re.compile(r"^[1-9][0-9]*$")
# An email address as the action table takes it (vocabulary::is_email_address): lowercase,
# so that it is the same text in the inbox, the ledger and the mailbox's URL.
_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_EMAIL = re.compile(rf"^(?!\.)(?!.*\.\.)[a-z0-9._+-]{{1,64}}(?<!\.)@{_LABEL}(?:\.{_LABEL})+$")


class Malformed(ValueError):
    """The parameters are not what the action takes (protocol error 12)."""


def check(action, params):
    """The parameters of `action`, checked, as a new dict; raises Malformed."""
    if not isinstance(params, dict):
        raise Malformed(f"{action}: params must be a JSON object")

    def text(name):
        value = params.get(name)
        if not isinstance(value, str) or not value:
            raise Malformed(f'{action}: "{name}" must be a non-empty string')
        return value

    def only(*names):
        for extra in sorted(set(params) - set(names)):
            raise Malformed(f'{action}: unknown parameter "{extra}"')

    if action == "payments.refund":
        only("payment_intent", "amount")
        amount = params.get("amount")
        # bool is an int in Python; JSON true is no amount.
        if type(amount) is not int or amount <= 0:
            raise Malformed(f'{action}: "amount" must be a positive integer')
        return {"payment_intent": text("payment_intent"), "amount": amount}
    if action == "workspaces.create":
        only("external_id", "name")
        return {"external_id": text("external_id"), "name": text("name")}
    if action == "files.put":
        only("bucket", "key", "body")
        bucket, key = text("bucket"), text("key")
        # Both go into the request's path as they are: refuse what would need escaping
        # rather than guess how a service decodes it.
        if not _BUCKET.match(bucket):
            raise Malformed(f"{action}: \"bucket\" must be letters, digits, '.', '-' and '_'")
        if not _OBJECT_KEY.match(key) or key.startswith("/"):
            allowed = "letters, digits and ! - _ . * ' ( ) /, not starting with '/'"
            raise Malformed(f'{action}: "key" must be {allowed}')
        return {"bucket": bucket, "key": key, "body": text("body")}
    if action == "chain.transfer":
        only("to", "value")
        to, value = text("to"), text("value")
        if not _ADDRESS.match(to):
            raise Malformed(f'{action}: "to" must be 0x and 40 lowercase hex digits')
        # Wei outgrow JSON's safe integers, so the value is a decimal string.
        if not _WEI.match(value):
            raise Malformed(f'{action}: "value" must be a positive decimal string of wei')
        return {"to": to, "value": value}
    if action == "messages.send":
        only("to", "subject", "body")
        to = text("to")
        if len(to) > 254 or not _EMAIL.match(to):
            raise Malformed(f'{action}: "to" must be an email address in lowercase letters, digits and . _ + -')
        return {"to": to, "subject": text("subject"), "body": text("body")}
    raise Malformed(f'action "{action}" is not one of {", ".join(ACTIONS)}')


def canonical_json(value):
    """Sorted keys, no insignificant white space, UTF-8 as it is: the same text for the same
    parameters whatever order the agent wrote them in."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def payload_hash(canonical):
    """SHA-256 of the canonical text, stored beside it: a row whose parameters no longer match
    their hash was changed behind the executor's back, and is never executed."""
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
