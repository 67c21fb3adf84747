//! How each action talks to its service: what its first send must read and record before it
//! leaves (a precondition, a signed transaction), the write, what its answer means, and the
//! lookup that reconciliation uses to ask the service what really happened.
//!
//! | action | write | guard | lookup |
//! |---|---|---|---|
//! | `payments.refund` | `POST /v1/refunds` | idempotency key | refunds of the payment intent, by `metadata[twice_intent]` |
//! | `workspaces.create` | `POST /v1/workspaces` | idempotency key, fencing token | the workspace with the external id |
//! | `files.put` | `PUT /{bucket}/{key}` | `If-None-Match: *` or `If-Match` of the version read before the first send | `HEAD`: the ETag is the quoted MD5 of the body |
//! | `chain.transfer` | `eth_sendRawTransaction` of bytes signed once | the nonce | the receipt of the hash, the account's nonce |

use md5::{Digest, Md5};
use serde_json::{Value, json};

use crate::config::{Acks, Config, Contract, Service};
use crate::model::{Action, CHAIN_PRIVATE_KEY_SECRET, Evidence, Intent, Precondition};
use crate::signing::{ChainKey, Transfer};
use crate::world::{HttpRequest, HttpResponse, SendError, Transport};

/// The metadata key under which a refund carries the intent's id, so that a lookup can tell
/// this intent's refund from any other refund of the same payment intent.
pub const INTENT_METADATA_KEY: &str = "twice_intent";

/// What one write attempt established.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOutcome {
    /// The service says the effect exists, with this id.
    Done { external_id: String },
    /// A definite refusal: this attempt did not execute.
    Rejected { error: String },
    /// This attempt certainly did not execute and may be sent again (never sent, or 429).
    NotExecuted { error: String },
    /// This attempt may or may not have executed.
    Ambiguous { error: String },
    /// The service refused a fencing token: a newer worker owns the intent.
    Fenced { error: String },
    /// This attempt did not execute because the object or the account is no longer as the
    /// intent was prepared against: an earlier attempt of ours may be what moved it, so only
    /// a read-back can tell. `definite`: the state certainly moved on (S3's 412, a nonce
    /// already used); otherwise the service lost a race (409 `ConditionalRequestConflict`, a
    /// replacement underpriced).
    Conflict { error: String, definite: bool },
}

/// What a lookup found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// The effect exists. `params_match` is false if it differs from the authorised payload.
    Found { external_id: String, params_match: bool },
    /// The service does not show it (which is final only once settle and read-lag bounds passed).
    Absent,
    /// The effect is not there and can no longer appear: the object holds a version that is
    /// neither ours nor the one the precondition names, or another transaction used the
    /// transfer's nonce. Final, like `Absent`, once the settle and read-lag bounds passed.
    Superseded { what: String },
    /// The lookup itself failed.
    Failed { error: String },
}

/// Most pages a lookup follows.
const LOOKUP_PAGES_MAX: usize = 10;

fn base(service: &Service) -> &str {
    service.url.trim_end_matches('/')
}

/// The write request for one attempt. `Err` when the intent lacks what its first send must
/// have recorded (a `files.put` precondition, a `chain.transfer`'s signed bytes): nothing may
/// be sent then.
pub fn write_request(
    action: &Action,
    intent: &Intent,
    config: &Config,
    service: &Service,
    fencing_token: u64,
) -> Result<HttpRequest, String> {
    let timeout_ms = config.limits.request_timeout_ms;
    Ok(match action {
        Action::Refund { payment_intent, amount } => {
            let body = form_urlencoded::Serializer::new(String::new())
                .append_pair("payment_intent", payment_intent)
                .append_pair("amount", &amount.to_string())
                .append_pair(&format!("metadata[{INTENT_METADATA_KEY}]"), &intent.id)
                .finish();
            HttpRequest {
                method: "POST",
                url: format!("{}/v1/refunds", base(service)),
                headers: vec![
                    ("authorization".into(), format!("Bearer {}", api_key(config))),
                    ("content-type".into(), "application/x-www-form-urlencoded".into()),
                    ("idempotency-key".into(), intent.key.clone()),
                ],
                body: body.into_bytes(),
                timeout_ms,
            }
        }
        Action::CreateWorkspace { external_id, name } => {
            let mut headers = vec![
                ("content-type".into(), "application/json".into()),
                ("idempotency-key".into(), intent.key.clone()),
            ];
            if service.contract.fencing {
                headers.push(("fencing-token".into(), fencing_token.to_string()));
            }
            HttpRequest {
                method: "POST",
                url: format!("{}/v1/workspaces", base(service)),
                headers,
                body: json!({"external_id": external_id, "name": name}).to_string().into_bytes(),
                timeout_ms,
            }
        }
        Action::PutObject { bucket, key, body } => {
            let mut headers = vec![("content-type".to_string(), "application/octet-stream".to_string())];
            if service.contract.conditional_writes {
                match &intent.evidence.precondition {
                    Some(Precondition::IfNoneMatch) => headers.push(("if-none-match".into(), "*".into())),
                    Some(Precondition::IfMatch(etag)) => headers.push(("if-match".into(), etag.clone())),
                    None => return Err("no precondition was recorded before the first send".into()),
                }
            }
            HttpRequest {
                method: "PUT",
                url: object_url(service, bucket, key),
                headers,
                body: body.as_bytes().to_vec(),
                timeout_ms,
            }
        }
        Action::Transfer { .. } => {
            let raw = intent
                .evidence
                .raw_tx
                .as_deref()
                .ok_or("no signed transaction was recorded before the first broadcast")?;
            rpc_request(service, "eth_sendRawTransaction", json!([raw]), timeout_ms)
        }
    })
}

