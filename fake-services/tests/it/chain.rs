//! The chain fake over loopback HTTP: every method in geth's shapes, batches, geth's errors
//! word for word, malformed raw transactions, the pool and mining on service time, the ledger,
//! and the faults on `eth_sendRawTransaction`. Random JSON-RPC and random bytes at the end.

use std::sync::Arc;
use std::time::Duration;

use alloy_consensus::{SignableTransaction, TxEnvelope, TxLegacy};
use alloy_eips::eip2718::Encodable2718;
use alloy_primitives::{Address, Signature, TxKind, U256};
use fake_services::chain::{address_of, sign_transfer};
use fake_services::{Disposition, Fake, FakeRequest, Fakes, Server};
use proptest::prelude::*;
use serde_json::{Value, json};
use vocabulary::FaultRule;
use vocabulary::FaultSpec;
use vocabulary::ManualClock;

use crate::client::{self, Req, Seen};

/// The funded sender.
pub const KEY: &str = "0x4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318";
/// A sender with 0.001 ether.
const POOR_KEY: &str = "0x8da4ef21b864d2cc526dbdb2a120bd2874c36c9d0a1fb7f8c63d7f7a8b41de8f";
pub const TO: &str = "0x70997970c51812dc3a010c7d01b50e0d17dc79c8";
const ETHER: u128 = 1_000_000_000_000_000_000;
const GWEI: u128 = 1_000_000_000;
pub const FUNDS: u128 = 1000 * ETHER;
const POOR_FUNDS: u128 = 1_000_000_000_000_000;
/// A value small enough to send many times.
pub const VALUE: u128 = 1_000_000_000_000_000;
const PATIENT_MS: u64 = 10_000;
const HASTY_MS: u64 = 300;
const START_MS: u64 = 1_767_225_600_000;

/// A signed transfer: the 0x hex of its bytes, and its hash.
pub struct Signed {
    pub raw: String,
    pub hash: String,
}

/// A transfer of `value` to [`TO`] from `key`, priced as web3.py would price it on this chain
/// (max fee 3 gwei, tip 1 gwei, 21000 gas).
pub fn transfer_from(key: &str, nonce: u64, value: u128) -> Signed {
    signed(key, 31337, nonce, value, 3 * GWEI, GWEI, 21_000)
}

pub fn transfer(nonce: u64, value: u128) -> Signed {
    transfer_from(KEY, nonce, value)
}

fn signed(key: &str, chain_id: u64, nonce: u64, value: u128, fee: u128, tip: u128, gas: u64) -> Signed {
    let (raw, hash) = sign_transfer(key, chain_id, nonce, TO, value, fee, tip, gas).unwrap();
    Signed { raw: alloy_primitives::hex::encode_prefixed(raw), hash }
}

/// A legacy transfer, EIP-155 protected when `chain_id` is given.
fn legacy(nonce: u64, chain_id: Option<u64>) -> Signed {
    let key = alloy_primitives::hex::decode(KEY).unwrap();
    let key = k256::ecdsa::SigningKey::from_slice(&key).unwrap();
    let tx = TxLegacy {
        chain_id,
        nonce,
        gas_price: 2 * GWEI,
        gas_limit: 21_000,
        to: TxKind::Call(TO.parse::<Address>().unwrap()),
        value: U256::from(VALUE),
        input: Default::default(),
    };
    let (sig, recid) = key.sign_prehash_recoverable(tx.signature_hash().as_slice()).unwrap();
    let envelope = TxEnvelope::from(tx.into_signed(Signature::from((sig, recid))));
    Signed {
        raw: alloy_primitives::hex::encode_prefixed(envelope.encoded_2718()),
        hash: format!("{:#x}", envelope.tx_hash()),
    }
}

pub fn sender() -> String {
    address_of(KEY).unwrap()
}

/// A JSON-RPC request as web3.py sends it.
pub fn rpc(body: &Value) -> Req {
    Req::new("POST", "/").header("Content-Type", "application/json").body(body.to_string())
}

