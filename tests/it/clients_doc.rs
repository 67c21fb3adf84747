//! `docs/clients.md`'s snippets, run as written. Each Python and JavaScript block there is
//! titled (` ```python title=stripe-python `) and is a whole program that reads `urls.json`,
//! points a real SDK at one fake and makes one call that changes it. A test per snippet starts
//! `twice serve --urls-file urls.json` (with `--strict-keys` for the strict ones) in a
//! directory of its own, writes the snippet there unchanged, runs it (Python: the interpreter
//! in `TWICE_PYTHON`; Node: `node`, with the TypeScript executor's `node_modules` linked in so
//! that its ESM imports resolve), bounded, and checks on the fake's ledger and journal that the
//! call landed and that the snippet printed what it made. One more test keeps the doc's
//! snippets and [`SNIPPETS`] equal, so that no block goes unrun.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use executor::world::{HttpRequest, HttpTransport, Transport};
use serde_json::Value;
use tokio::process::{Child, Command};

use crate::process::bin;
use crate::python::SCRIPT_WAIT;

/// The page under test; `include_str!` rebuilds the tests when it changes.
const DOC: &str = include_str!("../../docs/clients.md");
/// Its path, for messages.
const DOC_PATH: &str = "docs/clients.md";
/// The longest serve may take to write its URLs file (it is ready in well under a second).
const READY_WAIT: Duration = Duration::from_secs(30);
/// The longest serve may take to exit after SIGTERM.
const EXIT_WAIT: Duration = Duration::from_secs(10);
/// How often the URLs file is looked for.
const POLL: Duration = Duration::from_millis(20);
/// The bound on one control request (ledger, journal).
const ANSWER_MS: u64 = 10_000;
/// How much of serve's log a failure shows.
const LOG_TAIL_BYTES: usize = 4000;
/// The Node SDKs the JavaScript snippets import, installed by `cargo xtask test`.
const NODE_PACKAGES: [&str; 4] = ["stripe", "@aws-sdk/client-s3", "viem", "resend"];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lang {
    Python,
    Js,
}

impl Lang {
    /// The info string's first word in the doc.
    fn word(self) -> &'static str {
        match self {
            Lang::Python => "python",
            Lang::Js => "js",
        }
    }
}

/// Every snippet the doc must have, and no other: its id, its language, the fake it calls,
/// and whether serve runs with `--strict-keys`. The eight SDKs of `twice serve --help`'s
/// table (`serve/src/clients.rs`), the two strict-key ones, and plain HTTP for the
/// fake without an SDK.
const SNIPPETS: [(&str, Lang, &str, bool); 12] = [
    ("stripe-python", Lang::Python, "payments", false),
    ("stripe-node", Lang::Js, "payments", false),
    ("boto3", Lang::Python, "files", false),
    ("aws-sdk-s3", Lang::Js, "files", false),
    ("web3-py", Lang::Python, "chain", false),
    ("viem", Lang::Js, "chain", false),
    ("resend-python", Lang::Python, "messages", false),
    ("resend-node", Lang::Js, "messages", false),
    ("stripe-python-strict", Lang::Python, "payments", true),
    ("stripe-node-strict", Lang::Js, "payments", true),
    ("workspaces-python", Lang::Python, "workspaces", false),
    ("workspaces-node", Lang::Js, "workspaces", false),
];

// ---------------------------------------------------------------------------------------------
// The doc's code blocks.

/// One fenced block of the doc.
struct Block {
    /// The info string's first word (`python`, `js`, `json`, ...).
    lang: String,
    /// `title=ID`'s ID, if the info string has one.
    title: Option<String>,
    /// The lines between the fences, as written (with a final newline).
    code: String,
    /// The opening fence's line number, from 1.
    line: usize,
}

/// Every fenced block of the doc, indented ones (in list items) included.
fn blocks() -> Vec<Block> {
    let mut found = Vec::new();
    let mut lines = DOC.lines().enumerate();
    while let Some((at, line)) = lines.next() {
        let Some(info) = line.trim_start().strip_prefix("```") else { continue };
        let mut words = info.split_whitespace();
        let lang = words.next().unwrap_or_default().to_string();
        let title = words.find_map(|w| w.strip_prefix("title=")).map(str::to_string);
        let mut code = String::new();
        let mut closed = false;
        for (_, body) in lines.by_ref() {
            if body.trim_start().starts_with("```") {
                closed = true;
                break;
            }
            code.push_str(body);
            code.push('\n');
        }
        assert!(closed, "{DOC_PATH}:{}: the block is never closed", at + 1);
        found.push(Block { lang, title, code, line: at + 1 });
    }
    found
}