fn api_key(config: &Config) -> &str {
    config.secrets.get("payments_api_key").map(String::as_str).unwrap_or("sk_test_twice")
}

fn error_code(response: &HttpResponse) -> String {
    response
        .json()
        .and_then(|b| b.pointer("/error/code").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_default()
}

fn describe(response: &HttpResponse) -> String {
    let message = response
        .json()
        .and_then(|b| b.pointer("/error/message").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_else(|| String::from_utf8_lossy(&response.body).chars().take(200).collect());
    format!("HTTP {}: {message}", response.status)
}

/// What an attempt's answer means. A timeout is never a "no".
pub fn classify_write(
    action: &Action,
    intent: &Intent,
    answer: Result<HttpResponse, SendError>,
) -> WriteOutcome {
    let response = match answer {
        Err(SendError::NotSent(e)) => return WriteOutcome::NotExecuted { error: e },
        Err(SendError::Ambiguous(e)) => return WriteOutcome::Ambiguous { error: e },
        Ok(r) => r,
    };
    match action {
        Action::PutObject { body, .. } => return classify_put(body, &response),
        Action::Transfer { .. } => return classify_broadcast(intent, &response),
        Action::Refund { .. } | Action::CreateWorkspace { .. } => {}
    }
    let error = describe(&response);
    match response.status {
        200..=299 => {
            match response.json().and_then(|b| b.get("id").and_then(Value::as_str).map(str::to_string)) {
                Some(external_id) if matches_action(action, &response.json().unwrap_or(Value::Null)) => {
                    WriteOutcome::Done { external_id }
                }
                Some(_) => WriteOutcome::Ambiguous {
                    error: "a success whose parameters differ from the intent's".into(),
                },
                None => WriteOutcome::Ambiguous { error: format!("an unreadable success: {error}") },
            }
        }
        409 => match error_code(&response).as_str() {
            "stale_fencing_token" => WriteOutcome::Fenced { error },
            // In flight under this key, or a create whose business id exists (perhaps ours):
            // only a lookup can tell.
            _ => WriteOutcome::Ambiguous { error },
        },
        // Stripe saves no result for a 429: the request did not execute.
        429 => WriteOutcome::NotExecuted { error },
        408 => WriteOutcome::Ambiguous { error },
        400 if error_code(&response).is_empty() && error.contains("idempotency") => {
            WriteOutcome::Ambiguous { error }
        }
        400..=499 => WriteOutcome::Rejected { error },
        _ => WriteOutcome::Ambiguous { error },
    }
}

/// A `PUT`'s answer. S3 answers a conditional write that lost with 412 (the condition did not
/// hold) or 409 (a concurrent conditional write won): neither executed, and either may be
/// our own earlier attempt's doing.
fn classify_put(body: &str, response: &HttpResponse) -> WriteOutcome {
    let error = describe_s3(response);
    match response.status {
        200..=299 => match header(response, "etag") {
            Some(etag) if etag == quoted_md5(body.as_bytes()) => WriteOutcome::Done { external_id: etag },
            Some(etag) => WriteOutcome::Ambiguous {
                error: format!("a success with ETag {etag}, not the MD5 of the body that was sent"),
            },
            None => WriteOutcome::Ambiguous { error: "a success without an ETag".into() },
        },
        412 => WriteOutcome::Conflict { error, definite: true },
        409 => WriteOutcome::Conflict { error, definite: false },
        429 => WriteOutcome::NotExecuted { error },
        408 => WriteOutcome::Ambiguous { error },
        400..=499 => WriteOutcome::Rejected { error },
        _ => WriteOutcome::Ambiguous { error },
    }
}

/// An `eth_sendRawTransaction`'s answer, in geth's words.
fn classify_broadcast(intent: &Intent, response: &HttpResponse) -> WriteOutcome {
    let ours = intent.evidence.tx_hash.clone().unwrap_or_default();
    let error = format!("HTTP {}: {}", response.status, excerpt(&response.body));
    match response.status {
        200 => {}
        429 => return WriteOutcome::NotExecuted { error },
        400..=499 if response.status != 408 => return WriteOutcome::Rejected { error },
        _ => return WriteOutcome::Ambiguous { error },
    }
    match rpc_reply(response) {
        Some(Rpc::Result(Value::String(hash))) if hash.eq_ignore_ascii_case(&ours) => {
            WriteOutcome::Done { external_id: ours }
        }
        Some(Rpc::Result(other)) => {
            WriteOutcome::Ambiguous { error: format!("the node answered {other}, not the hash {ours}") }
        }
        Some(Rpc::Error { code, message }) => {
            let error = format!("JSON-RPC error {code}: {message}");
            let lower = message.to_ascii_lowercase();
            if lower.contains("already known") {
                // The node holds exactly these bytes already: a broadcast of ours arrived.
                WriteOutcome::Done { external_id: ours }
            } else if lower.contains("nonce too low") {
                WriteOutcome::Conflict { error, definite: true }
            } else if lower.contains("replacement transaction underpriced") {
                WriteOutcome::Conflict { error, definite: false }
            } else if code == -32603 {
                // An internal error says nothing of whether the transaction was pooled.
                WriteOutcome::Ambiguous { error }
            } else {
                WriteOutcome::Rejected { error }
            }
        }
        None => WriteOutcome::Ambiguous { error: format!("an unreadable answer: {error}") },
    }
}

/// Whether a service's object carries exactly the intent's parameters.
fn matches_action(action: &Action, object: &Value) -> bool {
    match action {
        Action::Refund { payment_intent, amount } => {
            object.get("payment_intent").and_then(Value::as_str) == Some(payment_intent)
                && object.get("amount").and_then(Value::as_u64) == Some(*amount)
        }
        Action::CreateWorkspace { external_id, name } => {
            object.get("external_id").and_then(Value::as_str) == Some(external_id)
                && object.get("name").and_then(Value::as_str) == Some(name)
        }
        // Their answers carry no object: an ETag or a hash stands for it.
        Action::PutObject { .. } | Action::Transfer { .. } => false,
    }
}

/// The first lookup request; `cursor` continues a paged one.
pub fn lookup_request(
    action: &Action,
    intent: &Intent,
    config: &Config,
    service: &Service,
    cursor: Option<&str>,
) -> HttpRequest {
    let timeout_ms = config.limits.request_timeout_ms;
    let (url, headers) = match action {
        Action::Refund { payment_intent, .. } => {
            let mut query = form_urlencoded::Serializer::new(String::new());
            query.append_pair("payment_intent", payment_intent).append_pair("limit", "100");
            if let Some(c) = cursor {
                query.append_pair("starting_after", c);
            }
            (
                format!("{}/v1/refunds?{}", base(service), query.finish()),
                vec![("authorization".to_string(), format!("Bearer {}", api_key(config)))],
            )
        }
        Action::CreateWorkspace { external_id, .. } => {
            let query = form_urlencoded::Serializer::new(String::new())
                .append_pair("external_id", external_id)
                .finish();
            (format!("{}/v1/workspaces?{query}", base(service)), vec![])
        }
        Action::PutObject { bucket, key, .. } => {
            return HttpRequest {
                method: "HEAD",
                url: object_url(service, bucket, key),
                headers: vec![],
                body: vec![],
                timeout_ms,
            };
        }
        // The receipt of the recorded hash: the first of a transfer's lookup requests (see
        // `lookup_transfer` for the others).
        Action::Transfer { .. } => {
            let hash = intent.evidence.tx_hash.as_deref().unwrap_or_default();
            return rpc_request(service, "eth_getTransactionReceipt", json!([hash]), timeout_ms);
        }
    };
    HttpRequest { method: "GET", url, headers, body: vec![], timeout_ms }
}

/// One page of a lookup: found, absent, failed, or "look at the next page after this id".
pub fn classify_lookup_page(
    action: &Action,
    intent: &Intent,
    answer: Result<HttpResponse, SendError>,
) -> Result<Lookup, String> {
    let response = match answer {
        Err(e) => return Ok(Lookup::Failed { error: e.to_string() }),
        Ok(r) => r,
    };
    if response.status != 200 {
        return Ok(Lookup::Failed { error: describe(&response) });
    }
    let Some(page) = response.json() else {
        return Ok(Lookup::Failed { error: "an unreadable list".into() });
    };
    let data = page.get("data").and_then(Value::as_array).cloned().unwrap_or_default();
    let ours = data.iter().find(|item| match action {
        Action::Refund { .. } => {
            item.pointer(&format!("/metadata/{INTENT_METADATA_KEY}")).and_then(Value::as_str)
                == Some(intent.id.as_str())
        }
        // External ids are unique per intent: a workspace with ours is ours.
        Action::CreateWorkspace { external_id, .. } => {
            item.get("external_id").and_then(Value::as_str) == Some(external_id.as_str())
        }
        // Not listed in pages (see `lookup_object` and `lookup_transfer`).
        Action::PutObject { .. } | Action::Transfer { .. } => false,
    });
    if let Some(item) = ours {
        let external_id = item.get("id").and_then(Value::as_str).unwrap_or_default().to_string();
        return Ok(Lookup::Found { external_id, params_match: matches_action(action, item) });
    }
    let more = page.get("has_more").and_then(Value::as_bool).unwrap_or(false);
    match (more, data.last().and_then(|l| l.get("id")).and_then(Value::as_str)) {
        (true, Some(last)) => Err(last.to_string()),
        _ => Ok(Lookup::Absent),
    }
}

/// Runs a lookup, following pages up to a bound.
pub async fn lookup(
    action: &Action,
    intent: &Intent,
    config: &Config,
    service: &Service,
    transport: &dyn Transport,
) -> Lookup {
    match action {
        Action::PutObject { .. } => return lookup_object(action, intent, config, service, transport).await,
        Action::Transfer { .. } => return lookup_transfer(action, intent, config, service, transport).await,
        Action::Refund { .. } | Action::CreateWorkspace { .. } => {}
    }
    let mut cursor: Option<String> = None;
    for _ in 0..LOOKUP_PAGES_MAX {
        let request = lookup_request(action, intent, config, service, cursor.as_deref());
        match classify_lookup_page(action, intent, transport.send(request).await) {
            Ok(found) => return found,
            Err(next) => cursor = Some(next),
        }
    }
    Lookup::Failed { error: format!("more than {LOOKUP_PAGES_MAX} pages to search") }
}

/// Whether a resend of this action can take effect at most once whatever became of its
/// earlier sends, without an idempotency key: a conditional put (once one send landed, the
/// condition no longer holds) and a signed transaction (its nonce is used once). Such an
/// intent is sent again, when a lookup did not find it, without waiting for the settle bound.
pub fn resend_is_guarded(action: &Action, contract: &Contract) -> bool {
    match action {
        Action::PutObject { .. } => contract.conditional_writes,
        Action::Transfer { .. } => true,
        Action::Refund { .. } | Action::CreateWorkspace { .. } => false,
    }
}

/// Whether a success must be read back before `confirmed`: where acks may lie, and for a
/// transfer, which a node accepts into its pool before it is mined.
pub fn read_back_success(action: &Action, contract: &Contract) -> bool {
    contract.acks == Acks::MayLie || matches!(action, Action::Transfer { .. })
}

/// Whether the intent still needs its first send's reads and records (a precondition, a
/// signature) before anything may be sent.
pub fn needs_preparation(action: &Action, evidence: &Evidence, contract: &Contract) -> bool {
    match action {
        Action::PutObject { .. } => contract.conditional_writes && evidence.precondition.is_none(),
        Action::Transfer { .. } => evidence.raw_tx.is_none(),
        Action::Refund { .. } | Action::CreateWorkspace { .. } => false,
    }
}

/// `files.put`: reads the object and says what every send of the intent must require of it:
/// that it still does not exist, or that it is still the version read now.
pub async fn read_precondition(
    action: &Action,
    config: &Config,
    service: &Service,
    transport: &dyn Transport,
) -> Result<Precondition, String> {
    let Action::PutObject { bucket, key, .. } = action else {
        return Err(format!("{} has no precondition", action.name()));
    };
    let request = HttpRequest {
        method: "HEAD",
        url: object_url(service, bucket, key),
        headers: vec![],
        body: vec![],
        timeout_ms: config.limits.request_timeout_ms,
    };
    let response = transport.send(request).await.map_err(|e| format!("HEAD {bucket}/{key}: {e}"))?;
    match response.status {
        200 => header(&response, "etag")
            .map(Precondition::IfMatch)
            .ok_or_else(|| format!("HEAD {bucket}/{key}: no ETag")),
        404 => Ok(Precondition::IfNoneMatch),
        _ => Err(format!("HEAD {bucket}/{key}: {}", describe_s3(&response))),
    }
}

/// What a transfer is signed against: the chain, the account's pending nonce and the fees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainFacts {
    pub chain_id: u64,
    /// `eth_getTransactionCount(account, "pending")`: the node's view, which may lag (a stale
    /// read) or miss what this log signed and has not broadcast yet; the nonce allocation
    /// takes the larger of it and what the log has claimed.
    pub pending_nonce: u64,
    pub max_fee_per_gas_wei: u128,
    pub max_priority_fee_per_gas_wei: u128,
}

impl ChainFacts {
    /// The transfer to sign for `action` with `nonce`.
    pub fn transfer(&self, action: &Action, nonce: u64) -> Result<Transfer, String> {
        let Action::Transfer { to, value_wei } = action else {
            return Err(format!("{} is not a transfer", action.name()));
        };
        Ok(Transfer {
            chain_id: self.chain_id,
            nonce,
            to: to.clone(),
            value_wei: *value_wei,
            max_fee_per_gas_wei: self.max_fee_per_gas_wei,
            max_priority_fee_per_gas_wei: self.max_priority_fee_per_gas_wei,
        })
    }
}

/// The chain account's key, from the `chain_private_key` secret.
pub fn chain_key(config: &Config) -> Result<ChainKey, String> {
    let text = config
        .secrets
        .get(CHAIN_PRIVATE_KEY_SECRET)
        .ok_or_else(|| format!("init gave no secret \"{CHAIN_PRIVATE_KEY_SECRET}\""))?;
    ChainKey::parse(text).map_err(|e| e.to_string())
}

/// Reads what a transfer from `account` is signed against. The fees leave room for the base
/// fee to double: twice the node's gas price, plus its suggested tip.
pub async fn chain_facts(
    account: &str,
    config: &Config,
    service: &Service,
    transport: &dyn Transport,
) -> Result<ChainFacts, String> {
    let timeout_ms = config.limits.request_timeout_ms;
    let call = |method: &'static str, params: Value| async move {
        let answer = transport.send(rpc_request(service, method, params, timeout_ms)).await;
        rpc_result(method, answer)
    };
    let chain_id = quantity(&call("eth_chainId", json!([])).await?)
        .and_then(|n| u64::try_from(n).ok())
        .ok_or("eth_chainId: not a quantity")?;
    let pending_nonce = quantity(&call("eth_getTransactionCount", json!([account, "pending"])).await?)
        .and_then(|n| u64::try_from(n).ok())
        .ok_or("eth_getTransactionCount: not a quantity")?;
    let gas_price =
        quantity(&call("eth_gasPrice", json!([])).await?).ok_or("eth_gasPrice: not a quantity")?;
    let tip = match call("eth_maxPriorityFeePerGas", json!([])).await {
        Ok(v) => quantity(&v).ok_or("eth_maxPriorityFeePerGas: not a quantity")?,
        // A node without the method: the gas price already includes a tip.
        Err(e) if e.contains("-32601") => 0,
        Err(e) => return Err(e),
    };
    let max_fee = gas_price.saturating_mul(2).saturating_add(tip);
    Ok(ChainFacts {
        chain_id,
        pending_nonce,
        max_fee_per_gas_wei: max_fee,
        max_priority_fee_per_gas_wei: tip.min(max_fee),
    })
}

