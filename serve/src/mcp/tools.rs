//! The tools `twice mcp` offers, as data: one write tool per action of the action table (its
//! parameters are the action's, plus what the service honours: an idempotency key, a
//! precondition, a nonce, and the marks its real API lets a caller put on a write: Stripe's
//! `metadata`, S3's user metadata, Resend's `headers` and `tags`) and the reads an agent needs
//! before it retries, which show those marks, so that an agent can find its own write by its
//! tag. Each tool is one HTTP exchange with a fake (a transfer: the reads a wallet makes, then
//! one broadcast), so every fault a scenario arms applies to it; the server itself never
//! retries.

use fake_services::metadata;
use serde_json::{Map, Value, json};
use vocabulary::ParamKind;
use vocabulary::action::{
    ActionSpec, CHAIN_TRANSFER, FILES_PUT, MESSAGES_SEND, PAYMENTS_REFUND, WORKSPACES_CREATE,
};

/// Longest idempotency key a tool takes (Stripe's bound).
pub const IDEMPOTENCY_KEY_CHARS_MAX: usize = 255;
/// Most items a list tool returns at once.
pub const LIST_LIMIT_MAX: u64 = 100;
/// Most custom headers and most tags on one email (Resend states no bound; this is the tool's).
pub const EMAIL_MARKS_MAX: usize = 50;
/// Longest custom email header value, in characters (the tool's bound).
pub const HEADER_VALUE_CHARS_MAX: usize = 1000;
/// Longest tag name or value, in characters (Resend's).
pub const TAG_CHARS_MAX: usize = 256;

/// What a parameter holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// One of the action table's kinds, checked as a scenario's intents are.
    Param(ParamKind),
    /// An idempotency key: 1 to [`IDEMPOTENCY_KEY_CHARS_MAX`] printable ASCII characters.
    Key,
    /// A nonce: an integer from 0.
    Nonce,
    /// How many items to list: 1 to [`LIST_LIMIT_MAX`].
    Limit,
    /// `*` (create only if absent) or a quoted ETag.
    Precondition,
    /// A transaction hash: `0x` and 64 hex digits.
    Hash,
    /// Stripe's metadata: an object of strings, at most 50 keys of up to 40 characters, values
    /// up to 500.
    Metadata,
    /// S3's user metadata: an object of strings, each name an HTTP token and each value
    /// printable ASCII, sent as `x-amz-meta-NAME`; at most 2 KiB in all.
    FileMetadata,
    /// An email's custom headers: an object of strings, each name an HTTP token, each value one
    /// line.
    Headers,
    /// Resend's tags: a list of `{name, value}`, each of ASCII letters, digits, `_` and `-`.
    Tags,
}

/// One parameter of a tool.
#[derive(Debug, Clone, Copy)]
pub struct Param {
    pub name: &'static str,
    pub kind: Kind,
    pub required: bool,
    pub description: &'static str,
}

/// One tool.
#[derive(Debug, Clone, Copy)]
pub struct Tool {
    pub name: &'static str,
    pub title: &'static str,
    pub description: &'static str,
    /// The fake it calls.
    pub service: &'static str,
    /// The action a write tool performs; its parameters come first. `None` for a read.
    pub action: Option<&'static ActionSpec>,
    /// Its other parameters.
    pub extra: &'static [Param],
}

const fn optional(name: &'static str, kind: Kind, description: &'static str) -> Param {
    Param { name, kind, required: false, description }
}

const fn required(name: &'static str, kind: Kind, description: &'static str) -> Param {
    Param { name, kind, required: true, description }
}

const KEY: Param = optional(
    "idempotency_key",
    Kind::Key,
    "Sent as the Idempotency-Key header: the service answers a repeat of the same request under the same key with the first answer, for as long as it keeps keys.",
);

const METADATA: Param = optional(
    "metadata",
    Kind::Metadata,
    "Your own key-value pairs (strings), kept on the object and shown by every read: tag the write, e.g. {\"twice_intent\": \"<your step id>\"}, to find it again after a lost reply.",
);

