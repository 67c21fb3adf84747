//! A verdict's replay line runs as it reads: a scenario given to serve as TOML text (as the
//! kits' `load_scenario` posts it) is kept in a file, and the line names that file, so that
//! running the line sets up the same scenario and the same claims break the same invariants.

use std::process::Stdio;

use executor::world::{HttpTransport, Transport};
use serde_json::{Value, json};

use super::mcp::Killed;
use super::serve::{args, json_of, refund, runtime};
use super::{read_urls, twice};

/// The catalog's `lost_refund_reply` under another name, as a test would write it inline.
fn scenario_text() -> String {
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../scenarios/catalog/lost_refund_reply.toml");
    let text = std::fs::read_to_string(file).unwrap();
    let renamed = text.replacen("name = \"lost_refund_reply\"", "name = \"inline_lost_reply\"", 1);
    assert_ne!(renamed, text, "the catalog file starts with its name");
    format!("# Given as text, not as a file.\n{renamed}")
}

/// The app sends the refund once (its reply is lost after the commit) and claims it failed:
/// the ledger holds the refund, so `honest-terminal-states` is violated, among others. The
/// verdict's violated invariants and its replay line.
async fn lose_the_reply_and_claim_failed(control: &str, payments: &str) -> (Vec<String>, String) {
    assert!(HttpTransport.send(refund(payments, "pi_4812", 5000, "k-1")).await.is_err(), "the reply is lost");
    let claim = json!({"id": "refund-4812", "action": "payments.refund", "state": "failed", "attempts": 1});
    let claims = json!({ "claims": [claim] });
    let (status, verdict) = json_of("POST", format!("{control}/__twice/check"), claims).await;
    assert_eq!((status, verdict["exit_code"].as_i64()), (200, Some(1)), "{verdict}");
    let result = &verdict["results"]["results"][0];
    let violated = result["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["status"] == "violated")
        .map(|v| v["invariant"].as_str().unwrap().to_string())
        .collect();
    (violated, result["replay"].as_str().unwrap().to_string())
}

#[test]
fn the_replay_line_of_a_scenario_given_as_text_names_a_file_that_replays_it() {
    let text = scenario_text();
    let (violated, replay) = runtime().block_on(async {
        let served = serve::start(&args()).await.unwrap();
        let urls = served.urls();
        let (control, payments) = (urls["control"].clone(), urls["payments"].clone());
        let (status, set) =
            json_of("POST", format!("{control}/__twice/scenario"), json!({"toml": text})).await;
        assert_eq!(status, 200, "{set}");
        let found = lose_the_reply_and_claim_failed(&control, &payments).await;
        served.stop().await;
        found
    });
    assert!(violated.iter().any(|v| v == "honest-terminal-states"), "{violated:?}");
    let words: Vec<&str> = replay.split(' ').collect();
    let ["twice", "serve", "--scenario", file, "--seed", "3"] = words.as_slice() else {
        panic!("not a serve replay line: {replay}");
    };
    let file = std::path::PathBuf::from(file);
    assert!(file.is_absolute() && file.is_file(), "{replay}: no such file");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), text, "the text as it was given");
    let given = scenarios::parse_scenario(&text, "given.toml").unwrap();
    assert_eq!(scenarios::parse::parse_file(&file).unwrap(), given);

    // The line itself, with a URLs file to find the new serve by.
    let dir = std::env::temp_dir().join(format!("twice-serve-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let urls_file = dir.join("urls.json");
    let _ = std::fs::remove_file(&urls_file);
    // Killed when dropped, on a failed assertion too: no serve outlives the test.
    let mut serve = Killed(
        twice()
            .args(&words[1..])
            .arg("--urls-file")
            .arg(&urls_file)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let urls = read_urls(&urls_file, &mut serve.0);
    let url = |name: &str| urls[name].as_str().unwrap().to_string();
    let (described, again) = runtime().block_on(async {
        let (_, described) =
            json_of("GET", format!("{}/__twice/scenario", url("control")), Value::Null).await;
        (described, lose_the_reply_and_claim_failed(&url("control"), &url("payments")).await)
    });
    drop(serve);
    assert_eq!(described["name"], json!("inline_lost_reply"));
    assert_eq!(again, (violated, replay), "the replay breaks the same invariant and names the same file");
    let _ = std::fs::remove_dir_all(&dir);
    if let Some(kept) = file.parent() {
        let _ = std::fs::remove_dir_all(kept);
    }
}