/// `files.put`'s lookup: `HEAD`, and the ETag compared with the MD5 of the body.
async fn lookup_object(
    action: &Action,
    intent: &Intent,
    config: &Config,
    service: &Service,
    transport: &dyn Transport,
) -> Lookup {
    let Action::PutObject { bucket, key, body } = action else { return Lookup::Absent };
    let request = lookup_request(action, intent, config, service, None);
    let response = match transport.send(request).await {
        Ok(r) => r,
        Err(e) => return Lookup::Failed { error: e.to_string() },
    };
    let before = intent.evidence.precondition.as_ref();
    match response.status {
        200 => {
            let Some(etag) = header(&response, "etag") else {
                return Lookup::Failed { error: format!("HEAD {bucket}/{key}: no ETag") };
            };
            if etag == quoted_md5(body.as_bytes()) {
                return Lookup::Found { external_id: etag, params_match: true };
            }
            match before {
                // Still the version read before the first send (or no condition to compare
                // with): ours has not landed, and still can.
                Some(Precondition::IfMatch(read)) if *read == etag => Lookup::Absent,
                None => Lookup::Absent,
                Some(_) => Lookup::Superseded {
                    what: format!(
                        "{bucket}/{key} holds version {etag}: neither ours nor the one read before the first send"
                    ),
                },
            }
        }
        404 => match before {
            Some(Precondition::IfMatch(read)) => Lookup::Superseded {
                what: format!("{bucket}/{key} was deleted since version {read} was read"),
            },
            _ => Lookup::Absent,
        },
        _ => Lookup::Failed { error: format!("HEAD {bucket}/{key}: {}", describe_s3(&response)) },
    }
}

