//! The actions an agent can propose (design §6, `docs/protocol.md` §3.2): one row each.
//!
//! A row says which service carries the action out, what its effect is called in that
//! service's ledger, which parameter is its business key, and what parameters it takes. The
//! scenario validator checks intents against it, the reference executor announces it and
//! checks proposals against it, the checker attributes ledger effects with it and the reports
//! mark duplicates with it. Adding an action is a row here, a fake that records its effects
//! and an executor module that carries it out.

use crate::contract::Contract;

/// Every service a scenario can name and the harness can start, in the order they were
/// added. Each has its own terms ([`Contract::default_for`]).
pub const SERVICES: &[&str] = &["payments", "workspaces", "files", "chain", "messages"];

/// The kind of value an action parameter takes. Each consumer applies its own bounds on top
/// (scenarios cap lengths and amounts; the executor refuses what it cannot put in a URL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamKind {
    /// A non-empty string.
    Text,
    /// A JSON integer greater than zero.
    PositiveInteger,
    /// An S3 bucket name: 3 to 63 lowercase letters, digits, '.' and '-', starting and
    /// ending with a letter or digit.
    Bucket,
    /// An object key of S3's safe characters (letters, digits and `! - _ . * ' ( ) /`), not
    /// starting with '/', so that it goes into a URL path as it is.
    ObjectKey,
    /// An Ethereum address: `0x` and 40 lowercase hex digits, as the chain's ledger writes it.
    Address,
    /// An amount of wei as a decimal string (it outgrows JSON's safe integers and TOML's).
    Wei,
    /// An email address, `local@domain`, in lowercase letters, digits and `. _ + -` (the
    /// domain: letters, digits, `.` and `-`, with a dot), as the messages ledger writes it and
    /// as it goes into a mailbox's URL path without escaping.
    Email,
}

impl ParamKind {
    /// A valid value of this kind, for tests and examples.
    pub fn example(self) -> serde_json::Value {
        use serde_json::Value;
        match self {
            ParamKind::Text => Value::from("x"),
            ParamKind::PositiveInteger => Value::from(1),
            ParamKind::Bucket => Value::from("reports"),
            ParamKind::ObjectKey => Value::from("q3/summary.csv"),
            ParamKind::Address => Value::from("0x00000000000000000000000000000000000000b0"),
            ParamKind::Wei => Value::from("1000000000000000000"),
            ParamKind::Email => Value::from("ada@example.com"),
        }
    }
}

/// The longest email address: RFC 5321's limit on a path, less its angle brackets.
pub const EMAIL_CHARS_MAX: usize = 254;

/// Whether `text` is an email address of [`ParamKind::Email`]: a local part of 1 to 64
/// lowercase letters, digits and `. _ + -` (no dot first, last or twice in a row), `@`, and
/// a domain of at least two dot-separated labels of 1 to 63 lowercase letters, digits and
/// `-` (no hyphen first or last). Narrower than RFC 5322 on purpose: such an address is the
/// same text in a scenario, a request, a ledger and a URL path.
pub fn is_email_address(text: &str) -> bool {
    let Some((local, domain)) = text.split_once('@') else { return false };
    let local_ok = (1..=64).contains(&local.len())
        && local.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._+-".contains(&b))
        && !local.starts_with('.')
        && !local.ends_with('.')
        && !local.contains("..");
    let label_ok = |label: &str| {
        (1..=63).contains(&label.len())
            && label.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    };
    text.len() <= EMAIL_CHARS_MAX
        && local_ok
        && domain.split('.').count() >= 2
        && domain.split('.').all(label_ok)
}

/// One parameter of an action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Param {
    pub name: &'static str,
    pub kind: ParamKind,
    /// Whether a proposal without it is refused. Every parameter of today's actions is.
    pub required: bool,
}

/// What a contract can offer against a stale write to an action's objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guard {
    /// `fencing`: the service refuses a token lower than the newest it has seen.
    Fencing,
    /// `conditional_writes`: `If-Match` and `If-None-Match`.
    ConditionalWrites,
}

