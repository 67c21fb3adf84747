//! `chain.transfer` (Ethereum JSON-RPC): what a transfer is signed against (chain id, the
//! account's pending nonce, fees) and with which key, what a broadcast's answer means in
//! geth's words, and the lookup: the receipt of the hash, then the account's nonce.

use std::sync::Mutex;

use serde_json::{Value, json};

use super::{Lookup, WriteOutcome, base, excerpt, lookup_request};
use crate::model::{Action, Intent};
use crate::signing::{ChainKey, Transfer};
use crate::world::{HttpRequest, HttpResponse, SendError, Transport};
use vocabulary::CHAIN_PRIVATE_KEY_SECRET;
use vocabulary::protocol::Config;
use vocabulary::protocol::Service;

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
    // The last key parsed, kept for the process: deriving its address is an elliptic-curve
    // multiplication, and every proposal and every pass that signs asks for the key, in every
    // worker (the simulation starts thousands of them with the same secret).
    static LAST: Mutex<Option<(String, ChainKey)>> = Mutex::new(None);
    let mut last = LAST.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((seen, key)) = last.as_ref()
        && seen == text
    {
        return Ok(key.clone());
    }
    let key = ChainKey::parse(text).map_err(|e| e.to_string())?;
    *last = Some((text.clone(), key.clone()));
    Ok(key)
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

/// An `eth_sendRawTransaction`'s answer, in geth's words.
pub(super) fn classify_broadcast(intent: &Intent, response: &HttpResponse) -> WriteOutcome {
    let ours = intent.evidence.tx_hash.clone().unwrap_or_default();
    let error = format!("HTTP {}: {}", response.status, excerpt(&response.body));
    match response.status {
        200 => {}
        429 => return WriteOutcome::NotExecuted { error },
        // What stands in front of the node (its JWT or host check, a provider's gateway)
        // refused the request before the node saw it.
        status if vocabulary::needs_decision(status) => {
            let words = match rpc_reply(response) {
                Some(Rpc::Error { code, message }) => format!("JSON-RPC error {code}: {message}"),
                _ => excerpt(&response.body),
            };
            return WriteOutcome::NeedsDecision { status, error: words };
        }
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

/// `chain.transfer`'s lookup: the receipt of the hash; without one, whether the account's
/// nonce moved past ours (another transaction used it) or the transaction waits in the pool.
pub(super) async fn lookup_transfer(
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
    let receipt = || async { transport.send(lookup_request(action, intent, config, service, None)).await };
    match rpc_result("eth_getTransactionReceipt", receipt().await) {
        Err(error) => return Lookup::Failed { error },
        Ok(Value::Null) => {}
        Ok(found) => return mined(hash, &found),
    }
    let latest = match call("eth_getTransactionCount", json!([from, "latest"])).await {
        Ok(v) => quantity(&v),
        Err(error) => return Lookup::Failed { error },
    };
    match latest {
        None => return Lookup::Failed { error: "eth_getTransactionCount: not a quantity".into() },
        Some(latest) if latest > u128::from(nonce) => {
            // The receipt read above may predate the block that used the nonce (a worker
            // paused between the two reads, a late commit): only a receipt read after the
            // nonce was seen used can tell whose transaction used it.
            return match rpc_result("eth_getTransactionReceipt", receipt().await) {
                Err(error) => Lookup::Failed { error },
                Ok(Value::Null) => Lookup::Superseded {
                    what: format!(
                        "nonce {nonce} of {from} is used (its next nonce is {latest}), and {hash} has no receipt"
                    ),
                },
                Ok(found) => mined(hash, &found),
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

/// What a receipt of `hash` says: mined, or mined and reverted.
fn mined(hash: &str, receipt: &Value) -> Lookup {
    let block = receipt.get("blockNumber").and_then(quantity).unwrap_or_default();
    match receipt.get("status").and_then(quantity) {
        Some(1) => Lookup::Found { external_id: hash.to_string(), params_match: true },
        Some(0) => Lookup::Superseded { what: format!("{hash} was mined in block {block} and reverted") },
        _ => Lookup::Failed { error: format!("a receipt without a status: {receipt}") },
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
