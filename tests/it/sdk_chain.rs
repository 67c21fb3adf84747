//! The chain fake against the real web3.py 8 and eth-account 0.14, over loopback HTTP: sign,
//! `send_raw_transaction`, `wait_for_transaction_receipt`; and what a lost reply to the send
//! does to a careful client and to a naive one.

use std::sync::Arc;

use fake_services::chain::{address_of, sign_transfer};
use fake_services::{Fake, Fakes};
use serde_json::{Value, json};
use vocabulary::Effect;
use vocabulary::FaultRule;
use vocabulary::FaultSpec;
use vocabulary::JournalEntry;
use vocabulary::TokioClock;

use crate::python::{SEED, run_script};
/// The sender: keccak256("twice chain account 1").
const KEY: &str = "0xbebd77e4aa6898d625823fb3dfffda55489b1c9249b01c5912c0ab964a68db9d";
const TO: &str = "0x70997970c51812dc3a010c7d01b50e0d17dc79c8";
const ETHER: u128 = 1_000_000_000_000_000_000;
const VALUE: u128 = ETHER / 100;
const GWEI: u128 = 1_000_000_000;
/// web3's send gives up on a reply after this many seconds.
const CLIENT_TIMEOUT_S: &str = "1";

/// What one script run left behind.
struct Run {
    seen: Value,
    ledger: Vec<Effect>,
    journal: Vec<JournalEntry>,
    /// How many requests each armed rule matched: with a rule on `eth_sendRawTransaction`,
    /// how many sends reached the node.
    matched: Vec<u64>,
}

impl Run {
    fn mined(&self) -> Vec<&Effect> {
        self.ledger.iter().filter(|e| e.kind == "tx.mined").collect()
    }
}

/// The first `eth_sendRawTransaction` is committed (pooled) and its reply held past the
/// client's timeout.
fn first_send_times_out() -> FaultRule {
    FaultRule::always(FaultSpec::TimeoutAfterCommit { hold_ms: 15_000 })
        .field("rpc_method", "eth_sendRawTransaction")
        .nth(1)
}

/// Starts a chain fake with [`KEY`] funded with 1000 ether, `block_time_ms` and `rules`,
/// runs `tests/python/{script} URL KEY TO VALUE args...` and returns its JSON line with the
/// fake's ledger and journal.
async fn run_chain(script: &str, args: &[&str], block_time_ms: u64, rules: Vec<FaultRule>) -> Run {
    let fakes = Fakes::new(Arc::new(TokioClock::from_wall_clock()), SEED);
    fakes.chain.seed_account(&address_of(KEY).unwrap(), 1000 * ETHER).unwrap();
    fakes.chain.set_block_time_ms(block_time_ms);
    let fake = Fake::Chain(fakes.chain.clone());
    for rule in rules {
        fake.add_rule(rule).unwrap();
    }
    let mut all_args = vec![KEY.to_string(), TO.to_string(), VALUE.to_string()];
    all_args.extend(args.iter().map(|a| a.to_string()));
    let seen = run_script(script, &fake, &all_args).await;
    let matched = fake.rules().iter().map(|r| r.matched).collect();
    Run { seen, ledger: fake.ledger(), journal: fake.journal(), matched }
}

#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web3_signs_sends_and_waits_for_the_receipt() {
    let run = run_chain("chain_web3.py", &["10", "--tour"], 0, vec![]).await;
    let seen = &run.seen;
    let sender = address_of(KEY).unwrap();
    assert_eq!(
        (&seen["chain_id"], &seen["from"], &seen["nonce"]),
        (&json!(31337), &json!(sender), &json!(0))
    );

    // The node answered the hash eth-account computed, and the same bytes signed in Rust
    // give the same hash (both sign with RFC 6979).
    let hash = seen["hash"].as_str().unwrap();
    assert_eq!(seen["send"], json!({"ok": true, "hash": hash}), "{seen}");
    let (_, rust_hash) = sign_transfer(KEY, 31337, 0, TO, VALUE, 3 * GWEI, GWEI, 21_000).unwrap();
    assert_eq!(rust_hash, hash);
    assert_eq!(
        seen["receipt"],
        json!({"status": 1, "blockNumber": 1, "transactionHash": hash, "from": sender, "to": TO, "gasUsed": 21000, "effectiveGasPrice": 2 * GWEI}),
    );
    let fee = 21_000 * 2 * GWEI;
    let wei = |field: &str| seen[field].as_str().and_then(|s| s.parse::<u128>().ok()).unwrap();
    assert_eq!(
        wei("balance_before") - wei("balance_after"),
        VALUE + fee,
        "value plus 21000 gas at base fee + tip"
    );
    assert_eq!((wei("to_balance_after"), &seen["nonce_after"]), (VALUE, &json!(1)));

    // web3's formatters and validators accepted every read method, batched ones included.
    let tour = &seen["tour"];
    assert_eq!(
        (&tour["net_version"], &tour["block_number"], &tour["pending_number"]),
        (&json!("31337"), &json!(1), &json!(2))
    );
    assert_eq!(
        tour["latest"],
        json!({"number": 1, "baseFeePerGas": GWEI as u64, "gasLimit": 30_000_000, "transactions": 1})
    );
    assert_eq!(
        tour["full_transactions"],
        json!([{"hash": hash, "from": sender, "value": VALUE as u64, "type": 2}])
    );
    assert_eq!(tour["fee_history"]["oldestBlock"], 0);
    assert_eq!(tour["fee_history"]["reward"], json!([[0, 0], [GWEI as u64, GWEI as u64]]));
    assert_eq!((&tour["estimate"], &tour["call"]), (&json!(21000), &json!("0x")));
    assert_eq!((&tour["gas_price"], &tour["max_priority_fee"]), (&json!(GWEI as u64), &json!(GWEI as u64)));
    assert_eq!((&tour["batch"][0], &tour["batch"][2]), (&json!(1), &json!(1)));
    assert!(tour["client_version"].as_str().unwrap().starts_with("twice/"));

    let mined = run.mined();
    assert_eq!(mined.len(), 1, "{:#?}", run.ledger);
    assert_eq!(
        mined[0].params,
        json!({"from": sender, "to": TO, "value": VALUE.to_string(), "nonce": 0, "hash": hash, "block": 1})
    );
}

