//! Chain: an Ethereum node's JSON-RPC, the subset that clients use to build, sign, send and
//! follow a transfer (web3.py, ethers).
//!
//! `POST /` (any path) with JSON-RPC 2.0 calls, single or batched. Signed raw transactions
//! are really decoded and their senders recovered (alloy with k256); accounts have balances
//! and nonces; transactions wait in a pool and are mined at once or every `block_time_ms` of
//! service time (see [`node`]); errors are geth's, word for word. Accounts, the chain id and
//! the block time are seeded through the control API or the methods on [`Chain`].
//!
//! Faults act on `eth_sendRawTransaction` as a write (its commit pools, and mines when blocks
//! are instant) and on every other method as a read; rules match the JSON-RPC method as the
//! field `rpc_method` (the first call's, in a batch). A fault's own error is an HTTP error in
//! JSON-RPC shape that echoes the request's ids; a node error is HTTP 200 with an `error`.
//! See `docs/faults.md` ("Chain").

pub(crate) mod node;
pub(crate) mod rpc;

use std::collections::BTreeMap;
use std::sync::Arc;

use alloy_consensus::{SignableTransaction, TxEip1559, TxEnvelope};
use alloy_eips::eip2718::Encodable2718;
use alloy_primitives::{Address, Signature, TxKind, U256};
use bytes::Bytes;
use k256::ecdsa::SigningKey;
use serde::Deserialize;
use serde_json::{Value, json};

pub(crate) use self::node::ChainState;
pub use self::node::{BASE_FEE_WEI, PRIORITY_FEE_WEI};
use self::node::{Decoded, View, hex_address};
use self::rpc::{Call, Envelope, Params, RpcError};
use crate::clock::ServiceClock;
use crate::core::{ApiError, Commit, Inner, Mode, Outcome, ServiceCore, Shape, Stamp};
use crate::wire::{Disposition, FakeRequest, FakeResponse};
use vocabulary::contract::Contract;

/// The service's name in rules, ledgers and URLs files.
pub const NAME: &str = "chain";

/// The rule field that holds the JSON-RPC method.
pub const RPC_METHOD_FIELD: &str = "rpc_method";

/// The method that writes.
const SEND_RAW: &str = "eth_sendRawTransaction";

/// Content types geth accepts.
const JSON_TYPES: &[&str] = &["application/json", "application/json-rpc", "application/jsonrequest"];

/// The chain fake. Cheap to clone; clones share state.
#[derive(Clone)]
pub struct Chain {
    core: Arc<ServiceCore<ChainState>>,
}

/// One call of a request, made ready outside the lock.
enum Prepared {
    /// A notification, or an answer known without the state.
    Done(Option<Value>, Option<RpcError>),
    /// `eth_sendRawTransaction` with its transaction decoded.
    Send(Value, Box<Decoded>),
    /// A notification of `eth_sendRawTransaction`: executed, not answered.
    SendQuietly(Box<Decoded>),
    /// Another method, answered from the state.
    Read(Option<Value>, String, Value),
}

impl Chain {
    pub fn new(clock: ServiceClock, seed: u64) -> Self {
        let shape = Shape { error: error_body, stamp: |_, _| {} };
        let core = ServiceCore::new(NAME, clock, seed, Contract::chain_default(), shape);
        Chain { core: Arc::new(core.reading_refusals(refused_params)) }
    }

    /// Rules, contract, clock, ledger and journal.
    pub fn core(&self) -> &Arc<ServiceCore<ChainState>> {
        &self.core
    }

    /// Sets an account's balance; `address` is 0x and 40 hex digits, any case.
    pub fn seed_account(&self, address: &str, balance_wei: u128) -> Result<(), String> {
        let address = parse_address(address)?;
        self.mine_due();
        self.core.lock().state.seed_account(address, U256::from(balance_wei));
        Ok(())
    }

    /// The chain id that signed transactions must carry (default 31337).
    pub fn set_chain_id(&self, chain_id: u64) {
        self.core.lock().state.chain_id = chain_id;
    }