/// The block titled `id`, which must be there once.
fn snippet(id: &str) -> Block {
    let mut titled: Vec<Block> = blocks().into_iter().filter(|b| b.title.as_deref() == Some(id)).collect();
    assert_eq!(titled.len(), 1, "{DOC_PATH} must have one block titled `title={id}`, has {}", titled.len());
    titled.remove(0)
}

#[test]
fn the_doc_has_one_snippet_per_sdk_and_every_python_and_js_block_is_one() {
    let blocks = blocks();
    let untitled: Vec<usize> = blocks
        .iter()
        .filter(|b| matches!(b.lang.as_str(), "python" | "py" | "js" | "javascript" | "mjs" | "ts"))
        .filter(|b| b.title.is_none())
        .map(|b| b.line)
        .collect();
    assert!(
        untitled.is_empty(),
        "{DOC_PATH}: the code blocks at lines {untitled:?} have no `title=ID`, so no test runs them: \
         give each an id and add it to SNIPPETS in tests/it/clients_doc.rs (or make it a `text` block)"
    );
    let titled: Vec<(&str, &str, usize)> =
        blocks.iter().filter_map(|b| b.title.as_deref().map(|id| (id, b.lang.as_str(), b.line))).collect();
    for (id, lang, _, _) in SNIPPETS {
        let found: Vec<_> = titled.iter().filter(|(t, _, _)| *t == id).collect();
        let [(_, found_lang, line)] = found.as_slice() else {
            panic!("{DOC_PATH} must have exactly one block titled `title={id}`, has {}", found.len())
        };
        assert_eq!(*found_lang, lang.word(), "{DOC_PATH}:{line}: `{id}` must be a `{}` block", lang.word());
    }
    let unknown: Vec<_> = titled.iter().filter(|(id, _, _)| !SNIPPETS.iter().any(|s| s.0 == *id)).collect();
    assert!(
        unknown.is_empty(),
        "{DOC_PATH} has snippets this test does not know (id, language, line): {unknown:?}; add them \
         to SNIPPETS in tests/it/clients_doc.rs with the fake they call"
    );
}

// ---------------------------------------------------------------------------------------------
// Serve.

/// A fresh, empty directory for one snippet, under cargo's per-target temp dir.
fn fresh_dir(id: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("clients-doc").join(id);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    dir
}

/// The tail of a log file, for a failure's message.
fn tail(path: &Path) -> String {
    let text = std::fs::read(path).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_default();
    let mut start = text.len().saturating_sub(LOG_TAIL_BYTES);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    text[start..].to_string()
}

/// `twice serve [--strict-keys] --urls-file urls.json` in `dir`, its output in `dir`'s
/// `serve.stdout` and `serve.stderr`. Stopped with SIGTERM; dropped without a stop (a test
/// that failed), it gets SIGTERM and then, through `kill_on_drop`, SIGKILL.
struct Serve {
    child: Child,
    stderr: PathBuf,
    urls: Value,
    stopped: bool,
}

impl Serve {
    async fn start(dir: &Path, strict_keys: bool) -> Serve {
        let file = |name: &str| {
            std::fs::File::create(dir.join(name)).unwrap_or_else(|e| panic!("cannot create {name}: {e}"))
        };
        let mut command = Command::new(bin("twice"));
        command.arg("serve");
        if strict_keys {
            command.arg("--strict-keys");
        }
        command
            .args(["--urls-file", "urls.json"])
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(file("serve.stdout"))
            .stderr(file("serve.stderr"))
            .kill_on_drop(true);
        let child = command.spawn().unwrap_or_else(|e| panic!("cannot start {command:?}: {e}"));
        let mut serve = Serve { child, stderr: dir.join("serve.stderr"), urls: Value::Null, stopped: false };
        let urls_file = dir.join("urls.json");
        let started = Instant::now();
        loop {
            // Serve writes the file whole and renames it into place: it is never read half.
            if let Ok(text) = std::fs::read_to_string(&urls_file) {
                serve.urls = serde_json::from_str(&text)
                    .unwrap_or_else(|e| panic!("{}: no JSON ({e}): {text}", urls_file.display()));
                return serve;
            }
            if let Ok(Some(status)) = serve.child.try_wait() {
                panic!("twice serve exited with {status} before writing urls.json:\n{}", serve.log());
            }
            assert!(started.elapsed() < READY_WAIT, "no urls.json from twice serve within {READY_WAIT:?}");
            tokio::time::sleep(POLL).await;
        }
    }