/// Every tool, writes first, in the action table's order.
pub const TOOLS: &[Tool] = &[
    Tool {
        name: "refund_payment",
        title: "Refund a payment",
        description: "Refunds `amount` (in cents) of a payment intent through the payments API (POST /v1/refunds). Returns the refund, with the `metadata` you tagged it with (list_refunds shows it too).",
        service: "payments",
        action: Some(&PAYMENTS_REFUND),
        extra: &[KEY, METADATA],
    },
    Tool {
        name: "create_workspace",
        title: "Create a workspace",
        description: "Creates a workspace with a unique external id (POST /v1/workspaces). Returns the workspace, with the `metadata` you tagged it with (find_workspace shows it too).",
        service: "workspaces",
        action: Some(&WORKSPACES_CREATE),
        extra: &[KEY, METADATA],
    },
    Tool {
        name: "put_file",
        title: "Write a file",
        description: "Writes `body` to the object `bucket/key` of the file store (S3 PutObject). Returns its ETag. `metadata` is stored with the object (get_file shows it).",
        service: "files",
        action: Some(&FILES_PUT),
        extra: &[
            optional(
                "if_none_match",
                Kind::Precondition,
                "\"*\": write only if no object is there (If-None-Match).",
            ),
            optional(
                "if_match",
                Kind::Precondition,
                "A quoted ETag: write only if the object still has it (If-Match).",
            ),
            optional(
                "metadata",
                Kind::FileMetadata,
                "User metadata stored with the object, each pair sent as the header x-amz-meta-NAME (names are lowercased), e.g. {\"twice-intent\": \"<your step id>\"}.",
            ),
        ],
    },
    Tool {
        name: "transfer",
        title: "Transfer ether",
        description: "Sends `value` wei from the agent's account to `to` on the chain: reads the chain id and the account's next nonce (unless `nonce` is given), signs an EIP-1559 transfer and broadcasts it (eth_sendRawTransaction). Returns the transaction hash and the nonce used.",
        service: "chain",
        action: Some(&CHAIN_TRANSFER),
        extra: &[optional(
            "nonce",
            Kind::Nonce,
            "The nonce to sign with; a transfer signed again with the same nonce cannot be mined twice.",
        )],
    },
    Tool {
        name: "send_message",
        title: "Send an email",
        description: "Sends an email with `subject` and the plain-text `body` to `to` through the email API (POST /emails). Returns the message id; the API's answer means accepted, not delivered. `headers` and `tags` travel with the email (list_mailbox shows both).",
        service: "messages",
        action: Some(&MESSAGES_SEND),
        extra: &[
            KEY,
            optional(
                "headers",
                Kind::Headers,
                "Custom email headers, e.g. {\"X-Twice-Intent\": \"<your step id>\"}: they arrive with the message.",
            ),
            optional(
                "tags",
                Kind::Tags,
                "Resend's tags: [{\"name\": ..., \"value\": ...}], each of ASCII letters, digits, _ and -.",
            ),
        ],
    },
    Tool {
        name: "list_refunds",
        title: "List the refunds of a payment",
        description: "Lists the refunds of a payment intent, newest first (GET /v1/refunds), each with its amount and its `metadata`.",
        service: "payments",
        action: None,
        extra: &[
            required("payment_intent", Kind::Param(ParamKind::Text), "The payment intent, e.g. pi_4812."),
            optional("limit", Kind::Limit, "How many refunds at most (1 to 100; 10 if left out)."),
        ],
    },
    Tool {
        name: "find_workspace",
        title: "Find a workspace by external id",
        description: "Looks up the workspace with an external id (GET /v1/workspaces?external_id=). Returns it with its `metadata`, or found: false.",
        service: "workspaces",
        action: None,
        extra: &[required(
            "external_id",
            Kind::Param(ParamKind::Text),
            "The external id it was created with.",
        )],
    },
    Tool {
        name: "get_file",
        title: "Read a file",
        description: "Reads the object `bucket/key` (S3 GetObject): its body, ETag and user `metadata`, or found: false.",
        service: "files",
        action: None,
        extra: &[
            required("bucket", Kind::Param(ParamKind::Bucket), "The bucket."),
            required("key", Kind::Param(ParamKind::ObjectKey), "The object's key."),
        ],
    },
    Tool {
        name: "get_transaction_receipt",
        title: "Read a transaction's receipt",
        description: "Reads the receipt of a transaction by its hash (eth_getTransactionReceipt): mined with its status, or found: false while it is pending or unknown.",
        service: "chain",
        action: None,
        extra: &[required("hash", Kind::Hash, "The transaction hash: 0x and 64 hex digits.")],
    },
    Tool {
        name: "get_account",
        title: "Read the agent's chain account",
        description: "Reads the agent's own chain account: its address, its next nonce counting pending transactions (eth_getTransactionCount, \"pending\") and its balance in wei.",
        service: "chain",
        action: None,
        extra: &[],
    },
    Tool {
        name: "list_mailbox",
        title: "Read a mailbox",
        description: "Lists the messages delivered to an address, oldest first (the email service's test mailbox), each with its `headers` and `tags`.",
        service: "messages",
        action: None,
        extra: &[
            required("address", Kind::Param(ParamKind::Email), "The recipient's address."),
            optional("limit", Kind::Limit, "How many messages at most (1 to 100; 100 if left out)."),
        ],
    },
];