    /// How long a transaction waits in the pool before a block takes it; 0 mines each
    /// transaction in the request that sends it.
    pub fn set_block_time_ms(&self, block_time_ms: u64) {
        self.mine_due();
        self.core.lock().state.block_time_ms = block_time_ms;
    }

    /// Mines every block due by now. Blocks are mined lazily, when a request arrives and when
    /// the ledger is read, so this is what makes the ledger current.
    pub fn mine_due(&self) {
        let now_ms = self.core.clock.now_ms();
        let mut inner = self.core.lock();
        if inner.state.pool_len() > 0 {
            node::mine_until(&mut inner, now_ms);
        }
    }

    /// Fields a rule can match: `rpc_method`, the (first) call's JSON-RPC method.
    pub fn fields(req: &FakeRequest) -> BTreeMap<String, String> {
        fields_of(&Envelope::parse(&req.body))
    }

    pub async fn handle(&self, req: FakeRequest) -> Disposition {
        self.mine_due();
        if req.path.starts_with("/__twice") {
            let response = self.core.control(&req, seed_from_json);
            return Disposition::Respond(response);
        }
        let checked = http_check(&req);
        let envelope = match checked {
            Ok(()) => Envelope::parse(&req.body),
            Err(_) => Envelope::Unparsable,
        };
        let is_write = envelope.calls().iter().any(|c| c.method() == Some(SEND_RAW));
        let ctx = self.core.begin(&req, |_| fields_of(&envelope), is_write);
        let _abandoned = self.core.watch(&ctx);
        if let Some(done) = self.core.intercept(&ctx, &req) {
            return echo_ids(done, &envelope);
        }
        let outcome = match checked {
            Err(response) => Outcome::of(response),
            Ok(()) if req.body.iter().all(u8::is_ascii_whitespace) => {
                // geth reads nothing and writes nothing.
                Outcome::of(empty_answer())
            }
            Ok(()) => match &envelope {
                Envelope::Unparsable => Outcome::of(single(rpc::error(&Value::Null, &RpcError::parse()))),
                Envelope::EmptyBatch => {
                    Outcome::of(single(rpc::error(&Value::Null, &RpcError::invalid_request("empty batch"))))
                }
                Envelope::TooLarge { first_id } => {
                    let id = first_id.clone().unwrap_or(Value::Null);
                    let error = RpcError::invalid_request("batch too large");
                    Outcome::of(single(Value::Array(vec![rpc::error(&id, &error)])))
                }
                Envelope::Single(_) | Envelope::Batch(_) => {
                    let batch = matches!(envelope, Envelope::Batch(_));
                    let prepared: Vec<Prepared> = envelope.calls().iter().map(prepare).collect();
                    if is_write {
                        let fingerprint = String::from_utf8_lossy(&req.body).into_owned();
                        let commit: Commit<ChainState> =
                            Box::new(move |inner: &mut Inner<ChainState>, mode: Mode, stamp: &Stamp| {
                                execute(
                                    inner,
                                    prepared,
                                    batch,
                                    Some((mode, stamp)),
                                    stamp.now_ms,
                                    stamp.now_ms,
                                )
                            });
                        self.core.write(&ctx, fingerprint, commit).await
                    } else {
                        let clock = self.core.clock.clone();
                        self.core
                            .read(&ctx, move |inner, visible_until_ms| {
                                let now_ms = clock.now_ms();
                                node::mine_until(inner, now_ms);
                                execute(inner, prepared, batch, None, visible_until_ms, now_ms)
                            })
                            .await
                    }
                }
            },
        };
        let disposition = self.core.conclude(&ctx, &req, outcome).await;
        echo_ids(disposition, &envelope)
    }
}

/// What a refused write asked for: the first transaction it broadcasts, as its `tx.mined`
/// effect would name it.
fn refused_params(req: &FakeRequest) -> Option<Value> {
    Envelope::parse(&req.body).calls().iter().find_map(|call| match call {
        Call::Method { method, params, .. } if method == SEND_RAW => {
            let raw = Params::read(params, 1).and_then(|p| p.arg(0, rpc::bytes)).ok()?;
            node::decode_envelope(&raw).ok().map(|tx| node::transfer_params(&tx))
        }
        _ => None,
    })
}