impl Guard {
    /// Whether `contract` offers this guard.
    pub fn offered_by(self, contract: &Contract) -> bool {
        match self {
            Guard::Fencing => contract.fencing,
            Guard::ConditionalWrites => contract.conditional_writes,
        }
    }
}

/// Where a ledger effect keeps one field of an action's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResultSource {
    /// [`crate::Effect::object_id`]: the id the service gave the effect.
    ObjectId,
    /// A string field of [`crate::Effect::params`].
    Param(&'static str),
}

/// One field of what an action's effect produced, which a later step of a workflow may take
/// a parameter's value from (`docs/protocol.md` §3.2, parameter references).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResultField {
    /// The name a reference uses (`{"from": "create", "field": "id"}`).
    pub name: &'static str,
    /// Where the ledger keeps it, so that the checker reads the value from the truth.
    pub source: ResultSource,
}

impl ResultField {
    /// This field's value in `effect`, if the effect has it as a string.
    pub fn value_in(&self, effect: &crate::Effect) -> Option<String> {
        match self.source {
            ResultSource::ObjectId => Some(effect.object_id.clone()),
            ResultSource::Param(name) => effect.params.get(name).and_then(|v| v.as_str()).map(str::to_string),
        }
    }
}

/// An action an agent can propose, and how its effects are found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActionSpec {
    /// `service.verb`, as intents and `init_ok` name it.
    pub name: &'static str,
    /// The service that carries it out (one of [`SERVICES`]).
    pub service: &'static str,
    /// The kind of the ledger effect it makes (`Effect::kind`).
    pub effect_kind: &'static str,
    /// The parameter, in the intent and in the effect, that names what the action acts on:
    /// the checker looks for an intent's effects among those that carry it, and it is equal
    /// along a lineage (an intent and its replacements). Unique across lineages unless
    /// [`ActionSpec::shares_business_key`].
    pub business_key: &'static str,
    /// Whether several lineages may act on one business key: partial refunds of one payment,
    /// several messages to one recipient, several transfers to one address. The checker then
    /// tells their effects apart by the caller's tag ([`intent_tag`]) or by their parameters,
    /// and judges only what the ledger proves. Not for a workspace (one per external id) nor
    /// an object (a put overwrites it: two intents writing one key race for its last version).
    pub shares_business_key: bool,
    /// Every parameter, in the order they are documented.
    pub params: &'static [Param],
    /// The guard against stale writes the service can offer for this action (its contract
    /// says whether it does), and whose fake records whether a write used it.
    pub guard: Option<Guard>,
    /// Whether a second effect with the same business key is a duplicate whatever intent made
    /// it, so that reports mark it even when no intent claims it: only where one lineage owns a
    /// key and a second effect cannot be anyone's own (not `files.put`: a put overwrites the
    /// same object; not where [`ActionSpec::shares_business_key`]).
    pub duplicate_by_key: bool,
    /// The secret (`init.secrets`) the executor needs for it, if any.
    pub secret: Option<&'static str>,
    /// What its effect produces that a later step may use.
    pub result_fields: &'static [ResultField],
}

impl ActionSpec {
    /// The parameter called `name`.
    pub fn param(&self, name: &str) -> Option<&'static Param> {
        self.params.iter().find(|p| p.name == name)
    }

    /// Every parameter's name, in order.
    pub fn param_names(&self) -> Vec<&'static str> {
        self.params.iter().map(|p| p.name).collect()
    }

    /// The result field called `name`.
    pub fn result_field(&self, name: &str) -> Option<&'static ResultField> {
        self.result_fields.iter().find(|f| f.name == name)
    }

    /// Whether parameter `name` may take its value from an earlier step's result: a text
    /// parameter or an object key, never the business key (the checker attributes effects by
    /// it, so it must be known before anything runs).
    pub fn param_takes_reference(&self, name: &str) -> bool {
        name != self.business_key
            && self.param(name).is_some_and(|p| matches!(p.kind, ParamKind::Text | ParamKind::ObjectKey))
    }
}

/// The secret (`init.secrets`) with the chain account's private key: `0x` and 64 hex digits.
pub const CHAIN_PRIVATE_KEY_SECRET: &str = "chain_private_key";