/// The tool named `name`.
pub fn find(name: &str) -> Option<&'static Tool> {
    TOOLS.iter().find(|t| t.name == name)
}

impl Tool {
    /// Every parameter: the action's, then the tool's own.
    pub fn params(&self) -> Vec<Param> {
        let from_action = self.action.into_iter().flat_map(|spec| spec.params.iter()).map(|p| Param {
            name: p.name,
            kind: Kind::Param(p.kind),
            required: p.required,
            description: "",
        });
        from_action.chain(self.extra.iter().copied()).collect()
    }

    /// The JSON Schema of the tool's arguments.
    pub fn input_schema(&self) -> Map<String, Value> {
        let mut properties = Map::new();
        for param in self.params() {
            let mut schema = kind_schema(param.kind);
            if !param.description.is_empty() {
                schema["description"] = Value::from(param.description);
            }
            properties.insert(param.name.to_string(), schema);
        }
        let required: Vec<&str> = self.params().iter().filter(|p| p.required).map(|p| p.name).collect();
        let schema = json!({
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": false,
        });
        match schema {
            Value::Object(map) => map,
            _ => Map::new(),
        }
    }

    /// The arguments, checked: every problem in one sentence each, `Ok` when there is none.
    pub fn check(&self, arguments: &Map<String, Value>) -> Result<(), Vec<String>> {
        let params = self.params();
        let mut problems = Vec::new();
        for name in arguments.keys() {
            if !params.iter().any(|p| p.name == name) {
                let known: Vec<&str> = params.iter().map(|p| p.name).collect();
                problems.push(format!("unknown argument \"{name}\" (this tool takes {})", known.join(", ")));
            }
        }
        for param in &params {
            match arguments.get(param.name) {
                None | Some(Value::Null) if param.required => {
                    problems.push(format!("missing required argument \"{}\"", param.name));
                }
                None | Some(Value::Null) => {}
                Some(value) => problems.extend(kind_problem(param.kind, param.name, value)),
            }
        }
        if self.name == "put_file"
            && arguments.contains_key("if_none_match")
            && arguments.contains_key("if_match")
        {
            problems.push("give if_none_match or if_match, not both".into());
        }
        if problems.is_empty() { Ok(()) } else { Err(problems) }
    }

    /// Whether calling it changes the world.
    pub fn writes(&self) -> bool {
        self.action.is_some()
    }
}