fn fields_of(envelope: &Envelope) -> BTreeMap<String, String> {
    envelope.first_method().map(|m| (RPC_METHOD_FIELD.to_string(), m.to_string())).into_iter().collect()
}

/// geth's HTTP checks, before it reads a byte of JSON-RPC: a bodiless GET is a health check,
/// PUT and DELETE are not allowed, and the content type must be JSON. Errors keep the
/// JSON-RPC shape so that every answer of this fake is JSON.
fn http_check(req: &FakeRequest) -> Result<(), FakeResponse> {
    let bodiless = req.body.is_empty() && req.query.is_empty();
    if bodiless && matches!(req.method.as_str(), "GET" | "HEAD" | "OPTIONS") {
        return Err(FakeResponse::json(200, &json!({})));
    }
    if matches!(req.method.as_str(), "PUT" | "DELETE") {
        return Err(http_error(405, "method not allowed"));
    }
    let media_type = req
        .header_str("content-type")
        .and_then(|v| v.split(';').next())
        .map(|t| t.trim().to_ascii_lowercase())
        .unwrap_or_default();
    if !JSON_TYPES.contains(&media_type.as_str()) {
        return Err(http_error(415, "invalid content type, only application/json is supported"));
    }
    Ok(())
}

fn http_error(status: u16, message: &str) -> FakeResponse {
    FakeResponse::json(status, &rpc::error(&Value::Null, &RpcError::invalid_request(message)))
}

fn single(body: Value) -> FakeResponse {
    FakeResponse::json(200, &body)
}

/// 200 without a body: what geth sends when there is nothing to answer (notifications).
fn empty_answer() -> FakeResponse {
    FakeResponse {
        status: 200,
        headers: vec![("content-type".into(), "application/json".into())],
        body: Bytes::new(),
    }
}

/// Reads one call's parameters as far as can be done without the state; decoding and
/// recovering a raw transaction is the costly part, and it happens here, outside the lock.
fn prepare(call: &Call) -> Prepared {
    let (id, method, params) = match call {
        Call::Invalid { id } => {
            let id = id.clone().unwrap_or(Value::Null);
            return Prepared::Done(Some(id), Some(RpcError::invalid_request("invalid request")));
        }
        Call::Method { id, method, params } => (id.clone(), method, params),
    };
    if method != SEND_RAW {
        return Prepared::Read(id, method.clone(), params.clone());
    }
    let decoded = Params::read(params, 1)
        .and_then(|p| p.arg(0, rpc::bytes))
        .and_then(|raw| node::decode_raw(&raw).map_err(RpcError::server));
    match (decoded, id) {
        (Ok(tx), Some(id)) => Prepared::Send(id, Box::new(tx)),
        (Ok(tx), None) => Prepared::SendQuietly(Box::new(tx)),
        (Err(e), id) => Prepared::Done(id, Some(e)),
    }
}

/// Runs the calls in order against the state and renders the answer. `write` is the commit's
/// mode and stamp when the request is a write; reads see the state as of `visible_until_ms`.
fn execute(
    inner: &mut Inner<ChainState>,
    prepared: Vec<Prepared>,
    batch: bool,
    write: Option<(Mode, &Stamp)>,
    visible_until_ms: u64,
    now_ms: u64,
) -> FakeResponse {
    let mut answers = Vec::with_capacity(prepared.len());
    for call in prepared {
        let answer = match call {
            Prepared::Done(id, error) => id.map(|id| match error {
                Some(e) => rpc::error(&id, &e),
                None => rpc::result(&id, Value::Null),
            }),
            Prepared::Send(id, tx) => Some(match send(inner, &tx, write) {
                Ok(hash) => rpc::result(&id, json!(format!("{hash:#x}"))),
                Err(e) => rpc::error(&id, &e),
            }),
            Prepared::SendQuietly(tx) => {
                let _ = send(inner, &tx, write);
                None
            }
            Prepared::Read(id, method, params) => {
                let view: View = inner.state.view(visible_until_ms);
                let answer = inner.state.answer(&method, &params, view, now_ms);
                // A notification is executed and not answered.
                id.map(|id| match answer {
                    Ok(result) => rpc::result(&id, result),
                    Err(e) => rpc::error(&id, &e),
                })
            }
        };
        answers.extend(answer);
    }
    match (batch, answers.len()) {
        (_, 0) => empty_answer(),
        (false, _) => single(answers.swap_remove(0)),
        (true, _) => single(Value::Array(answers)),
    }
}

