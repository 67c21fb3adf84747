//! What every world of `twice serve` has besides a scenario's: the funded dev accounts (in
//! the start-up output, the URLs file and on the chain, after a reset and under a scenario),
//! where a scenario's own credentials are (`GET /__twice/scenario`), and strict keys (the
//! `--strict-keys` flag and a scenario's `strict_keys`), over real loopback HTTP.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use executor::world::{HttpTransport, Transport};
use serde_json::{Value, json};
use serve::accounts::{DEV_ACCOUNT_BALANCE_WEI, DEV_ACCOUNTS};
use serve::{self, ServeArgs};

use super::serve::{args, call, json_of, refund, runtime};
use super::{WAIT_MS_MAX, twice, wait_bounded};

async fn balance_wei(chain: &str, address: &str) -> u128 {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "eth_getBalance", "params": [address, "latest"]});
    let request = executor::world::HttpRequest {
        method: "POST",
        url: chain.to_string(),
        headers: vec![("content-type".into(), "application/json".into())],
        body: body.to_string().into_bytes(),
        timeout_ms: WAIT_MS_MAX,
    };
    let answer = HttpTransport.send(request).await.unwrap();
    assert_eq!(answer.status, 200, "{}", String::from_utf8_lossy(&answer.body));
    let answer: Value = serde_json::from_slice(&answer.body).unwrap();
    let hex = answer["result"].as_str().unwrap_or_else(|| panic!("no balance: {answer}"));
    u128::from_str_radix(hex.trim_start_matches("0x"), 16).unwrap()
}

async fn every_dev_account_is_funded(chain: &str, when: &str) {
    for account in DEV_ACCOUNTS {
        assert_eq!(balance_wei(chain, account.address).await, DEV_ACCOUNT_BALANCE_WEI, "{when}: {account:?}");
    }
}