fn kind_schema(kind: Kind) -> Value {
    match kind {
        Kind::Param(kind) => vocabulary::schema::param_kind(kind),
        Kind::Key => json!({"type": "string", "minLength": 1, "maxLength": IDEMPOTENCY_KEY_CHARS_MAX}),
        Kind::Nonce => json!({"type": "integer", "minimum": 0}),
        Kind::Limit => json!({"type": "integer", "minimum": 1, "maximum": LIST_LIMIT_MAX}),
        Kind::Precondition => json!({"type": "string", "minLength": 1}),
        Kind::Hash => json!({"type": "string", "pattern": "^0x[0-9a-fA-F]{64}$"}),
        Kind::Metadata => json!({
            "type": "object",
            "maxProperties": metadata::KEYS_MAX,
            "propertyNames": {"minLength": 1, "maxLength": metadata::KEY_CHARS_MAX},
            "additionalProperties": {"type": "string", "maxLength": metadata::VALUE_CHARS_MAX},
        }),
        Kind::FileMetadata => json!({
            "type": "object",
            "propertyNames": {"pattern": TOKEN_PATTERN},
            "additionalProperties": {"type": "string", "pattern": "^[ -~]*$"},
        }),
        Kind::Headers => json!({
            "type": "object",
            "maxProperties": EMAIL_MARKS_MAX,
            "propertyNames": {"pattern": TOKEN_PATTERN},
            "additionalProperties": {"type": "string", "maxLength": HEADER_VALUE_CHARS_MAX},
        }),
        Kind::Tags => json!({
            "type": "array",
            "maxItems": EMAIL_MARKS_MAX,
            "items": {
                "type": "object",
                "properties": {"name": tag_word(), "value": tag_word()},
                "required": ["name", "value"],
                "additionalProperties": false,
            },
        }),
    }
}

/// An HTTP header name (RFC 9110's token), as a JSON Schema pattern.
const TOKEN_PATTERN: &str = "^[A-Za-z0-9!#$%&'*+.^_`|~-]+$";