/// Submits a decoded transaction and, when blocks are instant, mines it in the same commit.
fn send(
    inner: &mut Inner<ChainState>,
    tx: &Decoded,
    write: Option<(Mode, &Stamp)>,
) -> Result<alloy_primitives::B256, RpcError> {
    let Some((mode, stamp)) = write else {
        // Only a write request carries sends; a read never gets here.
        return Err(RpcError::server("internal error"));
    };
    let hash = node::submit(inner, tx, mode, stamp).map_err(RpcError::server)?;
    if mode == Mode::Apply && inner.state.block_time_ms == 0 {
        node::mine_until(inner, stamp.now_ms);
    }
    Ok(hash)
}

/// Puts the request's ids into an error the shared pipeline made (a `reject` without a body,
/// `error_after_commit`), which has no request to read them from: one error per answered call.
fn echo_ids(disposition: Disposition, envelope: &Envelope) -> Disposition {
    let Disposition::Respond(mut response) = disposition else { return disposition };
    // The fake's own answers are 200 or carry no id to echo; only the pipeline's are others.
    if response.status == 200 {
        return Disposition::Respond(response);
    }
    let Some(body) = response.body_json() else { return Disposition::Respond(response) };
    let made_here = body.get("jsonrpc") == Some(&json!("2.0"))
        && body.get("id") == Some(&Value::Null)
        && body.get("error").is_some();
    let ids: Vec<Value> = envelope.calls().iter().filter_map(Call::answer_id).collect();
    if !made_here || ids.is_empty() {
        return Disposition::Respond(response);
    }
    let with_id = |id: &Value| {
        let mut answer = body.clone();
        answer["id"] = id.clone();
        answer
    };
    let echoed = match envelope {
        Envelope::Batch(_) => Value::Array(ids.iter().map(with_id).collect()),
        _ => with_id(&ids[0]),
    };
    response.body = Bytes::from(echoed.to_string());
    Disposition::Respond(response)
}

/// The shape of an error made by the shared pipeline: JSON-RPC, at the HTTP status it chose.
/// A bare status gets the words of what answers it in front of a node: geth's JWT check (401
/// `missing token`), its virtual-host check (403 `invalid host specified`), a provider's
/// refusal of the request (400, 422).
pub fn error_body(error: &ApiError) -> FakeResponse {
    let code = match error.status {
        429 => -32005,
        400..=499 => -32600,
        _ => -32603,
    };
    let message = match error.status {
        _ if !error.standard => error.message.as_str(),
        400 => "invalid request",
        401 => "missing token",
        403 => "invalid host specified",
        422 => "the request cannot be processed",
        _ => error.message.as_str(),
    };
    let rpc_error = RpcError { code, message: message.to_string() };
    FakeResponse::json(error.status, &rpc::error(&Value::Null, &rpc_error))
}

fn parse_address(text: &str) -> Result<Address, String> {
    rpc::address(&json!(text)).map_err(|e| format!("invalid address \"{text}\": {e}"))
}

/// A balance: a decimal string of wei, a 0x hex string, or a JSON integer.
fn parse_wei(value: &Value) -> Result<U256, String> {
    let text = match value {
        Value::String(s) => s.clone(),
        Value::Number(n) if n.is_u64() => n.to_string(),
        other => return Err(format!("a balance is a decimal or 0x hex string of wei, not {other}")),
    };
    // from_str_radix reads no digits as zero: an empty balance is a mistake, not nothing.
    let parsed = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) if !hex.is_empty() => U256::from_str_radix(hex, 16),
        None if !text.is_empty() => U256::from_str_radix(&text, 10),
        _ => {
            return Err(format!(
                "invalid balance \"{text}\": a decimal or 0x hex string of wei, with digits"
            ));
        }
    };
    parsed.map_err(|_| format!("invalid balance \"{text}\": a decimal or 0x hex string of wei"))
}