/// `chain.transfer`'s lookup: the receipt of the hash; without one, whether the account's
/// nonce moved past ours (another transaction used it) or the transaction waits in the pool.
async fn lookup_transfer(
    action: &Action,
    intent: &Intent,
    config: &Config,
    service: &Service,
    transport: &dyn Transport,
) -> Lookup {
    let evidence = &intent.evidence;
    let (Some(hash), Some(nonce), Some(from)) = (&evidence.tx_hash, evidence.nonce, &evidence.from) else {
        // Never signed, so never broadcast.
        return Lookup::Absent;
    };
    let timeout_ms = config.limits.request_timeout_ms;
    let call = |method: &'static str, params: Value| async move {
        let answer = transport.send(rpc_request(service, method, params, timeout_ms)).await;
        rpc_result(method, answer)
    };
    let receipt = transport.send(lookup_request(action, intent, config, service, None)).await;
    match rpc_result("eth_getTransactionReceipt", receipt) {
        Err(error) => return Lookup::Failed { error },
        Ok(Value::Null) => {}
        Ok(receipt) => {
            let block = receipt.get("blockNumber").and_then(quantity).unwrap_or_default();
            return match receipt.get("status").and_then(quantity) {
                Some(1) => Lookup::Found { external_id: hash.clone(), params_match: true },
                Some(0) => {
                    Lookup::Superseded { what: format!("{hash} was mined in block {block} and reverted") }
                }
                _ => Lookup::Failed { error: format!("a receipt without a status: {receipt}") },
            };
        }
    }
    let latest = match call("eth_getTransactionCount", json!([from, "latest"])).await {
        Ok(v) => quantity(&v),
        Err(error) => return Lookup::Failed { error },
    };
    match latest {
        None => return Lookup::Failed { error: "eth_getTransactionCount: not a quantity".into() },
        Some(latest) if latest > u128::from(nonce) => {
            return Lookup::Superseded {
                what: format!(
                    "nonce {nonce} of {from} is used (its next nonce is {latest}), and {hash} has no receipt"
                ),
            };
        }
        Some(_) => {}
    }
    match call("eth_getTransactionByHash", json!([hash])).await {
        Err(error) => Lookup::Failed { error },
        Ok(Value::Null) => Lookup::Absent,
        // Not mined yet: it will be, or another transaction will take its nonce.
        Ok(_) => Lookup::Failed { error: format!("{hash} waits in the node's pool, not mined yet") },
    }
}