    fn url(&self, service: &str) -> String {
        let url = self.urls[service].as_str();
        url.unwrap_or_else(|| panic!("no URL for {service} in urls.json: {:#}", self.urls)).to_string()
    }

    fn log(&self) -> String {
        tail(&self.stderr)
    }

    /// `GET {service's URL}{path}` of the fake's control API, as JSON; bounded.
    async fn get(&self, service: &str, path: &str) -> Value {
        let url = format!("{}{path}", self.url(service));
        let request = HttpRequest {
            method: "GET",
            url: url.clone(),
            headers: vec![],
            body: vec![],
            timeout_ms: ANSWER_MS,
        };
        let answer = HttpTransport.send(request).await.unwrap_or_else(|e| panic!("GET {url}: {e:?}"));
        let text = String::from_utf8_lossy(&answer.body);
        assert_eq!(answer.status, 200, "GET {url}: {text}");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("GET {url}: no JSON ({e}): {text}"))
    }

    fn terminate(&self) {
        if let Some(pid) = self.child.id().and_then(|pid| libc::pid_t::try_from(pid).ok()) {
            // SAFETY: a signal to our own child, which has not been reaped (it has an id).
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
    }

    /// SIGTERM, and a clean exit within [`EXIT_WAIT`].
    async fn stop(mut self) {
        self.terminate();
        let status = tokio::time::timeout(EXIT_WAIT, self.child.wait()).await;
        self.stopped = true;
        let status = status.unwrap_or_else(|_| panic!("twice serve still runs {EXIT_WAIT:?} after SIGTERM"));
        let status = status.unwrap_or_else(|e| panic!("cannot wait for twice serve: {e}"));
        assert!(status.success(), "twice serve exited with {status} after SIGTERM:\n{}", self.log());
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if self.stopped {
            return;
        }
        // A test that failed: give serve its SIGTERM and a moment; `kill_on_drop` ends it.
        self.terminate();
        let started = Instant::now();
        while matches!(self.child.try_wait(), Ok(None)) && started.elapsed() < Duration::from_secs(2) {
            std::thread::sleep(POLL);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Running a snippet.

/// `TWICE_PYTHON`, the venv's interpreter with the Python SDKs.
fn python() -> PathBuf {
    let python = std::env::var_os("TWICE_PYTHON").unwrap_or_else(|| {
        panic!(
            "TWICE_PYTHON is not set: these tests drive the real Python SDKs and need the \
             interpreter of the venv built from tests/requirements.txt. Run them with \
             `cargo xtask test`, which builds target/twice-venv and sets TWICE_PYTHON, or set \
             TWICE_PYTHON to a Python that has those packages."
        )
    });
    PathBuf::from(python)
}

/// The TypeScript executor's `node_modules`, which holds the Node SDKs the snippets import.
fn node_modules() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/executors/typescript/node_modules");
    for package in NODE_PACKAGES {
        assert!(
            dir.join(package).join("package.json").is_file(),
            "{package} is not installed in {}: the JavaScript snippets import the SDKs pinned in \
             examples/executors/typescript/package-lock.json. Run the tests with `cargo xtask test`, \
             which runs `npm ci` there, or run `npm ci` in examples/executors/typescript yourself.",
            dir.display()
        );
    }
    dir.canonicalize().unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
}

/// What one snippet's run left behind.
struct Ran {
    id: &'static str,
    stdout: String,
    /// Serve's URLs file: the URLs and the dev accounts.
    urls: Value,
    /// The effects on the ledger of the fake the snippet calls.
    ledger: Vec<Value>,
    /// The requests in that fake's journal.
    journal: Vec<Value>,
}

impl Ran {
    fn effects(&self, kind: &str) -> Vec<&Value> {
        self.ledger.iter().filter(|e| e["kind"] == kind).collect()
    }

    /// The one effect of `kind` on the ledger.
    fn one(&self, kind: &str) -> &Value {
        let found = self.effects(kind);
        let [effect] = found.as_slice() else {
            panic!(
                "{}: expected one {kind} on the ledger, found {}: {:#?}",
                self.id,
                found.len(),
                self.ledger
            )
        };
        effect
    }

    /// The snippet printed `what` (the id of what it made, say), compared without case.
    fn printed(&self, what: &Value) {
        let what = what.as_str().unwrap_or_else(|| panic!("{}: not a string: {what}", self.id));
        assert!(
            self.stdout.to_lowercase().contains(&what.to_lowercase()),
            "{}: the snippet did not print {what}; it printed:\n{}",
            self.id,
            self.stdout
        );
    }

    /// Dev account `n`'s address, lowercase as the ledger writes addresses.
    fn account(&self, n: usize) -> String {
        let address = self.urls["accounts"][n]["address"].as_str();
        address.unwrap_or_else(|| panic!("no accounts[{n}] in urls.json: {:#}", self.urls)).to_lowercase()
    }
}

/// Runs the snippet `id` against a fresh serve in a directory of its own: the snippet exits 0
/// within [`SCRIPT_WAIT`], and its fake's ledger and journal are read before serve stops.
async fn run(id: &'static str) -> Ran {
    let (_, lang, service, strict_keys) =
        SNIPPETS.into_iter().find(|s| s.0 == id).unwrap_or_else(|| panic!("{id} is not in SNIPPETS"));
    let block = snippet(id);
    let place = format!("{DOC_PATH}:{} (`title={id}`)", block.line);
    let dir = fresh_dir(id);
    // Found before serve starts, so that a missing SDK fails with its fix and nothing to stop.
    let (program, file) = match lang {
        Lang::Python => (python(), "snippet.py"),
        Lang::Js => {
            let modules = node_modules();
            std::os::unix::fs::symlink(&modules, dir.join("node_modules"))
                .unwrap_or_else(|e| panic!("cannot link node_modules into {}: {e}", dir.display()));
            (PathBuf::from("node"), "snippet.mjs")
        }
    };
    std::fs::write(dir.join(file), &block.code).unwrap_or_else(|e| panic!("cannot write {file}: {e}"));
    let serve = Serve::start(&dir, strict_keys).await;

    let started = Instant::now();
    let child = Command::new(&program)
        .arg(file)
        .current_dir(&dir)
        // Loopback, never through a proxy; no AWS profile, credentials, region or endpoint of
        // this machine's, and no Resend settings from the environment.
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("no_proxy", "127.0.0.1,localhost")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("AWS_CONFIG_FILE", "/dev/null")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
        .env_remove("AWS_PROFILE")
        .env_remove("AWS_REGION")
        .env_remove("AWS_DEFAULT_REGION")
        .env_remove("AWS_ENDPOINT_URL")
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .env_remove("AWS_SESSION_TOKEN")
        .env_remove("RESEND_API_KEY")
        .env_remove("RESEND_API_URL")
        .env_remove("RESEND_BASE_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("{place}: cannot start {}: {e}", program.display()));
    let shown = format!("{} {file} (in {})", program.display(), dir.display());
    // On timeout the future owning the child is dropped, which kills it (`kill_on_drop`).
    let output = match tokio::time::timeout(SCRIPT_WAIT, child.wait_with_output()).await {
        Ok(output) => output.unwrap_or_else(|e| panic!("{place}: cannot wait for `{shown}`: {e}")),
        Err(_) => panic!("{place}: `{shown}` did not finish within {SCRIPT_WAIT:?} and was killed"),
    };
    let took = started.elapsed();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{place}: `{shown}` failed ({}) after {took:?}:\nstdout: {stdout}\nstderr: {stderr}\nserve's log:\n{}",
        output.status,
        serve.log()
    );
    eprintln!("{id}: ran in {took:?}: {}", stdout.trim());

    let list = |mut value: Value, field: &str| match value[field].take() {
        Value::Array(items) => items,
        other => panic!("{id}: no {field} array in {service}'s answer: {other}"),
    };
    let ledger = list(serve.get(service, "/__twice/ledger").await, "effects");
    let journal = list(serve.get(service, "/__twice/journal").await, "entries");
    let urls = serve.urls.clone();
    serve.stop().await;
    Ran { id, stdout, urls, ledger, journal }
}

// ---------------------------------------------------------------------------------------------
// What each kind of snippet must have done.

/// A payment intent created and confirmed through the API, and 500 of it refunded.
fn refunded_500_of_a_charged_intent(ran: &Ran) {
    let refund = ran.one("refund.created");
    assert_eq!(refund["params"]["amount"], 500, "{}: {refund:#}", ran.id);
    let intent = &refund["params"]["payment_intent"];
    assert!(
        ran.effects("payment_intent.succeeded").iter().any(|e| e["object_id"] == *intent),
        "{}: the refund's {intent} was not charged through the API: {:#?}",
        ran.id,
        ran.ledger
    );
    ran.printed(&refund["object_id"]);
}

/// Serve with `--strict-keys` refused the made-up key with Stripe's 401, which the SDK raised
/// as `class`; nothing changed.
fn refused_the_made_up_key(ran: &Ran, class: &str) {
    assert!(ran.ledger.is_empty(), "{}: a refused key changed the ledger: {:#?}", ran.id, ran.ledger);
    assert!(
        !ran.journal.is_empty() && ran.journal.iter().all(|e| e["status"] == 401),
        "{}: expected only 401s in the journal: {:#?}",
        ran.id,
        ran.journal
    );
    let expected = format!("{class} 401 Invalid API Key provided: sk_test_");
    assert!(ran.stdout.starts_with(&expected), "{}: expected `{expected}...`, got:\n{}", ran.id, ran.stdout);
}

/// One object put in `reports`, its ETag printed.
fn put_the_summary(ran: &Ran) {
    let put = ran.one("object.put");
    assert_eq!(put["object_id"], "reports/q3/summary.csv", "{}: {put:#}", ran.id);
    ran.printed(&put["params"]["etag"]);
}

/// 1 wei mined from dev account 0 to dev account 1, its hash printed.
fn sent_one_wei(ran: &Ran) {
    let mined = ran.one("tx.mined");
    let params = &mined["params"];
    assert_eq!(
        (params["from"].as_str(), params["to"].as_str(), params["value"].as_str()),
        (Some(ran.account(0).as_str()), Some(ran.account(1).as_str()), Some("1")),
        "{}: {mined:#}",
        ran.id
    );
    ran.printed(&mined["object_id"]);
}

/// One email delivered to ada@example.com's inbox, its id printed.
fn emailed_ada(ran: &Ran) {
    let delivered = ran.one("message.delivered");
    assert_eq!(delivered["params"]["to"], "ada@example.com", "{}: {delivered:#}", ran.id);
    ran.printed(&delivered["object_id"]);
}

/// One workspace created for acct-42 under the snippet's key, its id printed.
fn created_the_workspace(ran: &Ran) {
    let created = ran.one("workspace.created");
    assert_eq!(
        (created["params"]["external_id"].as_str(), created["idempotency_key"].as_str()),
        (Some("acct-42"), Some("create-acct-42")),
        "{}: {created:#}",
        ran.id
    );
    ran.printed(&created["object_id"]);
}

#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[tokio::test]
async fn stripe_python_refunds_500_of_a_payment_it_charged() {
    refunded_500_of_a_charged_intent(&run("stripe-python").await);
}

#[tokio::test]
async fn stripe_node_refunds_500_of_a_payment_it_charged() {
    refunded_500_of_a_charged_intent(&run("stripe-node").await);
}

#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[tokio::test]
async fn stripe_python_raises_authentication_error_for_a_made_up_key_under_strict_keys() {
    refused_the_made_up_key(&run("stripe-python-strict").await, "AuthenticationError");
}

#[tokio::test]
async fn stripe_node_raises_stripe_authentication_error_for_a_made_up_key_under_strict_keys() {
    refused_the_made_up_key(&run("stripe-node-strict").await, "StripeAuthenticationError");
}

#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[tokio::test]
async fn boto3_puts_an_object() {
    put_the_summary(&run("boto3").await);
}

#[tokio::test]
async fn aws_sdk_s3_puts_an_object() {
    put_the_summary(&run("aws-sdk-s3").await);
}

#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[tokio::test]
async fn web3_py_sends_one_wei_from_dev_account_0() {
    sent_one_wei(&run("web3-py").await);
}

#[tokio::test]
async fn viem_sends_one_wei_from_dev_account_0() {
    sent_one_wei(&run("viem").await);
}

#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[tokio::test]
async fn resend_python_sends_an_email() {
    emailed_ada(&run("resend-python").await);
}

#[tokio::test]
async fn resend_node_sends_an_email() {
    emailed_ada(&run("resend-node").await);
}

#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[tokio::test]
async fn python_urllib_creates_a_workspace() {
    created_the_workspace(&run("workspaces-python").await);
}

#[tokio::test]
async fn node_fetch_creates_a_workspace() {
    created_the_workspace(&run("workspaces-node").await);
}
