//! Running one Python client script against a fake over loopback HTTP.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use fake_services::{Fake, Fakes, Server};
use serde_json::Value;
use tokio::process::Command;
use vocabulary::Effect;
use vocabulary::FaultRule;
use vocabulary::JournalEntry;
use vocabulary::TokioClock;

/// A script that has not finished by then is killed and the test fails.
pub const SCRIPT_WAIT: Duration = Duration::from_secs(60);

/// Seed of every fake these tests start.
pub const SEED: u64 = 7;

/// What one script run left behind.
pub struct Run {
    /// The script's JSON line: what the client observed.
    pub seen: Value,
    /// The payments fake's ledger after the run.
    pub ledger: Vec<Effect>,
    /// The payments fake's journal after the run.
    pub journal: Vec<JournalEntry>,
    /// The fakes, for anything else a test wants to look at.
    pub fakes: Fakes,
}

impl Run {
    /// The journal entries of one method and path, oldest first.
    pub fn requests(&self, method: &str, path: &str) -> Vec<&JournalEntry> {
        self.journal.iter().filter(|e| e.method == method && e.path == path).collect()
    }
}

/// Starts a payments fake with `pi_1` (5000 usd) to refund and `rules` armed, runs
/// `tests/python/{script}` against it with `args` (see [`run_script`]), and returns the
/// script's JSON line with the fake's ledger and journal.
pub async fn run_payments(script: &str, args: &[&str], rules: Vec<FaultRule>) -> Run {
    let fakes = Fakes::new(Arc::new(TokioClock::from_wall_clock()), SEED);
    fakes.payments.seed_payment_intent(Some("pi_1"), 5000, "usd").unwrap();
    let fake = Fake::Payments(fakes.payments.clone());
    for rule in rules {
        fake.add_rule(rule).unwrap();
    }
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let seen = run_script(script, &fake, &args).await;
    Run { seen, ledger: fake.ledger(), journal: fake.journal(), fakes }
}

/// Serves `fake` on an ephemeral loopback port, runs `tests/python/{script} URL args...` with
/// the interpreter in `TWICE_PYTHON`, stops the server, and returns the one JSON line the
/// script printed: what the client observed.
///
/// The script runs without proxies from the environment, without writing `__pycache__` into
/// the source tree, and without this machine's AWS profile, credentials or region.
///
/// Panics (failing the test) when `TWICE_PYTHON` is unset, when the script does not finish
/// within [`SCRIPT_WAIT`], exits nonzero, or does not print exactly one JSON line.
pub async fn run_script(script: &str, fake: &Fake, args: &[String]) -> Value {
    let python = std::env::var_os("TWICE_PYTHON").unwrap_or_else(|| {
        panic!(
            "TWICE_PYTHON is not set: these tests drive the real Python SDKs and need the \
             interpreter of the venv built from tests/requirements.txt. Run them with \
             `cargo xtask test`, which builds target/twice-venv and sets TWICE_PYTHON, or set \
             TWICE_PYTHON to a Python that has those packages."
        )
    });
    let script_path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("python").join(script);
    assert!(script_path.is_file(), "no script at {}", script_path.display());
    let server = Server::start(fake.clone(), "127.0.0.1:0".parse().unwrap()).await.unwrap();

    let child = Command::new(&python)
        .arg(&script_path)
        .arg(server.url())
        .args(args)
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("no_proxy", "127.0.0.1,localhost")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("AWS_CONFIG_FILE", "/dev/null")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
        .env_remove("AWS_PROFILE")
        .env_remove("AWS_DEFAULT_REGION")
        .env_remove("AWS_ENDPOINT_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start TWICE_PYTHON={}: {e}", python.to_string_lossy()));
    let command =
        format!("{} {} {} {}", python.to_string_lossy(), script_path.display(), server.url(), args.join(" "));
    // On timeout the future owning the child is dropped, which kills it (`kill_on_drop`).
    let output = match tokio::time::timeout(SCRIPT_WAIT, child.wait_with_output()).await {
        Ok(output) => output.unwrap(),
        Err(_) => panic!(
            "`{command}` did not finish within {SCRIPT_WAIT:?} and was killed; journal: {:#?}",
            fake.journal()
        ),
    };
    server.stop().await;

    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "`{command}` failed ({}):\nstdout: {stdout}\nstderr: {stderr}",
        output.status
    );
    let lines: Vec<&str> = stdout.lines().filter(|l| !l.trim().is_empty()).collect();
    let [line] = lines.as_slice() else {
        panic!("`{command}` must print one JSON line, printed {}:\n{stdout}\nstderr: {stderr}", lines.len())
    };
    serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("`{command}` printed a line that is not JSON ({e}): {line}"))
}
