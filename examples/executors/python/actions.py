"""The five actions an agent may propose: their parameters, checked and put in canonical form,
and the parameter references of workflow steps.

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


# -- workflows: steps that build on steps (docs/protocol.md §3.2) -------------------------

# What each action's effect produces that a later step may read (vocabulary/src/action.rs,
# `result_fields`): the refund's, the workspace's and the message's id; the put's quoted ETag;
# the transfer's hash.
RESULT_FIELDS = {
    "payments.refund": ("id",),
    "workspaces.create": ("id",),
    "files.put": ("etag",),
    "chain.transfer": ("tx_hash",),
    "messages.send": ("id",),
}

# The business key of each action: the harness attributes effects by it, so it must be known
# before anything runs, and never takes a reference.
BUSINESS_KEY = {
    "payments.refund": "payment_intent",
    "workspaces.create": "external_id",
    "files.put": "key",
    "chain.transfer": "to",
    "messages.send": "to",
}

# The parameters that may take a reference: text parameters and object keys that are not the
# business key (amounts, buckets, addresses and wei are checked at propose time, and stay so).
TAKES_REFERENCE = {
    "payments.refund": (),
    "workspaces.create": ("name",),
    "files.put": ("body",),
    "chain.transfer": (),
    "messages.send": ("subject", "body"),
}

# A valid value of each parameter, standing in for a reference while the rest is checked.
_EXAMPLE = {
    "payment_intent": "x",
    "amount": 1,
    "external_id": "x",
    "name": "x",
    "bucket": "reports",
    "key": "q3/summary.csv",
    "body": "x",
    "subject": "x",
    "to": "0x00000000000000000000000000000000000000b0",
    "value": "1000000000000000000",
}

PLACEHOLDER = "{}"
FORMAT_CHARS_MAX = 1_000


def parse_reference(value):
    """A parameter value: None for a plain value, the reference as a dict {"from", "field",
    "format"?} for a well-formed one; raises Malformed (saying what is wrong) for an object
    that is not one. The same rules as vocabulary/src/workflow.rs, `ParamRef::parse`."""
    if not isinstance(value, dict):
        return None
    for extra in sorted(set(value) - {"from", "field", "format"}):
        raise Malformed(f'unknown field "{extra}" in a reference; a reference has from, field and format')
    for name in ("from", "field", "format"):
        if name in value and (not isinstance(value[name], str) or not value[name]):
            raise Malformed(f'"{name}" of a reference must be a non-empty string')
    if "from" not in value:
        raise Malformed('a reference needs "from", the id of an earlier intent')
    if "field" not in value:
        raise Malformed('a reference needs "field", a field of that intent\'s result')
    form = value.get("format")
    if form is not None:
        if form.count(PLACEHOLDER) != 1:
            raise Malformed(f'"format" must hold "{PLACEHOLDER}" exactly once, where the value goes')
        if len(form) > FORMAT_CHARS_MAX:
            raise Malformed(f'"format" is longer than {FORMAT_CHARS_MAX} characters')
    return dict(value)


def references(params):
    """Every reference among `params`, as (parameter name, reference), in name order."""
    if not isinstance(params, dict):
        return []
    found = []
    for name in sorted(params):
        try:
            reference = parse_reference(params[name])
        except Malformed as problem:
            raise Malformed(f'parameter "{name}": {problem}') from None
        if reference is not None:
            found.append((name, reference))
    return found


def render(reference, value):
    """The parameter's value once the result field's value is known."""
    form = reference.get("format")
    return value if form is None else form.replace(PLACEHOLDER, value, 1)


def check_reference(action, param, reference, from_action, listed_in_after):
    """Raises Malformed unless `param` of `action` may read `reference` (from an intent of
    `from_action`, None when no such intent was recorded): vocabulary's `check_reference`."""
    if param not in TAKES_REFERENCE.get(action, ()):
        key = BUSINESS_KEY.get(action, "?")
        raise Malformed(
            f'parameter "{param}" of {action} cannot take a reference (only text parameters and '
            f'object keys that are not the business key "{key}" can)'
        )
    if from_action is None:
        raise Malformed(f'parameter "{param}" reads from "{reference["from"]}", which is no earlier intent')
    if not listed_in_after:
        raise Malformed(
            f'parameter "{param}" reads from "{reference["from"]}", which must also be listed in "after"'
        )
    fields = RESULT_FIELDS.get(from_action, ())
    if reference["field"] not in fields:
        raise Malformed(
            f'parameter "{param}": {from_action} has no result field "{reference["field"]}"; '
            f'it has: {", ".join(fields)}'
        )


def with_placeholders(params):
    """`params` with each reference replaced by a valid value of its parameter, so that the
    rest can be checked before the references are resolved."""
    out = dict(params)
    for name, _ in references(params):
        out[name] = _EXAMPLE.get(name, "x")
    return out


def with_resolved(params, resolved):
    """`params` with each reference replaced by its resolved value; raises Malformed for one
    that has none."""
    out = dict(params)
    for name, reference in references(params):
        if name not in resolved:
            raise Malformed(f'parameter "{name}" reads from "{reference["from"]}" and is not resolved yet')
        out[name] = resolved[name]
    return out


def payload_text(params, after):
    """What the payload hash covers: the canonical parameters, and for a step its `after` too,
    so that proposing the same id again compares everything authorised."""
    if not after:
        return params
    return '{"after":' + canonical_json(list(after)) + ',"params":' + params + "}"


def canonical_json(value):
    """Sorted keys, no insignificant white space, UTF-8 as it is: the same text for the same
    parameters whatever order the agent wrote them in."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def payload_hash(canonical):
    """SHA-256 of the canonical text, stored beside it: a row whose parameters no longer match
    their hash was changed behind the executor's back, and is never executed."""
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