/// The result field `id`: the id the service gave the effect.
const ID: ResultField = ResultField { name: "id", source: ResultSource::ObjectId };

const fn required(name: &'static str, kind: ParamKind) -> Param {
    Param { name, kind, required: true }
}

/// `payments.refund {payment_intent, amount}`: a Stripe refund of `amount` (cents).
pub const PAYMENTS_REFUND: ActionSpec = ActionSpec {
    name: "payments.refund",
    service: "payments",
    effect_kind: "refund.created",
    business_key: "payment_intent",
    shares_business_key: true,
    params: &[required("payment_intent", ParamKind::Text), required("amount", ParamKind::PositiveInteger)],
    guard: None,
    duplicate_by_key: false,
    secret: None,
    result_fields: &[ID],
};

/// `workspaces.create {external_id, name}`: a SaaS create with a unique external id.
pub const WORKSPACES_CREATE: ActionSpec = ActionSpec {
    name: "workspaces.create",
    service: "workspaces",
    effect_kind: "workspace.created",
    business_key: "external_id",
    shares_business_key: false,
    params: &[required("external_id", ParamKind::Text), required("name", ParamKind::Text)],
    guard: Some(Guard::Fencing),
    duplicate_by_key: true,
    secret: None,
    result_fields: &[ID],
};

/// `files.put {bucket, key, body}`: the object `bucket/key` holds `body` afterwards.
pub const FILES_PUT: ActionSpec = ActionSpec {
    name: "files.put",
    service: "files",
    effect_kind: "object.put",
    business_key: "key",
    shares_business_key: false,
    params: &[
        required("bucket", ParamKind::Bucket),
        required("key", ParamKind::ObjectKey),
        required("body", ParamKind::Text),
    ],
    guard: Some(Guard::ConditionalWrites),
    duplicate_by_key: false,
    secret: None,
    // The quoted ETag S3 answers (the MD5 of the body), as the ledger records it.
    result_fields: &[ResultField { name: "etag", source: ResultSource::Param("etag") }],
};

/// `chain.transfer {to, value}`: `value` wei from the chain account to `to`.
pub const CHAIN_TRANSFER: ActionSpec = ActionSpec {
    name: "chain.transfer",
    service: "chain",
    effect_kind: "tx.mined",
    business_key: "to",
    shares_business_key: true,
    params: &[required("to", ParamKind::Address), required("value", ParamKind::Wei)],
    guard: None,
    duplicate_by_key: false,
    secret: Some(CHAIN_PRIVATE_KEY_SECRET),
    // The transaction hash, which the ledger's `tx.mined` effect has as its object id.
    result_fields: &[ResultField { name: "tx_hash", source: ResultSource::ObjectId }],
};

/// `messages.send {to, subject, body}`: an email with `subject` and the plain-text `body` in
/// `to`'s inbox. Its effect is the delivery (`message.delivered`, recorded when the message
/// lands in the recipient's inbox, not when the API accepts it); a second delivery of the same
/// message by the provider's own retry carries `params.provider_redelivery = true`
/// ([`crate::record::PROVIDER_REDELIVERY`]) and is the provider's doing, not the executor's.
/// The API key (`secrets.messages_api_key`) is optional like `payments_api_key`: the
/// reference executor falls back to a test key, so it is not a required [`ActionSpec::secret`].
pub const MESSAGES_SEND: ActionSpec = ActionSpec {
    name: "messages.send",
    service: "messages",
    effect_kind: "message.delivered",
    business_key: "to",
    shares_business_key: true,
    params: &[
        required("to", ParamKind::Email),
        required("subject", ParamKind::Text),
        required("body", ParamKind::Text),
    ],
    guard: None,
    duplicate_by_key: false,
    secret: None,
    // The message id the send answered, which every delivery of the message carries as its
    // object id.
    result_fields: &[ID],
};

/// The secret (`init.secrets`) with the messages service's API key (`re_...`); optional.
pub const MESSAGES_API_KEY_SECRET: &str = "messages_api_key";