fn seed_from_json(inner: &mut Inner<ChainState>, body: &[u8]) -> Result<Value, String> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Seed {
        chain_id: Option<u64>,
        block_time_ms: Option<u64>,
        #[serde(default)]
        accounts: Vec<SeedAccount>,
    }
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct SeedAccount {
        address: String,
        balance: Value,
    }
    let seed: Seed = serde_json::from_slice(body).map_err(|e| {
        format!(
            "expected {{\"chain_id\": 31337, \"block_time_ms\": 0, \"accounts\": [{{\"address\": \"0x…\", \"balance\": \"1000000000000000000\"}}]}}: {e}"
        )
    })?;
    // Check everything before changing anything.
    let accounts = seed
        .accounts
        .iter()
        .map(|a| Ok((parse_address(&a.address)?, parse_wei(&a.balance)?)))
        .collect::<Result<Vec<_>, String>>()?;
    if let Some(chain_id) = seed.chain_id {
        inner.state.chain_id = chain_id;
    }
    if let Some(block_time_ms) = seed.block_time_ms {
        inner.state.block_time_ms = block_time_ms;
    }
    for (address, balance) in &accounts {
        inner.state.seed_account(*address, *balance);
    }
    let seeded: Vec<Value> = accounts
        .iter()
        .map(|(address, balance)| json!({"address": hex_address(address), "balance": balance.to_string()}))
        .collect();
    Ok(json!({
        "chain_id": inner.state.chain_id,
        "block_time_ms": inner.state.block_time_ms,
        "accounts": seeded,
    }))
}

fn signing_key(private_key_hex: &str) -> Result<SigningKey, String> {
    let digits = private_key_hex.strip_prefix("0x").unwrap_or(private_key_hex);
    let bytes = alloy_primitives::hex::decode(digits).map_err(|e| format!("invalid private key: {e}"))?;
    if bytes.len() != 32 {
        return Err(format!("invalid private key: {} bytes, want 32", bytes.len()));
    }
    SigningKey::from_slice(&bytes).map_err(|e| format!("invalid private key: {e}"))
}

/// The lowercase 0x address of a secp256k1 private key (0x-hex, 32 bytes).
pub fn address_of(private_key_hex: &str) -> Result<String, String> {
    Ok(hex_address(&Address::from_private_key(&signing_key(private_key_hex)?)))
}