fn is_token(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+.^_`|~-".contains(&b))
}

fn tag_word() -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": TAG_CHARS_MAX, "pattern": "^[A-Za-z0-9_-]+$"})
}

fn is_tag_word(value: Option<&Value>) -> bool {
    value.and_then(Value::as_str).is_some_and(|s| {
        (1..=TAG_CHARS_MAX).contains(&s.len())
            && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    })
}

/// Why `value` is no object of strings whose names and values `fits` takes, if it is not.
fn strings_problem(
    name: &str,
    value: &Value,
    keys_max: usize,
    fits: impl Fn(&str, &str) -> Result<(), String>,
) -> Option<String> {
    let Some(object) = value.as_object() else {
        return Some(format!("{name} must be an object of strings, found {value}"));
    };
    if object.len() > keys_max {
        return Some(format!("{name} holds at most {keys_max} entries, found {}", object.len()));
    }
    object.iter().find_map(|(key, item)| match item.as_str() {
        None => Some(format!("{name}[{key}] must be a string, found {item}")),
        Some(text) => fits(key, text).err().map(|why| format!("{name}[{key}]: {why}")),
    })
}

fn kind_problem(kind: Kind, name: &str, value: &Value) -> Option<String> {
    let text = value.as_str();
    match kind {
        Kind::Param(kind) => scenarios::validate::param_problem(kind, name, value),
        Kind::Key => match text {
            Some(t)
                if (1..=IDEMPOTENCY_KEY_CHARS_MAX).contains(&t.len())
                    && t.bytes().all(|b| b.is_ascii_graphic()) =>
            {
                None
            }
            _ => Some(format!(
                "{name} must be 1 to {IDEMPOTENCY_KEY_CHARS_MAX} printable ASCII characters without spaces, found {value}"
            )),
        },
        Kind::Nonce => {
            value.as_u64().is_none().then(|| format!("{name} must be an integer from 0, found {value}"))
        }
        Kind::Limit => match value.as_u64() {
            Some(n) if (1..=LIST_LIMIT_MAX).contains(&n) => None,
            _ => Some(format!("{name} must be an integer from 1 to {LIST_LIMIT_MAX}, found {value}")),
        },
        Kind::Precondition => match text {
            Some("*") => None,
            Some(t) if t.len() >= 2 && t.starts_with('"') && t.ends_with('"') => None,
            _ => Some(format!(
                "{name} must be \"*\" or a quoted ETag such as \"\\\"9a0364b9e99bb480dd25e1f0284c8555\\\"\", found {value}"
            )),
        },
        Kind::Hash => match text {
            Some(t)
                if t.len() == 66 && t.starts_with("0x") && t[2..].bytes().all(|b| b.is_ascii_hexdigit()) =>
            {
                None
            }
            _ => Some(format!("{name} must be 0x and 64 hex digits, found {value}")),
        },
        Kind::Metadata => strings_problem(name, value, metadata::KEYS_MAX, |key, text| {
            if key.is_empty() || key.chars().count() > metadata::KEY_CHARS_MAX {
                Err(format!("a key is 1 to {} characters", metadata::KEY_CHARS_MAX))
            } else if text.chars().count() > metadata::VALUE_CHARS_MAX {
                Err(format!("a value is at most {} characters", metadata::VALUE_CHARS_MAX))
            } else {
                Ok(())
            }
        }),
        Kind::FileMetadata => {
            let problem = strings_problem(name, value, usize::MAX, |key, text| {
                if !is_token(key) {
                    Err("a name is letters, digits and !#$%&'*+.^_`|~- (an HTTP header name)".into())
                } else if !text.bytes().all(|b| (b' '..=b'~').contains(&b)) {
                    Err("a value is printable ASCII".into())
                } else {
                    Ok(())
                }
            });
            let bytes: usize = value
                .as_object()
                .map_or(0, |o| o.iter().map(|(k, v)| k.len() + v.as_str().map_or(0, str::len)).sum());
            problem.or_else(|| {
                (bytes > fake_services::files::METADATA_BYTES_MAX).then(|| {
                    format!(
                        "{name} is {bytes} bytes of names and values; S3 takes at most {}",
                        fake_services::files::METADATA_BYTES_MAX
                    )
                })
            })
        }
        Kind::Headers => strings_problem(name, value, EMAIL_MARKS_MAX, |key, text| {
            if !is_token(key) {
                Err("a name is letters, digits and !#$%&'*+.^_`|~- (an HTTP header name)".into())
            } else if text.contains(['\r', '\n']) || text.chars().count() > HEADER_VALUE_CHARS_MAX {
                Err(format!("a value is one line of at most {HEADER_VALUE_CHARS_MAX} characters"))
            } else {
                Ok(())
            }
        }),
        Kind::Tags => match value.as_array() {
            Some(tags)
                if tags.len() <= EMAIL_MARKS_MAX
                    && tags.iter().all(|t| {
                        t.as_object().is_some_and(|o| o.len() == 2)
                            && is_tag_word(t.get("name"))
                            && is_tag_word(t.get("value"))
                    }) =>
            {
                None
            }
            _ => Some(format!(
                "{name} must be a list of at most {EMAIL_MARKS_MAX} {{\"name\", \"value\"}}, each 1 to {TAG_CHARS_MAX} ASCII letters, digits, _ or -, found {value}"
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_action_has_a_write_tool_and_every_service_a_read() {
        for spec in vocabulary::ACTIONS {
            let tool = TOOLS.iter().find(|t| t.action.is_some_and(|a| a.name == spec.name));
            assert!(tool.is_some_and(|t| t.service == spec.service), "no write tool for {}", spec.name);
            assert!(
                TOOLS.iter().any(|t| t.action.is_none() && t.service == spec.service),
                "no read tool for {}",
                spec.service
            );
        }
        let mut names: Vec<&str> = TOOLS.iter().map(|t| t.name).collect();
        names.dedup();
        assert_eq!(names.len(), TOOLS.len(), "tool names are unique");
    }

    #[test]
    fn arguments_are_checked_as_intents_are_and_every_problem_is_named() {
        let refund = find("refund_payment").expect("the tool");
        let args = |v: Value| v.as_object().cloned().expect("an object");
        assert_eq!(refund.check(&args(json!({"payment_intent": "pi_1", "amount": 500}))), Ok(()));
        let problems = refund
            .check(&args(
                json!({"payment_intent": "", "amount": 0, "idempotency_key": "a b", "currency": "usd"}),
            ))
            .expect_err("four problems");
        assert_eq!(problems.len(), 4, "{problems:?}");
        assert!(problems[0].starts_with("unknown argument \"currency\""), "{problems:?}");
        assert!(problems.iter().any(|p| p.starts_with("payment_intent must be a string")), "{problems:?}");
        assert!(problems.iter().any(|p| p.starts_with("amount must be an integer from 1")), "{problems:?}");
        assert!(problems.iter().any(|p| p.starts_with("idempotency_key must be")), "{problems:?}");
        let missing = refund.check(&args(json!({}))).expect_err("two missing");
        assert_eq!(
            missing,
            ["missing required argument \"payment_intent\"", "missing required argument \"amount\""]
        );
        let schema = Value::Object(refund.input_schema());
        assert_eq!(schema["required"], json!(["payment_intent", "amount"]));
        assert_eq!(schema["additionalProperties"], json!(false));
        assert_eq!(schema["properties"]["amount"]["type"], "integer");
    }

    /// Each tag argument, good and bad, by tool: the real APIs' own ways to mark a write.
    #[test]
    fn tags_are_checked_as_the_real_apis_take_them() {
        let args = |v: Value| v.as_object().cloned().expect("an object");
        let long = |n: usize| "k".repeat(n);
        let too_many: Map<String, Value> = (0..51).map(|i| (format!("k{i}"), json!("v"))).collect();
        let cases: Vec<(&str, Value, bool)> = vec![
            ("refund_payment", json!({"metadata": {"twice_intent": "r1"}}), true),
            ("refund_payment", json!({"metadata": {}}), true),
            ("refund_payment", json!({"metadata": [["twice_intent", "r1"]]}), false),
            ("refund_payment", json!({"metadata": {"n": 1}}), false),
            ("refund_payment", json!({"metadata": {long(41): "v"}}), false),
            ("refund_payment", json!({"metadata": {"k": long(501)}}), false),
            ("refund_payment", json!({"metadata": too_many}), false),
            ("create_workspace", json!({"metadata": {"twice_intent": "w1"}}), true),
            ("create_workspace", json!({"metadata": "twice_intent=w1"}), false),
            ("put_file", json!({"metadata": {"twice-intent": "f1"}}), true),
            ("put_file", json!({"metadata": {"twice intent": "f1"}}), false),
            ("put_file", json!({"metadata": {"twice-intent": "caf\u{e9}"}}), false),
            ("put_file", json!({"metadata": {"k": long(3000)}}), false),
            (
                "send_message",
                json!({"headers": {"X-Twice-Intent": "m1"}, "tags": [{"name": "intent", "value": "m1"}]}),
                true,
            ),
            ("send_message", json!({"headers": {"X-Twice-Intent": "m1\r\nBcc: x@y.z"}}), false),
            ("send_message", json!({"headers": {"X Twice": "m1"}}), false),
            ("send_message", json!({"tags": {"name": "intent", "value": "m1"}}), false),
            ("send_message", json!({"tags": [{"name": "intent", "value": "m 1"}]}), false),
            ("send_message", json!({"tags": [{"name": "intent"}]}), false),
            ("send_message", json!({"tags": [{"name": "a", "value": "b", "extra": "c"}]}), false),
        ];
        let base = |tool: &str| match tool {
            "refund_payment" => json!({"payment_intent": "pi_1", "amount": 500}),
            "create_workspace" => json!({"external_id": "org-1", "name": "Org"}),
            "put_file" => json!({"bucket": "reports", "key": "q3.csv", "body": "x"}),
            _ => json!({"to": "ada@example.com", "subject": "s", "body": "b"}),
        };
        for (tool, marks, good) in cases {
            let mut call = args(base(tool));
            call.extend(args(marks.clone()));
            let checked = find(tool).expect("the tool").check(&call);
            assert_eq!(checked.is_ok(), good, "{tool} {marks}: {checked:?}");
        }
        for tool in ["refund_payment", "create_workspace", "put_file"] {
            let schema = Value::Object(find(tool).expect("the tool").input_schema());
            assert_eq!(schema["properties"]["metadata"]["type"], "object", "{tool}");
        }
        let send = Value::Object(find("send_message").expect("the tool").input_schema());
        assert_eq!(send["properties"]["headers"]["type"], "object");
        assert_eq!(send["properties"]["tags"]["items"]["required"], json!(["name", "value"]));
    }
}