/// Every action, in the order executors announce them.
pub const ACTIONS: &[ActionSpec] =
    &[PAYMENTS_REFUND, WORKSPACES_CREATE, FILES_PUT, CHAIN_TRANSFER, MESSAGES_SEND];

/// Every action's name, in [`ACTIONS`] order.
pub const ACTION_NAMES: [&str; ACTIONS.len()] = {
    let mut names = [""; ACTIONS.len()];
    let mut i = 0;
    while i < ACTIONS.len() {
        names[i] = ACTIONS[i].name;
        i += 1;
    }
    names
};

/// The action called `name`.
pub fn action(name: &str) -> Option<&'static ActionSpec> {
    ACTIONS.iter().find(|a| a.name == name)
}

/// The action whose effects `service` records as `kind`.
pub fn action_for_effect(service: &str, kind: &str) -> Option<&'static ActionSpec> {
    ACTIONS.iter().find(|a| a.service == service && a.effect_kind == kind)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::State;

    const PROTOCOL: &str = include_str!("../../docs/protocol.md");

    #[test]
    fn every_row_is_consistent() {
        let mut names = BTreeSet::new();
        let mut effects = BTreeSet::new();
        for spec in ACTIONS {
            assert!(names.insert(spec.name), "{} twice", spec.name);
            assert!(effects.insert((spec.service, spec.effect_kind)), "{} effect twice", spec.name);
            assert_eq!(spec.name.split_once('.').map(|(s, _)| s), Some(spec.service), "{}", spec.name);
            assert!(SERVICES.contains(&spec.service), "{}", spec.name);
            assert!(spec.param(spec.business_key).is_some(), "{}: business key is a parameter", spec.name);
            assert_eq!(action(spec.name), Some(spec));
            assert_eq!(action_for_effect(spec.service, spec.effect_kind), Some(spec));
        }
        assert_eq!(ACTION_NAMES.to_vec(), ACTIONS.iter().map(|a| a.name).collect::<Vec<_>>());
    }

    #[test]
    fn email_addresses_are_plain_lowercase_text() {
        for good in ["ada@example.com", "a.b+tag_1-x@mail.example.co.uk", "0@a-b.io"] {
            assert!(is_email_address(good), "{good}");
        }
        let long = format!("{}@example.com", "a".repeat(65));
        for bad in [
            "",
            "ada",
            "ada@",
            "@example.com",
            "Ada@example.com",
            "ada@example",
            "ada@@example.com",
            ".ada@example.com",
            "ada.@example.com",
            "a..da@example.com",
            "ada@-example.com",
            "ada@example..com",
            "Ada <ada@example.com>",
            "ada@exa mple.com",
            long.as_str(),
        ] {
            assert!(!is_email_address(bad), "{bad}");
        }
        assert!(is_email_address(ParamKind::Email.example().as_str().unwrap()));
    }

    /// `init_ok` in `docs/protocol.md` lists the reference executor's actions, which are
    /// every row of the table, in order.
    #[test]
    fn the_protocol_names_every_action_in_table_order() {
        let listed = format!(
            "\"actions\": [{}]",
            ACTIONS.iter().map(|a| format!("\"{}\"", a.name)).collect::<Vec<_>>().join(", ")
        );
        assert!(PROTOCOL.contains(&listed), "docs/protocol.md should say {listed}");
    }

    /// The table of `docs/protocol.md` §7 (`| \`state\` | meaning | terminal? | ...`) has one row
    /// per [`State`], in order, and says which are terminal as [`State::is_terminal`] does.
    #[test]
    fn the_protocol_states_are_the_state_enum() {
        let section = PROTOCOL.split("## 7. States and transitions").nth(1).expect("§7 in protocol.md");
        let rows: Vec<(String, bool)> = section
            .lines()
            .skip_while(|l| !l.starts_with("| state |"))
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .map(|l| {
                let cells: Vec<&str> = l.split('|').map(str::trim).collect();
                (cells[1].trim_matches('`').to_string(), cells[3] == "yes")
            })
            .collect();
        let want: Vec<(String, bool)> = State::ALL.iter().map(|s| (s.to_string(), s.is_terminal())).collect();
        assert_eq!(rows, want);
    }
}