/// `http://host/bucket/key`: path-style addressing, the key as it is (it holds only
/// characters that need no escaping; `Action::parse` makes sure).
fn object_url(service: &Service, bucket: &str, key: &str) -> String {
    format!("{}/{bucket}/{key}", base(service))
}

/// The quoted MD5 of `body`, in lowercase hex: S3's ETag for a simple `PUT`.
pub fn quoted_md5(body: &[u8]) -> String {
    let digest = Md5::digest(body);
    format!("\"{}\"", digest.iter().map(|b| format!("{b:02x}")).collect::<String>())
}

fn header(response: &HttpResponse, name: &str) -> Option<String> {
    response.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.trim().to_string())
}

fn excerpt(body: &[u8]) -> String {
    String::from_utf8_lossy(body).chars().take(200).collect()
}

/// `HTTP 412: PreconditionFailed: At least one of ...`, from S3's XML error body.
fn describe_s3(response: &HttpResponse) -> String {
    let text = String::from_utf8_lossy(&response.body);
    let field = |name: &str| {
        let open = format!("<{name}>");
        let start = text.find(&open)? + open.len();
        let end = text[start..].find(&format!("</{name}>"))? + start;
        Some(text[start..end].to_string())
    };
    match (field("Code"), field("Message")) {
        (Some(code), Some(message)) => format!("HTTP {}: {code}: {message}", response.status),
        (Some(code), None) => format!("HTTP {}: {code}", response.status),
        _ => format!("HTTP {}: {}", response.status, excerpt(&response.body)),
    }
}