pub fn call(method: &str, params: Value) -> Req {
    rpc(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
}

pub fn send_raw(raw: &str) -> Req {
    call("eth_sendRawTransaction", json!([raw]))
}

/// `eth_getBlockByNumber("latest", false)`: its `/result/transactions` counts what is mined.
pub fn latest_block() -> Req {
    call("eth_getBlockByNumber", json!(["latest", false]))
}

/// The control API's seed body that funds [`KEY`].
pub fn funding() -> Req {
    Req::new("POST", "/__twice/seed")
        .body(json!({"accounts": [{"address": sender(), "balance": FUNDS.to_string()}]}).to_string())
}

/// A chain fake on a clock that moves only when told, served on loopback, [`KEY`] funded.
struct Rig {
    fakes: Fakes,
    clock: Arc<ManualClock>,
    server: Server,
}

impl Rig {
    async fn start() -> Rig {
        Self::with_block_time(0).await
    }

    async fn with_block_time(block_time_ms: u64) -> Rig {
        let clock = Arc::new(ManualClock::new(START_MS));
        let fakes = Fakes::new(clock.clone(), 11);
        fakes.chain.seed_account(&sender(), FUNDS).unwrap();
        fakes.chain.seed_account(&address_of(POOR_KEY).unwrap(), POOR_FUNDS).unwrap();
        fakes.chain.set_block_time_ms(block_time_ms);
        let server =
            Server::start(Fake::Chain(fakes.chain.clone()), "127.0.0.1:0".parse().unwrap()).await.unwrap();
        Rig { fakes, clock, server }
    }

    fn fake(&self) -> Fake {
        Fake::Chain(self.fakes.chain.clone())
    }

    async fn send(&self, req: &Req) -> Seen {
        client::send(self.server.addr(), req, PATIENT_MS).await
    }

    /// The JSON answer to one call, which must be HTTP 200.
    async fn answer(&self, method: &str, params: Value) -> Value {
        let seen = self.send(&call(method, params.clone())).await;
        assert_eq!(seen.status(), Some(200), "{method} {params}: {seen:?}");
        let answer = seen.json();
        assert_eq!((&answer["jsonrpc"], &answer["id"]), (&json!("2.0"), &json!(1)), "{answer}");
        answer
    }

    async fn result(&self, method: &str, params: Value) -> Value {
        let answer = self.answer(method, params.clone()).await;
        assert!(answer.get("error").is_none(), "{method} {params}: {answer}");
        answer["result"].clone()
    }

    /// The code and message of a call's error.
    async fn error(&self, method: &str, params: Value) -> (i64, String) {
        let answer = self.answer(method, params.clone()).await;
        assert!(answer.get("result").is_none(), "{method} {params}: {answer}");
        (answer["error"]["code"].as_i64().unwrap(), answer["error"]["message"].as_str().unwrap().to_string())
    }

    async fn send_tx(&self, tx: &Signed) -> Result<String, String> {
        let answer = self.answer("eth_sendRawTransaction", json!([tx.raw])).await;
        match answer.get("result") {
            Some(hash) => Ok(hash.as_str().unwrap().to_string()),
            None => Err(answer["error"]["message"].as_str().unwrap().to_string()),
        }
    }

    async fn nonce(&self, tag: &str) -> Value {
        self.result("eth_getTransactionCount", json!([sender(), tag])).await
    }

    async fn balance(&self, address: &str) -> U256 {
        let hex = self.result("eth_getBalance", json!([address, "latest"])).await;
        U256::from_str_radix(hex.as_str().unwrap().trim_start_matches("0x"), 16).unwrap()
    }

    fn mined(&self) -> Vec<vocabulary::Effect> {
        self.fake().ledger()
    }
}

fn server_error(message: &str) -> (i64, String) {
    (-32000, message.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_methods_answer_in_geths_shapes() {
    let rig = Rig::start().await;
    assert_eq!(rig.result("eth_chainId", json!([])).await, "0x7a69");
    assert_eq!(rig.result("net_version", json!([])).await, "31337");
    assert!(rig.result("web3_clientVersion", json!([])).await.as_str().unwrap().starts_with("twice/"));
    assert_eq!(rig.result("eth_blockNumber", json!([])).await, "0x0");
    assert_eq!(rig.result("eth_gasPrice", json!([])).await, "0x3b9aca00");
    assert_eq!(rig.result("eth_maxPriorityFeePerGas", json!([])).await, "0x3b9aca00");
    assert_eq!(rig.result("eth_getBalance", json!([sender(), "latest"])).await, format!("{FUNDS:#x}"));
    assert_eq!(rig.result("eth_getBalance", json!([TO, "earliest"])).await, "0x0");
    assert_eq!(rig.nonce("latest").await, "0x0");
    assert_eq!(rig.nonce("pending").await, "0x0");
    assert_eq!(rig.result("eth_getCode", json!([TO, "latest"])).await, "0x");
    assert_eq!(rig.result("eth_call", json!([{"to": TO, "data": "0x70a08231"}, "latest"])).await, "0x");
    let transfer = json!({"from": sender(), "to": TO, "value": "0xde0b6b3a7640000"});
    assert_eq!(rig.result("eth_estimateGas", json!([transfer])).await, "0x5208", "21000 for a transfer");
    let with_data = json!({"from": sender(), "to": TO, "data": "0x0001"});
    // EIP-7623's floor (21000 + 10 per token) is above the intrinsic 21000 + 4 + 16.
    assert_eq!(
        rig.result("eth_estimateGas", json!([with_data])).await,
        format!("{:#x}", 21_000 + 10 * (1 + 4))
    );
    let too_much = json!({"from": sender(), "to": TO, "value": format!("{:#x}", FUNDS + 1)});
    assert_eq!(
        rig.error("eth_estimateGas", json!([too_much])).await,
        server_error("insufficient funds for transfer")
    );

    let genesis = rig.result("eth_getBlockByNumber", json!(["latest", false])).await;
    for field in
        ["hash", "parentHash", "timestamp", "baseFeePerGas", "gasLimit", "gasUsed", "miner", "difficulty"]
    {
        assert!(genesis[field].is_string(), "{field} in {genesis}");
    }
    assert_eq!((&genesis["number"], &genesis["baseFeePerGas"]), (&json!("0x0"), &json!("0x3b9aca00")));
    assert_eq!(genesis["transactions"], json!([]));
    assert_eq!(rig.result("eth_getBlockByNumber", json!(["earliest", true])).await, genesis);
    assert_eq!(rig.result("eth_getBlockByNumber", json!(["0x0", false])).await, genesis);
    assert_eq!(rig.result("eth_getBlockByHash", json!([genesis["hash"], false])).await, genesis);
    assert_eq!(rig.result("eth_getBlockByNumber", json!(["0x5", false])).await, Value::Null);
    let pending = rig.result("eth_getBlockByNumber", json!(["pending", false])).await;
    assert_eq!((&pending["number"], &pending["hash"]), (&json!("0x1"), &Value::Null));

    let history = rig.result("eth_feeHistory", json!([4, "latest", [25, 75]])).await;
    assert_eq!(
        history,
        json!({"oldestBlock": "0x0", "baseFeePerGas": ["0x3b9aca00", "0x3b9aca00"], "gasUsedRatio": [0.0], "reward": [["0x0", "0x0"]]})
    );
    assert_eq!(
        rig.error("eth_feeHistory", json!(["0x1", "0x9"])).await,
        server_error("request beyond head block: requested 9, head 0")
    );
    assert_eq!(
        rig.error("eth_feeHistory", json!(["0x1", "latest", [50, 10]])).await,
        server_error("invalid reward percentile: #0:50.000000 >= #1:10.000000")
    );
    assert_eq!(
        rig.result("eth_getTransactionByHash", json!([format!("0x{}", "ab".repeat(32))])).await,
        Value::Null
    );
    assert_eq!(
        rig.result("eth_getTransactionReceipt", json!([format!("0x{}", "ab".repeat(32))])).await,
        Value::Null
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_is_decoded_mined_and_recorded() {
    let rig = Rig::start().await;
    let tx = transfer(0, VALUE);
    assert_eq!(rig.send_tx(&tx).await, Ok(tx.hash.clone()), "the node answers the transaction's own hash");

    let receipt = rig.result("eth_getTransactionReceipt", json!([tx.hash])).await;
    let block = rig.result("eth_getBlockByNumber", json!(["latest", false])).await;
    assert_eq!(receipt["status"], "0x1");
    assert_eq!(receipt["blockNumber"], "0x1");
    assert_eq!(receipt["blockHash"], block["hash"]);
    assert_eq!((&receipt["from"], &receipt["to"]), (&json!(sender()), &json!(TO)));
    assert_eq!((&receipt["gasUsed"], &receipt["cumulativeGasUsed"]), (&json!("0x5208"), &json!("0x5208")));
    assert_eq!(receipt["effectiveGasPrice"], format!("{:#x}", 2 * GWEI), "base fee 1 gwei + tip 1 gwei");
    assert_eq!((&receipt["transactionIndex"], &receipt["type"]), (&json!("0x0"), &json!("0x2")));
    assert_eq!((&receipt["logs"], &receipt["contractAddress"]), (&json!([]), &Value::Null));
    assert_eq!(receipt["logsBloom"].as_str().unwrap().len(), 2 + 512);
    assert_eq!(block["transactions"], json!([tx.hash]));
    assert_eq!(block["timestamp"], format!("{:#x}", START_MS / 1000));
    let full = rig.result("eth_getBlockByNumber", json!(["0x1", true])).await;
    assert_eq!(full["transactions"][0]["hash"], tx.hash);

    let got = rig.result("eth_getTransactionByHash", json!([tx.hash])).await;
    assert_eq!((&got["from"], &got["to"], &got["nonce"]), (&json!(sender()), &json!(TO), &json!("0x0")));
    assert_eq!((&got["value"], &got["gas"]), (&json!(format!("{VALUE:#x}")), &json!("0x5208")));
    assert_eq!(
        (&got["maxFeePerGas"], &got["maxPriorityFeePerGas"]),
        (&json!("0xb2d05e00"), &json!("0x3b9aca00"))
    );
    assert_eq!(
        (&got["blockNumber"], &got["chainId"], &got["type"]),
        (&json!("0x1"), &json!("0x7a69"), &json!("0x2"))
    );
    assert!(got["r"].is_string() && got["s"].is_string() && got["yParity"].is_string(), "{got}");

    // The value moved, and the sender paid 21000 gas at the effective price.
    let fee = U256::from(21_000u64 * 2 * GWEI as u64);
    assert_eq!(rig.balance(&sender()).await, U256::from(FUNDS) - U256::from(VALUE) - fee);
    assert_eq!(rig.balance(TO).await, U256::from(VALUE));
    assert_eq!((rig.nonce("latest").await, rig.nonce("pending").await), (json!("0x1"), json!("0x1")));
    // Older blocks still answer as they were.
    assert_eq!(rig.result("eth_getTransactionCount", json!([sender(), "0x0"])).await, "0x0");
    assert_eq!(rig.result("eth_getBalance", json!([TO, "0x0"])).await, "0x0");
    let history = rig.result("eth_feeHistory", json!(["0x2", "latest", [50]])).await;
    assert_eq!(history["reward"], json!([["0x0"], ["0x3b9aca00"]]));
    assert_eq!(history["gasUsedRatio"], json!([0.0, 21_000.0 / 30_000_000.0]));

    let ledger = rig.mined();
    assert_eq!(ledger.len(), 1, "{ledger:#?}");
    let effect = &ledger[0];
    assert_eq!(
        (effect.kind.as_str(), effect.object_id.as_str(), effect.at_ms),
        ("tx.mined", tx.hash.as_str(), START_MS)
    );
    assert_eq!(
        effect.params,
        json!({"from": sender(), "to": TO, "value": VALUE.to_string(), "nonce": 0, "hash": tx.hash, "block": 1})
    );
    let journal = rig.fake().journal();
    let sent = journal.iter().find(|e| e.request_id == effect.request_id).expect("the send is journaled");
    assert_eq!((sent.method.as_str(), sent.path.as_str(), sent.status), ("POST", "/", Some(200)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_transactions_need_replay_protection() {
    let rig = Rig::start().await;
    assert_eq!(
        rig.send_tx(&legacy(0, None)).await,
        Err("only replay-protected (EIP-155) transactions allowed over RPC".into())
    );
    let protected = legacy(0, Some(31337));
    assert_eq!(rig.send_tx(&protected).await, Ok(protected.hash.clone()));
    let got = rig.result("eth_getTransactionByHash", json!([protected.hash])).await;
    assert_eq!(
        (&got["type"], &got["gasPrice"], &got["chainId"]),
        (&json!("0x0"), &json!("0x77359400"), &json!("0x7a69"))
    );
    let v = u64::from_str_radix(got["v"].as_str().unwrap().trim_start_matches("0x"), 16).unwrap();
    assert!(v == 31337 * 2 + 35 || v == 31337 * 2 + 36, "EIP-155 v: {v}");
    assert_eq!(rig.mined().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_answer_every_call_in_order() {
    let rig = Rig::start().await;
    let tx = transfer(0, VALUE);
    let batch = json!([
        {"jsonrpc": "2.0", "id": 1, "method": "eth_chainId", "params": []},
        {"jsonrpc": "2.0", "id": "two", "method": "eth_nope", "params": []},
        {"jsonrpc": "2.0", "method": "eth_blockNumber", "params": []},
        {"jsonrpc": "1.0", "id": 4, "method": "eth_chainId"},
        {"jsonrpc": "2.0", "id": 5, "method": "eth_sendRawTransaction", "params": [tx.raw]},
        {"jsonrpc": "2.0", "id": 6, "method": "eth_getTransactionCount", "params": [sender(), "latest"]},
    ]);
    let seen = rig.send(&rpc(&batch)).await;
    assert_eq!(seen.status(), Some(200));
    assert_eq!(
        seen.json(),
        json!([
            {"jsonrpc": "2.0", "id": 1, "result": "0x7a69"},
            {"jsonrpc": "2.0", "id": "two", "error": {"code": -32601, "message": "the method eth_nope does not exist/is not available"}},
            {"jsonrpc": "2.0", "id": 4, "error": {"code": -32600, "message": "invalid request"}},
            {"jsonrpc": "2.0", "id": 5, "result": tx.hash},
            {"jsonrpc": "2.0", "id": 6, "result": "0x1"},
        ]),
        "the notification is executed and not answered; the send commits before the read after it"
    );
    assert_eq!(rig.mined().len(), 1);

    let empty = rig.send(&rpc(&json!([]))).await;
    assert_eq!(
        empty.json(),
        json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": "empty batch"}})
    );
    let notification = rig.send(&rpc(&json!({"jsonrpc": "2.0", "method": "eth_chainId"}))).await;
    assert_eq!((notification.status(), notification.json()), (Some(200), Value::Null), "{notification:?}");
    let calls: Vec<Value> =
        (0..1001).map(|i| json!({"jsonrpc": "2.0", "id": i + 7, "method": "eth_chainId"})).collect();
    let too_many = rig.send(&rpc(&Value::Array(calls))).await;
    assert_eq!(
        too_many.json(),
        json!([{"jsonrpc": "2.0", "id": 7, "error": {"code": -32600, "message": "batch too large"}}])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn geths_errors_word_for_word() {
    let rig = Rig::with_block_time(60_000).await;
    // Pooled, then the same bytes again: already known.
    let first = transfer(0, VALUE);
    assert_eq!(rig.send_tx(&first).await, Ok(first.hash.clone()));
    assert_eq!(rig.send_tx(&first).await, Err("already known".into()));
    // The same nonce at 5 % more: underpriced; at 10 % more it replaces the first.
    let cheap = signed(KEY, 31337, 0, VALUE, 3 * GWEI * 105 / 100, GWEI * 105 / 100, 21_000);
    assert_eq!(rig.send_tx(&cheap).await, Err("replacement transaction underpriced".into()));
    let bumped = signed(KEY, 31337, 0, VALUE, 3 * GWEI * 110 / 100, GWEI * 110 / 100, 21_000);
    assert_eq!(rig.send_tx(&bumped).await, Ok(bumped.hash.clone()));
    assert_eq!(rig.result("eth_getTransactionByHash", json!([first.hash])).await, Value::Null, "replaced");
    assert_eq!(rig.nonce("pending").await, "0x1");
    assert_eq!(rig.nonce("latest").await, "0x0");
    // Mined: the same bytes again are a used nonce, not "already known".
    rig.clock.advance_ms(60_000);
    assert_eq!(rig.mined().len(), 1);
    assert_eq!(rig.mined()[0].object_id, bumped.hash);
    assert_eq!(rig.send_tx(&bumped).await, Err("nonce too low: next nonce 1, tx nonce 0".into()));
    assert_eq!(rig.send_tx(&first).await, Err("nonce too low: next nonce 1, tx nonce 0".into()));

    // Funds: one transaction over the balance, then two that together are.
    let poor = address_of(POOR_KEY).unwrap();
    assert_eq!(
        rig.send_tx(&transfer_from(POOR_KEY, 0, ETHER)).await,
        Err(format!(
            "insufficient funds for gas * price + value: balance {POOR_FUNDS}, tx cost {}, overshot {}",
            ETHER + 63_000 * GWEI,
            ETHER + 63_000 * GWEI - POOR_FUNDS
        ))
    );
    let half = POOR_FUNDS / 2;
    assert!(rig.send_tx(&transfer_from(POOR_KEY, 0, half)).await.is_ok());
    let cost = half + 63_000 * GWEI;
    assert_eq!(
        rig.send_tx(&transfer_from(POOR_KEY, 1, half)).await,
        Err(format!(
            "insufficient funds for gas * price + value: balance {POOR_FUNDS}, queued cost {cost}, tx cost {cost}, overshot {}",
            2 * cost - POOR_FUNDS
        ))
    );
    assert_eq!(rig.result("eth_getTransactionCount", json!([poor, "pending"])).await, "0x1");

    // What geth checks before the state.
    let cases = [
        (
            signed(KEY, 1, 1, VALUE, 3 * GWEI, GWEI, 21_000),
            "invalid sender: invalid chain id for signer: have 1 want 31337",
        ),
        (
            signed(KEY, 31337, 1, VALUE, 3 * GWEI, GWEI, 20_000),
            "intrinsic gas too low: gas 20000, minimum needed 21000",
        ),
        (signed(KEY, 31337, 1, VALUE, 3 * GWEI, GWEI, 30_000_001), "exceeds block gas limit"),
        (
            signed(KEY, 31337, 1, VALUE, GWEI, 2 * GWEI, 21_000),
            "max priority fee per gas higher than max fee per gas",
        ),
        (
            signed(KEY, 31337, 1, VALUE, 100_000 * GWEI, GWEI, 21_000),
            "tx fee (2.10 ether) exceeds the configured cap (1.00 ether)",
        ),
        (
            signed(KEY, 31337, 1, VALUE, 3 * GWEI, 0, 21_000),
            "transaction gas price below minimum: gas tip cap 0, minimum needed 1",
        ),
    ];
    for (tx, message) in cases {
        assert_eq!(rig.send_tx(&tx).await, Err(message.to_string()));
    }
    let (code, _) = rig.error("eth_sendRawTransaction", json!([first.raw])).await;
    assert_eq!(code, -32000, "node errors are -32000");

    // The envelope and the parameters.
    assert_eq!(
        rig.error("eth_subscribe", json!([])).await,
        (-32601, "the method eth_subscribe does not exist/is not available".into())
    );
    let unparsable = rig.send(&rpc(&json!("x")).body("{\"jsonrpc\": \"2.0\", ")).await;
    assert_eq!(
        (unparsable.status(), unparsable.json()),
        (
            Some(200),
            json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "parse error"}})
        )
    );
    let invalid_params = [
        ("eth_getBalance", json!([sender()]), "missing value for required argument 1"),
        (
            "eth_getBalance",
            json!(["0x1234", "latest"]),
            "invalid argument 0: hex string has length 4, want 40 for common.Address",
        ),
        ("eth_getBalance", json!([sender(), "newest"]), "invalid argument 1: hex string without 0x prefix"),
        (
            "eth_getBlockByNumber",
            json!(["latest", "yes"]),
            "invalid argument 1: json: cannot unmarshal string into Go value of type bool",
        ),
        ("eth_chainId", json!([1]), "too many arguments, want at most 0"),
        ("eth_getTransactionReceipt", json!({"hash": "0x"}), "non-array args"),
        (
            "eth_getTransactionCount",
            json!([sender(), "0x01"]),
            "invalid argument 1: hex number with leading zero digits",
        ),
    ];
    for (method, params, message) in invalid_params {
        assert_eq!(rig.error(method, params).await, (-32602, message.to_string()), "{method}");
    }
    assert_eq!(
        rig.error("eth_getBalance", json!([sender(), "0x99"])).await,
        server_error("header not found")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_raw_transactions_get_geths_decode_errors() {
    let rig = Rig::start().await;
    let good = transfer(0, VALUE).raw;
    let high_s = format!("{}{}", &good[..good.len() - 64], "f".repeat(64));
    let cases: Vec<(String, i64, &str)> = vec![
        ("0x".into(), -32000, "typed transaction too short"),
        ("0x02".into(), -32000, "typed transaction too short"),
        ("0x05aa".into(), -32000, "transaction type not supported"),
        ("0x00c0".into(), -32000, "transaction type not supported"),
        ("0x80".into(), -32000, "rlp: expected input list for types.LegacyTx"),
        ("0xc0".into(), -32000, "rlp: too few elements for types.LegacyTx"),
        ("0x02c0".into(), -32000, "rlp: too few elements for types.DynamicFeeTx"),
        ("0x02f8".into(), -32000, "rlp: value size exceeds available input length"),
        (format!("{good}00"), -32000, "rlp: input contains more than one value"),
        (high_s, -32000, "invalid sender: invalid transaction v, r, s values"),
        (
            "0xzz".into(),
            -32602,
            "invalid argument 0: json: cannot unmarshal invalid hex string into Go value of type hexutil.Bytes",
        ),
        (
            "02f8".into(),
            -32602,
            "invalid argument 0: json: cannot unmarshal hex string without 0x prefix into Go value of type hexutil.Bytes",
        ),
        (
            "0x123".into(),
            -32602,
            "invalid argument 0: json: cannot unmarshal hex string of odd length into Go value of type hexutil.Bytes",
        ),
    ];
    for (raw, code, message) in cases {
        let (got_code, got) = rig.error("eth_sendRawTransaction", json!([raw])).await;
        assert!(
            got_code == code && got.starts_with(message),
            "{raw}: ({got_code}, {got}), want ({code}, {message}…)"
        );
    }
    for params in [json!([]), json!([null]), json!([good, good]), json!([7])] {
        let (code, _) = rig.error("eth_sendRawTransaction", params.clone()).await;
        assert_eq!(code, -32602, "{params}");
    }
    assert!(rig.mined().is_empty(), "nothing malformed moved value");
    assert!(rig.send_tx(&transfer(0, VALUE)).await.is_ok(), "and the node still serves");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_transport_is_checked_as_geth_checks_it() {
    let rig = Rig::start().await;
    let health = rig.send(&Req::new("GET", "/")).await;
    assert_eq!((health.status(), health.json()), (Some(200), json!({})));
    let put = rig.send(&Req::new("PUT", "/").header("Content-Type", "application/json").body("{}")).await;
    assert_eq!(
        (put.status(), put.json()["error"]["message"].as_str()),
        (Some(405), Some("method not allowed"))
    );
    let plain = rig.send(&Req::new("POST", "/").header("Content-Type", "text/plain").body("{}")).await;
    assert_eq!(
        (plain.status(), plain.json()["error"]["message"].as_str()),
        (Some(415), Some("invalid content type, only application/json is supported"))
    );
    let untyped = rig
        .send(
            &Req::new("POST", "/")
                .body(json!({"jsonrpc": "2.0", "id": 1, "method": "eth_chainId"}).to_string()),
        )
        .await;
    assert_eq!(untyped.status(), Some(415));
    let empty = rig.send(&rpc(&json!(null)).body("")).await;
    assert_eq!((empty.status(), empty.json()), (Some(200), Value::Null), "nothing to read, nothing written");
    let any_path = rig
        .send(
            &Req::new("POST", "/rpc/v1")
                .header("Content-Type", "application/json; charset=utf-8")
                .body(json!({"jsonrpc": "2.0", "id": 3, "method": "eth_chainId"}).to_string()),
        )
        .await;
    assert_eq!(any_path.json(), json!({"jsonrpc": "2.0", "id": 3, "result": "0x7a69"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nonce_gap_stays_queued_until_it_fills() {
    let rig = Rig::start().await;
    let later = transfer(1, VALUE);
    assert_eq!(rig.send_tx(&later).await, Ok(later.hash.clone()));
    assert_eq!(rig.result("eth_getTransactionReceipt", json!([later.hash])).await, Value::Null);
    let pooled = rig.result("eth_getTransactionByHash", json!([later.hash])).await;
    assert_eq!((&pooled["blockNumber"], &pooled["blockHash"]), (&Value::Null, &Value::Null));
    assert_eq!(rig.nonce("pending").await, "0x0", "a queued transaction is not pending");
    assert!(rig.mined().is_empty());

    let first = transfer(0, VALUE);
    assert!(rig.send_tx(&first).await.is_ok());
    let mined: Vec<(String, u64)> =
        rig.mined().iter().map(|e| (e.object_id.clone(), e.params["block"].as_u64().unwrap())).collect();
    assert_eq!(mined, vec![(first.hash, 1), (later.hash, 1)], "both in one block, in nonce order");
    assert_eq!(rig.nonce("latest").await, "0x2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocks_are_mined_every_block_time_of_service_time() {
    let rig = Rig::with_block_time(2_000).await;
    let first = transfer(0, VALUE);
    assert!(rig.send_tx(&first).await.is_ok());
    rig.clock.advance_ms(500);
    let second = transfer(1, VALUE);
    assert!(rig.send_tx(&second).await.is_ok());
    assert_eq!(rig.result("eth_getTransactionReceipt", json!([first.hash])).await, Value::Null);
    assert_eq!((rig.nonce("latest").await, rig.nonce("pending").await), (json!("0x0"), json!("0x2")));
    let pending = rig.result("eth_getBlockByNumber", json!(["pending", false])).await;
    assert_eq!(pending["transactions"], json!([first.hash, second.hash]));

    rig.clock.advance_ms(1_499);
    assert!(rig.mined().is_empty(), "due 2000 ms after the first became executable");
    rig.clock.advance_ms(1);
    // The ledger is current without any request.
    let ledger = rig.mined();
    assert_eq!(ledger.len(), 2, "both pooled before the block: one block");
    assert!(ledger.iter().all(|e| e.at_ms == START_MS + 2_000 && e.params["block"] == 1));
    let receipt = rig.result("eth_getTransactionReceipt", json!([second.hash])).await;
    assert_eq!((&receipt["blockNumber"], &receipt["transactionIndex"]), (&json!("0x1"), &json!("0x1")));
    assert_eq!(receipt["cumulativeGasUsed"], "0xa410");
    let block = rig.result("eth_getBlockByNumber", json!(["latest", false])).await;
    assert_eq!(block["timestamp"], format!("{:#x}", (START_MS + 2_000) / 1000));

    // The next transaction waits its own block time, from when it arrived.
    rig.clock.advance_ms(10_000);
    let third = transfer(2, VALUE);
    assert!(rig.send_tx(&third).await.is_ok());
    rig.clock.advance_ms(1_999);
    assert_eq!(rig.mined().len(), 2);
    rig.clock.advance_ms(1);
    assert_eq!(rig.mined().len(), 3);
    assert_eq!(rig.mined()[2].at_ms, START_MS + 14_000);
    assert_eq!(rig.result("eth_blockNumber", json!([])).await, "0x2", "no empty blocks in between");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeds_go_through_the_control_api() {
    let rig = Rig::start().await;
    let other = "0x1111111111111111111111111111111111111111";
    let seeded = rig
        .send(
            &Req::new("POST", "/__twice/seed").body(
                json!({"chain_id": 5, "block_time_ms": 1000, "accounts": [
                    {"address": other, "balance": "12345"},
                    {"address": "0x2222222222222222222222222222222222222222", "balance": "0xff"},
                ]})
                .to_string(),
            ),
        )
        .await;
    assert_eq!(seeded.status(), Some(201), "{seeded:?}");
    assert_eq!(seeded.json()["accounts"][1]["balance"], "255");
    assert_eq!(rig.result("eth_chainId", json!([])).await, "0x5");
    assert_eq!(rig.result("eth_getBalance", json!([other, "latest"])).await, "0x3039");
    for bad in [
        json!({"accounts": [{"address": "0x12", "balance": "1"}]}),
        json!({"accounts": [{"address": other, "balance": "-1"}]}),
        json!({"accounts": [{"address": other}]}),
        json!({"chain": 1}),
    ] {
        let refused = rig.send(&Req::new("POST", "/__twice/seed").body(bad.to_string())).await;
        assert_eq!(refused.status(), Some(400), "{bad}: {refused:?}");
        assert!(refused.json()["error"]["message"].is_string());
    }
    // Transactions signed for the old chain id are now refused.
    assert_eq!(
        rig.send_tx(&transfer(0, VALUE)).await,
        Err("invalid sender: invalid chain id for signer: have 31337 want 5".into())
    );
    let ledger = rig.send(&Req::new("GET", "/__twice/ledger")).await;
    assert_eq!(ledger.json(), json!({"service": "chain", "effects": []}));
    rig.fakes.chain.set_chain_id(31337);
    assert!(rig.fakes.chain.seed_account("0x12", 1).is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_reads_serve_an_old_nonce_and_null_receipts() {
    let rig = Rig::start().await;
    let tx = transfer(0, VALUE);
    assert!(rig.send_tx(&tx).await.is_ok());
    rig.clock.advance_ms(1_000);
    let stale = |method: &str| {
        FaultRule::always(FaultSpec::StaleRead { lag_ms: 5_000 }).field("rpc_method", method).times(1)
    };
    let fake = rig.fake();
    for method in [
        "eth_getTransactionCount",
        "eth_getTransactionReceipt",
        "eth_getTransactionByHash",
        "eth_blockNumber",
    ] {
        fake.add_rule(stale(method)).unwrap();
    }
    assert_eq!(rig.nonce("pending").await, "0x0", "the nonce as it was 5 s ago");
    assert_eq!(rig.result("eth_getTransactionReceipt", json!([tx.hash])).await, Value::Null);
    assert_eq!(rig.result("eth_getTransactionByHash", json!([tx.hash])).await, Value::Null);
    assert_eq!(rig.result("eth_blockNumber", json!([])).await, "0x0");
    // Each rule fired once; fresh reads see the transaction.
    assert_eq!(rig.nonce("pending").await, "0x1");
    assert_eq!(rig.result("eth_getTransactionReceipt", json!([tx.hash])).await["status"], "0x1");
    fake.add_rule(stale("eth_getTransactionCount")).unwrap();
    rig.clock.advance_ms(4_000);
    assert_eq!(rig.nonce("latest").await, "0x1", "once the lag has passed, a stale read sees it too");
    let faults: Vec<String> =
        fake.journal().iter().flat_map(|e| e.faults.iter().map(|f| f.fault.clone())).collect();
    assert_eq!(faults.len(), 5);
    assert!(faults.iter().all(|f| f == "stale_read"));
}

/// One request's journal row: outcome, status and the faults that fired.
fn journal_rows(fake: &Fake) -> Vec<(String, Option<u16>, Vec<String>)> {
    fake.journal()
        .iter()
        .map(|e| (e.outcome.clone(), e.status, e.faults.iter().map(|f| f.fault.clone()).collect()))
        .collect()
}

fn on_send(fault: FaultSpec) -> FaultRule {
    FaultRule::always(fault).field("rpc_method", "eth_sendRawTransaction").nth(1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_after_commit_pools_and_the_resend_is_already_known() {
    let rig = Rig::with_block_time(30_000).await;
    let fake = rig.fake();
    fake.add_rule(on_send(FaultSpec::TimeoutAfterCommit { hold_ms: 60_000 })).unwrap();
    let tx = transfer(0, VALUE);
    assert_eq!(
        client::send_hasty(rig.server.addr(), &send_raw(&tx.raw), &fake, HASTY_MS).await,
        Seen::Timeout
    );
    // Pooled: the resend of the same bytes is known; a new signature with the next nonce is
    // a second transfer.
    assert_eq!(rig.send_tx(&tx).await, Err("already known".into()));
    assert_eq!(rig.nonce("pending").await, "0x1");
    let resigned = transfer(1, VALUE);
    assert!(rig.send_tx(&resigned).await.is_ok());
    rig.clock.advance_ms(30_000);
    let ledger = rig.mined();
    let hashes: Vec<&str> = ledger.iter().map(|e| e.object_id.as_str()).collect();
    assert_eq!(hashes, vec![tx.hash.as_str(), resigned.hash.as_str()]);
    assert!(ledger.iter().all(|e| e.params["to"] == TO));
    let held = fake.journal()[0].clone();
    assert_eq!((held.outcome.as_str(), held.faults[0].fault.as_str()), ("held", "timeout_after_commit"));
    assert_eq!(ledger[0].request_id, held.request_id, "the held request pooled it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_errors_echo_the_request_ids() {
    let rig = Rig::start().await;
    let fake = rig.fake();
    fake.add_rule(on_send(FaultSpec::ErrorAfterCommit { status: 500 })).unwrap();
    let tx = transfer(0, VALUE);
    let body = json!({"jsonrpc": "2.0", "id": 42, "method": "eth_sendRawTransaction", "params": [tx.raw]});
    let seen = rig.send(&rpc(&body)).await;
    assert_eq!(seen.status(), Some(500));
    assert_eq!((&seen.json()["id"], &seen.json()["error"]["code"]), (&json!(42), &json!(-32603)));
    assert_eq!(rig.mined().len(), 1, "committed before the error");
    assert_eq!(rig.send_tx(&tx).await, Err("nonce too low: next nonce 1, tx nonce 0".into()));

    fake.add_rule(FaultRule::always(FaultSpec::ErrorAfterCommit { status: 502 }).nth(1)).unwrap();
    let batch = json!([
        {"jsonrpc": "2.0", "id": 7, "method": "eth_sendRawTransaction", "params": [transfer(1, VALUE).raw]},
        {"jsonrpc": "2.0", "method": "eth_chainId"},
        {"jsonrpc": "2.0", "id": "8", "method": "eth_chainId"},
    ]);
    let seen = rig.send(&rpc(&batch)).await;
    assert_eq!(seen.status(), Some(502));
    let ids: Vec<Value> = seen.json().as_array().unwrap().iter().map(|a| a["id"].clone()).collect();
    assert_eq!(ids, vec![json!(7), json!("8")], "one error per answered call");
    assert_eq!(rig.mined().len(), 2);

    fake.clear_rules();
    fake.add_rule(FaultRule::always(FaultSpec::Reject { status: 429, body: None })).unwrap();
    let seen = rig.send(&rpc(&json!({"jsonrpc": "2.0", "id": "9", "method": "eth_blockNumber"}))).await;
    assert_eq!(
        (seen.status(), &seen.json()["id"], &seen.json()["error"]["code"]),
        (Some(429), &json!("9"), &json!(-32005))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fault_on_the_send_leaves_the_ledger_it_should() {
    let tx = transfer(0, VALUE);
    let nonce_too_low = || Err::<String, String>("nonce too low: next nonce 1, tx nonce 0".into());
    // The fault, what the caller saw (`None`: the hash, as if nothing happened), how many
    // transactions were mined after it, and what a resend of the same bytes gets.
    type SendCase = (FaultSpec, Option<Seen>, usize, Result<String, String>);
    let cases: Vec<SendCase> = vec![
        (FaultSpec::Refuse, Some(Seen::Reset), 0, Ok(tx.hash.clone())),
        (FaultSpec::DropAfterCommit, Some(Seen::Closed), 1, nonce_too_low()),
        (FaultSpec::TimeoutAfterCommit { hold_ms: 60_000 }, Some(Seen::Timeout), 1, nonce_too_low()),
        (FaultSpec::SilentNoop, None, 0, Ok(tx.hash.clone())),
        (FaultSpec::ForgetKeys { older_than_ms: None }, None, 1, nonce_too_low()),
        (FaultSpec::IgnoreKeys, None, 1, nonce_too_low()),
        (FaultSpec::Latency { before_ms: 100, after_ms: 100 }, None, 1, nonce_too_low()),
    ];
    for (fault, saw, mined, resend) in cases {
        let rig = Rig::start().await;
        let kind = fault.kind();
        rig.fake().add_rule(on_send(fault)).unwrap();
        let seen =
            client::send_hasty(rig.server.addr(), &send_raw(&tx.raw), &rig.fake(), HASTY_MS.max(1_000)).await;
        match &saw {
            None => assert_eq!(seen.json()["result"], tx.hash, "{kind}: {seen:?}"),
            Some(other) => assert_eq!(&seen, other, "{kind}"),
        }
        assert_eq!(rig.mined().len(), mined, "{kind}");
        assert_eq!(rig.send_tx(&tx).await, resend, "{kind}: the resend");
        let rows = journal_rows(&rig.fake());
        assert_eq!(rows[0].2, vec![kind.to_string()], "{kind}: {rows:?}");
    }

    // commit_after_timeout: the caller gives up, and the pool takes the transaction later.
    let rig = Rig::start().await;
    rig.fake().add_rule(on_send(FaultSpec::CommitAfterTimeout { delay_ms: Some(1_000) })).unwrap();
    assert_eq!(
        client::send_hasty(rig.server.addr(), &send_raw(&tx.raw), &rig.fake(), HASTY_MS).await,
        Seen::Timeout
    );
    assert_eq!(rig.nonce("pending").await, "0x0", "not yet");
    let deadline = tokio::time::Instant::now() + Duration::from_millis(PATIENT_MS);
    while rig.mined().is_empty() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(rig.mined().len(), 1);
    assert_eq!(rig.send_tx(&tx).await, nonce_too_low());

    // reject: nothing happens, the caller sees the status.
    let rig = Rig::start().await;
    rig.fake().add_rule(on_send(FaultSpec::Reject { status: 503, body: None })).unwrap();
    let seen = rig.send(&send_raw(&tx.raw)).await;
    assert_eq!((seen.status(), &seen.json()["id"]), (Some(503), &json!(1)));
    assert!(rig.mined().is_empty());
    assert_eq!(rig.send_tx(&tx).await, Ok(tx.hash.clone()));
    assert_eq!(rig.mined().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_noop_answers_the_hash_and_pools_nothing() {
    let rig = Rig::start().await;
    rig.fake().add_rule(on_send(FaultSpec::SilentNoop)).unwrap();
    let tx = transfer(0, VALUE);
    assert_eq!(rig.send_tx(&tx).await, Ok(tx.hash.clone()));
    assert_eq!(rig.result("eth_getTransactionByHash", json!([tx.hash])).await, Value::Null);
    assert_eq!(rig.nonce("pending").await, "0x0");
    // Still validated: a bad transaction is refused even under silent_noop.
    rig.fake().add_rule(on_send(FaultSpec::SilentNoop)).unwrap();
    let wrong_chain = signed(KEY, 1, 0, VALUE, 3 * GWEI, GWEI, 21_000);
    assert!(rig.send_tx(&wrong_chain).await.unwrap_err().starts_with("invalid sender"));
    assert!(rig.mined().is_empty());
}

// Random payloads, in process.

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        "[ -~]{0,20}".prop_map(Value::String),
        prop::sample::select(vec![
            "latest",
            "pending",
            "earliest",
            "safe",
            "0x0",
            "0x1",
            "0x",
            "0x01",
            "0xffffffffffffffffff"
        ])
        .prop_map(|s| Value::String(s.into())),
        "0x[0-9a-f]{40}".prop_map(Value::String),
        "0x[0-9a-f]{64}".prop_map(Value::String),
    ];
    leaf.prop_recursive(2, 12, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop::sample::select(vec![
                    "from",
                    "to",
                    "value",
                    "data",
                    "input",
                    "blockNumber",
                    "blockHash",
                    "gas"
                ])
                .prop_map(String::from),
                inner,
                0..4
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Raw transaction bytes: random, or a valid transfer with a few bytes changed or cut.
fn raw_tx() -> impl Strategy<Value = String> {
    let valid = alloy_primitives::hex::decode(transfer(0, VALUE).raw).unwrap();
    let mutated = (
        prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        any::<prop::sample::Index>(),
    )
        .prop_map(move |(changes, cut)| {
            let mut bytes = valid.clone();
            for (at, byte) in changes {
                let i = at.index(bytes.len());
                bytes[i] = byte;
            }
            bytes.truncate(cut.index(bytes.len() + 1).max(bytes.len() / 2));
            bytes
        });
    prop_oneof![2 => prop::collection::vec(any::<u8>(), 0..120), 3 => mutated]
        .prop_map(alloy_primitives::hex::encode_prefixed)
}

fn message() -> impl Strategy<Value = Value> {
    let method = prop::sample::select(vec![
        "eth_chainId",
        "net_version",
        "eth_blockNumber",
        "eth_getBlockByNumber",
        "eth_getBlockByHash",
        "eth_getBalance",
        "eth_getTransactionCount",
        "eth_gasPrice",
        "eth_maxPriorityFeePerGas",
        "eth_feeHistory",
        "eth_estimateGas",
        "eth_call",
        "eth_getTransactionByHash",
        "eth_getTransactionReceipt",
        "eth_sendRawTransaction",
        "eth_nope",
    ]);
    let params = prop_oneof![
        3 => prop::collection::vec(json_value(), 0..4).prop_map(Value::Array),
        2 => raw_tx().prop_map(|raw| json!([raw])),
        1 => json_value(),
    ];
    let id = prop_oneof![
        Just(None),
        Just(Some(json!(1))),
        Just(Some(json!("x"))),
        Just(Some(Value::Null)),
        Just(Some(json!({})))
    ];
    let version = prop_oneof![4 => Just(Some(json!("2.0"))), 1 => Just(None), 1 => Just(Some(json!(2)))];
    (method, params, id, version).prop_map(|(method, params, id, version)| {
        let mut message = serde_json::Map::new();
        message.insert("method".into(), json!(method));
        message.insert("params".into(), params);
        if let Some(id) = id {
            message.insert("id".into(), id);
        }
        if let Some(version) = version {
            message.insert("jsonrpc".into(), version);
        }
        Value::Object(message)
    })
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => message().prop_map(|m| m.to_string().into_bytes()),
        2 => prop::collection::vec(message(), 0..5).prop_map(|b| Value::Array(b).to_string().into_bytes()),
        1 => json_value().prop_map(|v| v.to_string().into_bytes()),
        1 => prop::collection::vec(any::<u8>(), 0..64),
    ]
}

/// Checks one JSON-RPC answer object.
fn well_formed(answer: &Value) -> Result<(), String> {
    if answer["jsonrpc"] != "2.0" || answer.get("id").is_none() {
        return Err(format!("not a JSON-RPC answer: {answer}"));
    }
    match (answer.get("result"), answer.get("error")) {
        (Some(_), None) => Ok(()),
        (None, Some(error)) => {
            let code = error["code"].as_i64().ok_or(format!("no integer code: {answer}"))?;
            if !error["message"].is_string() || ![-32700, -32600, -32601, -32602, -32000].contains(&code) {
                return Err(format!("unexpected error: {answer}"));
            }
            Ok(())
        }
        _ => Err(format!("neither result nor error: {answer}")),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1_500, ..ProptestConfig::default() })]

    #[test]
    fn random_json_rpc_never_panics_and_always_answers_json_rpc(bodies in prop::collection::vec(body(), 1..4)) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        let fakes = Fakes::new(Arc::new(ManualClock::new(START_MS)), 5);
        fakes.chain.seed_account(&sender(), FUNDS).unwrap();
        let fake = Fake::Chain(fakes.chain.clone());
        for body in bodies {
            let req = FakeRequest::new("POST", "/").header("Content-Type", "application/json").body(body.clone());
            let Disposition::Respond(response) = runtime.block_on(fake.handle(req)) else {
                return Err(TestCaseError::fail("no answer without a fault"));
            };
            prop_assert_eq!(response.status, 200);
            if response.body.is_empty() {
                continue;
            }
            let answer: Value = serde_json::from_slice(&response.body).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let answers = match answer {
                Value::Array(items) => items,
                one => vec![one],
            };
            for answer in &answers {
                well_formed(answer).map_err(TestCaseError::fail)?;
            }
        }
        // Whatever got mined came from the funded sender, at consecutive nonces.
        for (i, effect) in fake.ledger().iter().enumerate() {
            prop_assert_eq!(&effect.params["nonce"], &json!(i));
        }
    }
}
