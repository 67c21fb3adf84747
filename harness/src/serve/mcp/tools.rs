//! The tools `twice mcp` offers, as data: one write tool per action of the action table (its
//! parameters are the action's, plus what the service honours: an idempotency key, a
//! precondition, a nonce) and the reads an agent needs before it retries. Each tool is one
//! HTTP exchange with a fake (a transfer: the reads a wallet makes, then one broadcast), so
//! every fault a scenario arms applies to it; the server itself never retries.

use serde_json::{Map, Value, json};
use vocabulary::ParamKind;
use vocabulary::action::{
    ActionSpec, CHAIN_TRANSFER, FILES_PUT, MESSAGES_SEND, PAYMENTS_REFUND, WORKSPACES_CREATE,
};

/// Longest idempotency key a tool takes (Stripe's bound).
pub const IDEMPOTENCY_KEY_CHARS_MAX: usize = 255;
/// Most items a list tool returns at once.
pub const LIST_LIMIT_MAX: u64 = 100;

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

/// Every tool, writes first, in the action table's order.
pub const TOOLS: &[Tool] = &[
    Tool {
        name: "refund_payment",
        title: "Refund a payment",
        description: "Refunds `amount` (in cents) of a payment intent through the payments API (POST /v1/refunds). Returns the refund.",
        service: "payments",
        action: Some(&PAYMENTS_REFUND),
        extra: &[KEY],
    },
    Tool {
        name: "create_workspace",
        title: "Create a workspace",
        description: "Creates a workspace with a unique external id (POST /v1/workspaces). Returns the workspace.",
        service: "workspaces",
        action: Some(&WORKSPACES_CREATE),
        extra: &[KEY],
    },
    Tool {
        name: "put_file",
        title: "Write a file",
        description: "Writes `body` to the object `bucket/key` of the file store (S3 PutObject). Returns its ETag.",
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
        description: "Sends an email with `subject` and the plain-text `body` to `to` through the email API (POST /emails). Returns the message id; the API's answer means accepted, not delivered.",
        service: "messages",
        action: Some(&MESSAGES_SEND),
        extra: &[KEY],
    },
    Tool {
        name: "list_refunds",
        title: "List the refunds of a payment",
        description: "Lists the refunds of a payment intent, newest first (GET /v1/refunds).",
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
        description: "Looks up the workspace with an external id (GET /v1/workspaces?external_id=). Returns it, or found: false.",
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
        description: "Reads the object `bucket/key` (S3 GetObject): its body and ETag, or found: false.",
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
        description: "Lists the messages delivered to an address, oldest first (the email service's test mailbox).",
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
    }
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
}