/// One JSON-RPC call to `service`.
pub fn rpc_request(service: &Service, method: &str, params: Value, timeout_ms: u64) -> HttpRequest {
    HttpRequest {
        method: "POST",
        url: format!("{}/", base(service)),
        headers: vec![("content-type".into(), "application/json".into())],
        body: json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string().into_bytes(),
        timeout_ms,
    }
}

/// A JSON-RPC reply.
enum Rpc {
    Result(Value),
    Error { code: i64, message: String },
}

fn rpc_reply(response: &HttpResponse) -> Option<Rpc> {
    let body = response.json()?;
    if let Some(error) = body.get("error").filter(|e| !e.is_null()) {
        return Some(Rpc::Error {
            code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
            message: error.get("message").and_then(Value::as_str).unwrap_or_default().to_string(),
        });
    }
    body.get("result").cloned().map(Rpc::Result)
}

/// A read's result, or what went wrong, as text.
fn rpc_result(method: &str, answer: Result<HttpResponse, SendError>) -> Result<Value, String> {
    let response = answer.map_err(|e| format!("{method}: {e}"))?;
    if response.status != 200 {
        return Err(format!("{method}: HTTP {}: {}", response.status, excerpt(&response.body)));
    }
    match rpc_reply(&response) {
        Some(Rpc::Result(v)) => Ok(v),
        Some(Rpc::Error { code, message }) => Err(format!("{method}: JSON-RPC error {code}: {message}")),
        None => Err(format!("{method}: an unreadable answer: {}", excerpt(&response.body))),
    }
}