#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web3_resends_the_same_bytes_after_a_read_timeout_and_gets_already_known() {
    // Blocks every 3 s: the transaction is still in the pool when web3 sends it again.
    let run = run_chain("chain_web3.py", &[CLIENT_TIMEOUT_S], 3_000, vec![first_send_times_out()]).await;
    let seen = &run.seen;
    let hash = seen["hash"].as_str().unwrap();

    // web3 retried the timed-out send by itself, with the same bytes: the node knew them.
    assert_eq!(run.matched, vec![2], "two sends reached the node: {:#?}", run.journal);
    assert_eq!(
        (&seen["send"]["ok"], &seen["send"]["class"]),
        (&json!(false), &json!("Web3RPCError")),
        "{seen}"
    );
    assert!(seen["send"]["message"].as_str().unwrap().contains("already known"), "{seen}");
    let held: Vec<&JournalEntry> =
        run.journal.iter().filter(|e| e.faults.iter().any(|f| f.fault == "timeout_after_commit")).collect();
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].outcome, "held");

    // The transfer happened once, and the client that waited on its own hash saw it.
    assert_eq!(
        (&seen["receipt"]["status"], &seen["receipt"]["transactionHash"]),
        (&json!(1), &json!(hash)),
        "{seen}"
    );
    let mined = run.mined();
    assert_eq!(mined.len(), 1, "{:#?}", run.ledger);
    assert_eq!((mined[0].object_id.as_str(), &mined[0].params["nonce"]), (hash, &json!(0)));
    assert_eq!(
        mined[0].request_id, held[0].request_id,
        "the send whose reply was lost is the one that pooled it"
    );
    assert_eq!(seen["nonce_after"], 1);
}

#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signing_again_with_the_next_nonce_after_a_timeout_transfers_twice() {
    let run = run_chain("chain_naive.py", &[CLIENT_TIMEOUT_S], 3_000, vec![first_send_times_out()]).await;
    let seen = &run.seen;

    // The script saw one failure ("already known", after web3's own resend) and believed it.
    assert_eq!((&seen["ok"], &seen["attempts"]), (&json!(true), &json!(2)), "{seen}");
    let errors = seen["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{seen}");
    assert!(
        errors[0].as_str().unwrap().starts_with("Web3RPCError")
            && errors[0].as_str().unwrap().contains("already known"),
        "{seen}"
    );
    let hashes: Vec<&str> = seen["hashes"].as_array().unwrap().iter().map(|h| h.as_str().unwrap()).collect();
    assert_ne!(hashes[0], hashes[1], "a new signature, a new transaction");
    assert_eq!(run.matched, vec![3], "the first send, web3's resend, and the re-signed one");

    // The bug, reproduced: two transfers of the same value to the same address.
    let mined = run.mined();
    assert_eq!(mined.len(), 2, "{:#?}", run.ledger);
    for (effect, (hash, nonce)) in mined.iter().zip([(hashes[0], 0), (hashes[1], 1)]) {
        assert_eq!((effect.object_id.as_str(), &effect.params["nonce"]), (hash, &json!(nonce)));
        assert_eq!((&effect.params["to"], &effect.params["value"]), (&json!(TO), &json!(VALUE.to_string())));
    }
    assert_eq!(seen["receipt"]["transactionHash"], hashes[1], "the caller holds the second one");
}