#[test]
fn the_dev_accounts_are_funded_in_every_world_and_listed_in_the_urls_file() {
    runtime().block_on(async {
        let dir = std::env::temp_dir().join(format!("twice-serve-accounts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let urls_file = dir.join("urls.json");
        let served = serve::start(&ServeArgs { urls_file: Some(urls_file.clone()), ..args() }).await.unwrap();
        let urls = served.urls();
        let (control, chain) = (urls["control"].clone(), urls["chain"].clone());
        every_dev_account_is_funded(&chain, "at start").await;

        let file: Value = serde_json::from_str(&std::fs::read_to_string(&urls_file).unwrap()).unwrap();
        assert_eq!(file["chain"], json!(chain));
        let listed = file["accounts"].as_array().unwrap();
        assert_eq!(listed.len(), DEV_ACCOUNTS.len());
        for (entry, account) in listed.iter().zip(DEV_ACCOUNTS) {
            assert_eq!(entry["address"], json!(account.address));
            assert_eq!(entry["private_key"], json!(account.private_key));
            assert_eq!(entry["balance_wei"], json!(DEV_ACCOUNT_BALANCE_WEI.to_string()));
        }
        // `twice check` and the kits read the URLs as the file's string entries.
        let read = serve::check::urls_of(&file.to_string()).unwrap();
        assert_eq!(read, urls);

        let (_, scenario) =
            json_of("POST", format!("{control}/__twice/scenario"), json!({"name": "chain_lost_reply"})).await;
        assert!(scenario.get("error").is_none(), "{scenario}");
        every_dev_account_is_funded(&chain, "under a chain scenario").await;
        let (_, described) = json_of("GET", format!("{control}/__twice/scenario"), Value::Null).await;
        assert_eq!(described["secrets"]["chain_private_key"], json!(vocabulary::protocol::CHAIN_PRIVATE_KEY));
        assert_eq!(described["secrets"]["payments_api_key"], json!("sk_test_twice"));
        assert_eq!(described["chain_account"], json!(runner::setup::chain_account()));
        assert_eq!(described["dev_accounts"], file["accounts"]);
        let scenario_account = balance_wei(&chain, &runner::setup::chain_account()).await;
        assert_eq!(
            scenario_account,
            scenarios::model::CHAIN_ACCOUNT_BALANCE_WEI,
            "the scenario's own account"
        );

        let (status, _) = json_of("POST", format!("{control}/__twice/reset"), Value::Null).await;
        assert_eq!(status, 200);
        every_dev_account_is_funded(&chain, "after a reset").await;
        served.stop().await;
        let _ = std::fs::remove_dir_all(&dir);
    });
}

/// What a person reads first: the start-up output names each dev account and its key, and
/// says they are test keys.
#[test]
fn serve_prints_the_dev_accounts_with_their_keys_and_says_they_are_test_keys() {
    let mut child = twice()
        .args(["serve", "--strict-keys"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (lines_tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_millis(WAIT_MS_MAX);
    let mut seen = Vec::new();
    while !seen.iter().any(|l: &String| l.contains("--strict-keys")) {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => seen.push(line),
            Err(_) => panic!("serve printed no strict-keys line within {WAIT_MS_MAX} ms: {seen:#?}"),
        }
    }
    let _ = child.kill();
    let _ = wait_bounded(&mut child);
    let text = seen.join("\n");
    assert!(text.contains("test keys, public: never use them on a real chain"), "{text}");
    for account in DEV_ACCOUNTS {
        assert!(
            seen.iter().any(|l| l.contains(account.address) && l.contains(account.private_key)),
            "{account:?} in:\n{text}"
        );
    }
    assert!(text.contains("payments accepts only sk_test_twice"), "{text}");
}

async fn list_refunds_status(payments: &str, key: &str) -> u16 {
    let mut request = refund(payments, "pi_4812", 1, "unused");
    request.method = "GET";
    request.url = format!("{payments}/v1/refunds?payment_intent=pi_4812");
    request.body.clear();
    request.headers = vec![("authorization".into(), format!("Bearer {key}"))];
    HttpTransport.send(request).await.unwrap().status
}

#[test]
fn strict_keys_refuse_a_made_up_key_in_every_world_and_accept_the_workers_key() {
    runtime().block_on(async {
        let served = serve::start(&ServeArgs { strict_keys: true, ..args() }).await.unwrap();
        let urls = served.urls();
        let (control, payments) = (urls["control"].clone(), urls["payments"].clone());
        assert_eq!(list_refunds_status(&payments, "sk_test_madeup00001234").await, 401);
        assert_eq!(list_refunds_status(&payments, "sk_test_twice").await, 200);
        let (status, _) =
            json_of("POST", format!("{control}/__twice/scenario"), json!({"name": "lost_refund_reply"}))
                .await;
        assert_eq!(status, 200);
        let answer = call("GET", format!("{payments}/v1/refunds?payment_intent=pi_4812"), Value::Null).await;
        assert_eq!(answer.status, 401, "no key at all is 401 too");
        assert_eq!(list_refunds_status(&payments, "sk_test_madeup00001234").await, 401, "under a scenario");
        assert_eq!(list_refunds_status(&payments, "sk_test_twice").await, 200);
        let (status, _) = json_of("POST", format!("{control}/__twice/reset"), Value::Null).await;
        assert_eq!(status, 200);
        assert_eq!(list_refunds_status(&payments, "sk_test_madeup00001234").await, 401, "after a reset");
        served.stop().await;
    });
}

/// A scenario's `strict_keys = true` does what the flag does, for that scenario's world only.
#[test]
fn a_scenarios_strict_keys_refuse_a_made_up_key_until_the_next_world() {
    const STRICT: &str = r#"
name = "strict-refund"
strict_keys = true
[[intents]]
id = "refund-1"
action = "payments.refund"
params = { payment_intent = "pi_1", amount = 500 }
"#;
    runtime().block_on(async {
        let served = serve::start(&args()).await.unwrap();
        let urls = served.urls();
        let (control, payments) = (urls["control"].clone(), urls["payments"].clone());
        assert_eq!(
            list_refunds_status(&payments, "sk_test_madeup00001234").await,
            200,
            "permissive by default"
        );
        let (status, answer) =
            json_of("POST", format!("{control}/__twice/scenario"), json!({"toml": STRICT})).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(list_refunds_status(&payments, "sk_test_madeup00001234").await, 401);
        let done = HttpTransport.send(refund(&payments, "pi_1", 500, "k-1")).await.unwrap();
        assert_eq!(done.status, 200, "the worker's key: {}", String::from_utf8_lossy(&done.body));
        let (status, _) = json_of("POST", format!("{control}/__twice/reset"), Value::Null).await;
        assert_eq!(status, 200);
        assert_eq!(list_refunds_status(&payments, "sk_test_madeup00001234").await, 200, "after a reset");
        served.stop().await;
    });
}