/// A JSON-RPC quantity (`"0x1a"`).
fn quantity(value: &Value) -> Option<u128> {
    let digits = value.as_str()?.strip_prefix("0x")?;
    if digits.is_empty() {
        return None;
    }
    u128::from_str_radix(digits, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, body: Value) -> Result<HttpResponse, SendError> {
        Ok(HttpResponse { status, headers: vec![], body: body.to_string().into_bytes() })
    }

    #[test]
    fn a_timeout_is_never_a_no() {
        let refund = Action::Refund { payment_intent: "pi_1".into(), amount: 100 };
        let err =
            |code: &str| json!({"error": {"type": "invalid_request_error", "code": code, "message": "m"}});
        let cases: Vec<(Result<HttpResponse, SendError>, &str)> = vec![
            (answer(200, json!({"id": "re_1", "payment_intent": "pi_1", "amount": 100})), "done"),
            (answer(200, json!({"id": "re_1", "payment_intent": "pi_1", "amount": 99})), "ambiguous"),
            (answer(200, json!("not an object")), "ambiguous"),
            (Ok(HttpResponse { status: 200, headers: vec![], body: b"<html>".to_vec() }), "ambiguous"),
            (answer(500, err("")), "ambiguous"),
            (answer(503, json!({})), "ambiguous"),
            (answer(409, err("idempotency_key_in_use")), "ambiguous"),
            (answer(409, err("workspace_exists")), "ambiguous"),
            (answer(409, err("stale_fencing_token")), "fenced"),
            (answer(429, err("")), "not_executed"),
            (answer(402, err("card_declined")), "rejected"),
            (answer(404, err("resource_missing")), "rejected"),
            (Err(SendError::NotSent("refused".into())), "not_executed"),
            (Err(SendError::Ambiguous("timeout".into())), "ambiguous"),
        ];
        for (answer, want) in cases {
            assert_eq!(
                kind(&classify_write(&refund, &intent(Evidence::default()), answer.clone())),
                want,
                "{answer:?}"
            );
        }
    }

    fn kind(outcome: &WriteOutcome) -> &'static str {
        match outcome {
            WriteOutcome::Done { .. } => "done",
            WriteOutcome::Rejected { .. } => "rejected",
            WriteOutcome::NotExecuted { .. } => "not_executed",
            WriteOutcome::Ambiguous { .. } => "ambiguous",
            WriteOutcome::Fenced { .. } => "fenced",
            WriteOutcome::Conflict { definite: true, .. } => "conflict",
            WriteOutcome::Conflict { definite: false, .. } => "race",
        }
    }

    fn intent(evidence: Evidence) -> Intent {
        Intent {
            id: "i1".into(),
            action: String::new(),
            params: String::new(),
            params_hash: String::new(),
            key: "k".into(),
            state: crate::model::State::Submitted,
            attempts: 1,
            replaces: None,
            evidence,
            maybe_executed: false,
            lease_owner: None,
            lease_epoch: 1,
            lease_until_ms: 0,
            version: 1,
            created_ms: 0,
            updated_ms: 0,
            key_first_sent_ms: None,
            last_sent_ms: None,
        }
    }

    fn with_headers(status: u16, headers: &[(&str, &str)], body: &str) -> Result<HttpResponse, SendError> {
        Ok(HttpResponse {
            status,
            headers: headers.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect(),
            body: body.as_bytes().to_vec(),
        })
    }

    #[test]
    fn a_put_is_done_only_with_the_md5_of_its_body_and_a_412_is_for_a_read_back() {
        let put = Action::PutObject { bucket: "b".into(), key: "k".into(), body: "v2".into() };
        let ours = quoted_md5(b"v2");
        assert_eq!(ours, "\"1b267619c4812cc46ee281747884ca50\"");
        let s3 = |code: &str| format!("<Error><Code>{code}</Code><Message>m</Message></Error>");
        let cases: Vec<(Result<HttpResponse, SendError>, &str)> = vec![
            (with_headers(200, &[("ETag", &ours)], ""), "done"),
            (with_headers(200, &[("etag", "\"0000\"")], ""), "ambiguous"),
            (with_headers(200, &[], ""), "ambiguous"),
            (with_headers(412, &[], &s3("PreconditionFailed")), "conflict"),
            (with_headers(409, &[], &s3("ConditionalRequestConflict")), "race"),
            (with_headers(500, &[], &s3("InternalError")), "ambiguous"),
            (with_headers(503, &[], &s3("SlowDown")), "ambiguous"),
            (with_headers(404, &[], &s3("NoSuchBucket")), "rejected"),
            (with_headers(429, &[], ""), "not_executed"),
            (Err(SendError::Ambiguous("timeout".into())), "ambiguous"),
        ];
        for (answer, want) in cases {
            assert_eq!(
                kind(&classify_write(&put, &intent(Evidence::default()), answer.clone())),
                want,
                "{answer:?}"
            );
        }
        let error = classify_write(
            &put,
            &intent(Evidence::default()),
            with_headers(412, &[], &s3("PreconditionFailed")),
        );
        assert_eq!(
            error,
            WriteOutcome::Conflict { error: "HTTP 412: PreconditionFailed: m".into(), definite: true }
        );
    }

    #[test]
    fn a_broadcast_is_read_in_geths_words() {
        let transfer = Action::Transfer { to: format!("0x{}", "b".repeat(40)), value_wei: 1 };
        let hash = format!("0x{}", "ab".repeat(32));
        let sent = intent(Evidence { tx_hash: Some(hash.clone()), ..Evidence::default() });
        let rpc = |body: Value| answer(200, body);
        let error = |code: i64, message: &str| {
            rpc(json!({"jsonrpc": "2.0", "id": 1, "error": {"code": code, "message": message}}))
        };
        let cases: Vec<(Result<HttpResponse, SendError>, &str)> = vec![
            (rpc(json!({"jsonrpc": "2.0", "id": 1, "result": hash})), "done"),
            (
                rpc(json!({"jsonrpc": "2.0", "id": 1, "result": hash.to_uppercase().replace("0X", "0x")})),
                "done",
            ),
            (
                rpc(json!({"jsonrpc": "2.0", "id": 1, "result": format!("0x{}", "cd".repeat(32))})),
                "ambiguous",
            ),
            (error(-32000, "already known"), "done"),
            (error(-32000, "nonce too low: next nonce 3, tx nonce 2"), "conflict"),
            (error(-32000, "replacement transaction underpriced"), "race"),
            (
                error(-32000, "insufficient funds for gas * price + value: balance 0, tx cost 1, overshot 1"),
                "rejected",
            ),
            (error(-32602, "invalid argument 0"), "rejected"),
            (error(-32603, "internal error"), "ambiguous"),
            (answer(500, json!({"error": "boom"})), "ambiguous"),
            (answer(429, json!({})), "not_executed"),
            (answer(200, json!("garbage")), "ambiguous"),
            (Err(SendError::NotSent("refused".into())), "not_executed"),
        ];
        for (answer, want) in cases {
            assert_eq!(kind(&classify_write(&transfer, &sent, answer.clone())), want, "{answer:?}");
        }
    }

    #[test]
    fn nothing_is_sent_without_what_the_first_send_records() {
        let config = Config::default();
        let service = Service {
            url: "http://x".into(),
            contract: Contract { conditional_writes: true, ..Contract::default() },
        };
        let put = Action::PutObject { bucket: "b".into(), key: "k/1".into(), body: "v".into() };
        assert!(write_request(&put, &intent(Evidence::default()), &config, &service, 1).is_err());
        let guarded = intent(Evidence {
            precondition: Some(Precondition::IfMatch("\"e0\"".into())),
            ..Evidence::default()
        });
        let request = write_request(&put, &guarded, &config, &service, 1).unwrap();
        assert_eq!((request.method, request.url.as_str()), ("PUT", "http://x/b/k/1"));
        assert!(request.headers.contains(&("if-match".to_string(), "\"e0\"".to_string())));
        let transfer = Action::Transfer { to: format!("0x{}", "b".repeat(40)), value_wei: 1 };
        assert!(write_request(&transfer, &intent(Evidence::default()), &config, &service, 1).is_err());
        let signed = intent(Evidence { raw_tx: Some("0x02f8".into()), ..Evidence::default() });
        let body: Value =
            serde_json::from_slice(&write_request(&transfer, &signed, &config, &service, 1).unwrap().body)
                .unwrap();
        assert_eq!(body["method"], "eth_sendRawTransaction");
        assert_eq!(body["params"], json!(["0x02f8"]));
    }
}
