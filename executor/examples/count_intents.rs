//! The work whose instructions and fsyncs per intent `cargo xtask bench` counts: the reference
//! executor proposing refunds in batches and draining each batch, and, for comparison, raw
//! single-row SQLite commits.
//!
//! ```text
//! count_intents intents URL DIR N BATCH full|normal   # N refunds, BATCH per propose_batch
//! count_intents raw DIR N full|normal                  # N single-row commits
//! ```
//!
//! `intents` drives the payments fake at `URL`, which runs in another process (the runner
//! starts `count_server serve payments` from fake-services), so that counting this process
//! counts the executor alone: its log, its keys, its HTTP client. Each batch is one
//! `Executor::propose_batch` (one durable commit for the batch, what the stdio server does with
//! proposals that arrive together), then `Executor::drain` until the batch is confirmed. The
//! run ends with a check that every intent is `confirmed` after one attempt.
//!
//! `raw` is the floor of anything that must be durable before it answers: one `INSERT` of one
//! small row per transaction, in a SQLite file in WAL mode with the same `synchronous` setting.
//!
//! Both run on one current-thread tokio runtime and write into `DIR`, which must not exist
//! yet (the runner puts it on the disk the project builds on: a tmpfs would make fsyncs free).

#[path = "../benches/common/payments_config.rs"]
mod payments_config;

use std::path::Path;

use executor::{Durability, Executor, Proposal, World};
use rusqlite::Connection;
use serde_json::json;
use vocabulary::State;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Result<T, E = BoxError> = std::result::Result<T, E>;

const INTENT: &str = "pi_bench";
/// A raw row: about the size of an intent's canonical payload.
const RAW_PAYLOAD: &str = r#"{"amount":1,"payment_intent":"pi_bench","twice_intent":"bench-0000"}"#;
/// The longest one drain may take; far above what a batch needs even under Callgrind, so a
/// stuck run fails instead of hanging.
const DRAIN_MS_MAX: u64 = 120_000;

const USAGE: &str =
    "usage: count_intents intents URL DIR N BATCH full|normal | count_intents raw DIR N full|normal";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let done = match args.as_slice() {
        ["intents", url, dir, n, batch, sync] => parse(n, batch, sync)
            .and_then(|(n, batch, durability)| intents(url, Path::new(dir), n, batch, durability)),
        ["raw", dir, n, sync] => {
            parse(n, "1", sync).and_then(|(n, _, durability)| raw(Path::new(dir), n, durability))
        }
        _ => Err(USAGE.into()),
    };
    if let Err(e) = done {
        eprintln!("count_intents: {e}");
        std::process::exit(1);
    }
}

fn parse(n: &str, batch: &str, sync: &str) -> Result<(usize, usize, Durability)> {
    let n = n.parse().map_err(|e| format!("N must be a count: {e}"))?;
    let batch: usize = batch.parse().map_err(|e| format!("BATCH must be a count: {e}"))?;
    let durability = match sync {
        "full" => Durability::Full,
        "normal" => Durability::Normal,
        other => return Err(format!("no durability called {other:?}; {USAGE}").into()),
    };
    if batch == 0 {
        return Err("BATCH must be at least 1".into());
    }
    Ok((n, batch, durability))
}

fn intents(url: &str, dir: &Path, n: usize, batch: usize, durability: Durability) -> Result<()> {
    std::fs::create_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let executor = Executor::open(
            payments_config::config(url, "count"),
            &dir.join("state"),
            durability,
            World::real(),
        )?;
        let mut next = 0;
        while next < n {
            let end = (next + batch).min(n);
            let proposals = (next..end)
                .map(|i| Proposal {
                    id: format!("count-{i:05}"),
                    action: "payments.refund".into(),
                    params: json!({"payment_intent": INTENT, "amount": 1}),
                    replaces: None,
                    after: Vec::new(),
                    on_event: None,
                })
                .collect();
            for recorded in executor.propose_batch(proposals) {
                let intent = recorded?;
                if intent.state != State::Recorded {
                    return Err(format!("intent {} was recorded as {}", intent.id, intent.state).into());
                }
            }
            executor.drain(DRAIN_MS_MAX).await?;
            next = end;
        }
        let intents = executor.status(None)?;
        let confirmed = intents.iter().filter(|i| i.state == State::Confirmed && i.attempts == 1).count();
        if intents.len() != n || confirmed != n {
            return Err(format!(
                "{n} intents proposed, {} in the log, {confirmed} confirmed after one attempt",
                intents.len()
            )
            .into());
        }
        println!("{n} intents confirmed");
        Ok(())
    })
}

fn raw(dir: &Path, n: usize, durability: Durability) -> Result<()> {
    std::fs::create_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let conn = Connection::open(dir.join("raw.sqlite"))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    let sync = if durability == Durability::Full { "FULL" } else { "NORMAL" };
    conn.pragma_update(None, "synchronous", sync)?;
    conn.execute_batch("CREATE TABLE rows (id INTEGER PRIMARY KEY, payload TEXT NOT NULL);")?;
    let mut insert = conn.prepare("INSERT INTO rows (payload) VALUES (?1)")?;
    for _ in 0..n {
        // Outside an explicit transaction, every statement is a transaction of its own.
        insert.execute([RAW_PAYLOAD])?;
    }
    println!("{n} rows committed");
    Ok(())
}