/// Signs an EIP-1559 transfer and returns its EIP-2718 bytes (what `eth_sendRawTransaction`
/// takes) and its 0x hash. Deterministic: k256 signs with RFC 6979 nonces.
#[allow(clippy::too_many_arguments)]
pub fn sign_transfer(
    private_key_hex: &str,
    chain_id: u64,
    nonce: u64,
    to: &str,
    value_wei: u128,
    max_fee_per_gas: u128,
    max_priority_fee_per_gas: u128,
    gas_limit: u64,
) -> Result<(Vec<u8>, String), String> {
    let key = signing_key(private_key_hex)?;
    let tx = TxEip1559 {
        chain_id,
        nonce,
        gas_limit,
        max_fee_per_gas,
        max_priority_fee_per_gas,
        to: TxKind::Call(parse_address(to)?),
        value: U256::from(value_wei),
        access_list: Default::default(),
        input: Default::default(),
    };
    let (signature, recovery_id) = key
        .sign_prehash_recoverable(tx.signature_hash().as_slice())
        .map_err(|e| format!("cannot sign: {e}"))?;
    let envelope = TxEnvelope::from(tx.into_signed(Signature::from((signature, recovery_id))));
    Ok((envelope.encoded_2718(), format!("{:#x}", envelope.tx_hash())))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_balance_without_digits_is_refused() {
        for balance in ["", "0x", "0X"] {
            assert!(super::parse_wei(&serde_json::json!(balance)).is_err(), "{balance:?}");
        }
        assert_eq!(super::parse_wei(&serde_json::json!("0x10")), Ok(super::U256::from(16u64)));
        assert_eq!(super::parse_wei(&serde_json::json!("10")), Ok(super::U256::from(10u64)));
        assert_eq!(super::parse_wei(&serde_json::json!(7)), Ok(super::U256::from(7u64)));
    }

    use alloy_consensus::transaction::SignerRecoverable;
    use alloy_eips::eip2718::Decodable2718;

    use super::*;

    const KEY: &str = "0xac0974bec39a17e36ba4a91b0d7ab4f6d4c2c53b77a40f1be9ffb3a3b1ee0c4f";
    /// What eth-account 0.14 says `KEY`'s address is.
    const ADDRESS: &str = "0x73fe11cb0b05427ef50a656d6eaafaa3267eb577";
    /// What eth-account 0.14 signs for the transfer below (RFC 6979 in both): the same bytes.
    const ETH_ACCOUNT_RAW: &str = "02f86c827a6980843b9aca0084b2d05e008252089470997970c51812dc3a010c7d01b50e0d17dc79c80180c080a0f1e242ecf8903d173b268b9eba54e1decdb4e5b896c8ef223a7f19e2f0d8cc88a06e54e479f72636693fb215546ea8f476b6c51246a9b4217c169b7e5af71d7019";
    const ETH_ACCOUNT_HASH: &str = "0xa503c1a51c485275e17f42c78f374614c70f76ec9255f63b7f0de2c12808dcc8";

    #[test]
    fn signing_is_deterministic_and_recovers_the_signer() {
        assert_eq!(address_of(KEY).unwrap(), ADDRESS);
        let to = "0x70997970c51812dc3a010c7d01b50e0d17dc79c8";
        let (raw, hash) = sign_transfer(KEY, 31337, 0, to, 1, 3_000_000_000, 1_000_000_000, 21_000).unwrap();
        assert_eq!(sign_transfer(KEY, 31337, 0, to, 1, 3_000_000_000, 1_000_000_000, 21_000).unwrap().0, raw);
        assert_eq!(
            (alloy_primitives::hex::encode(&raw).as_str(), hash.as_str()),
            (ETH_ACCOUNT_RAW, ETH_ACCOUNT_HASH)
        );
        let envelope = TxEnvelope::decode_2718_exact(&raw).unwrap();
        assert_eq!(hex_address(&envelope.recover_signer().unwrap()), ADDRESS);
        assert_eq!(format!("{:#x}", envelope.tx_hash()), hash);
        assert_eq!(hash, format!("{:#x}", alloy_primitives::keccak256(&raw)));
        // The same with alloy-consensus, alloy-primitives and k256 alone (no alloy-eips): what
        // a crate that may not depend on this one can write.
        let key = SigningKey::from_slice(&alloy_primitives::hex::decode(KEY).unwrap()).unwrap();
        let tx = TxEip1559 {
            chain_id: 31337,
            nonce: 0,
            gas_limit: 21_000,
            max_fee_per_gas: 3_000_000_000,
            max_priority_fee_per_gas: 1_000_000_000,
            to: TxKind::Call(to.parse().unwrap()),
            value: U256::from(1),
            access_list: Default::default(),
            input: Default::default(),
        };
        let (sig, recid) = key.sign_prehash_recoverable(tx.signature_hash().as_slice()).unwrap();
        let signed = tx.into_signed(Signature::from((sig, recid)));
        let mut bytes = Vec::new();
        signed.eip2718_encode(&mut bytes);
        assert_eq!((bytes, format!("{:#x}", signed.hash())), (raw.clone(), hash.clone()));
        assert_eq!(hex_address(&Address::from_private_key(&key)), ADDRESS);
        assert!(sign_transfer("0x12", 1, 0, to, 1, 1, 1, 21_000).is_err());
        assert!(sign_transfer(KEY, 1, 0, "0x12", 1, 1, 1, 21_000).is_err());
    }
}
