//! Requests per second that the fakes serve over loopback HTTP, next to bare hyper and next to
//! a stateful refund stub built with `wiremock`.
//!
//! These servers run in this process, on one tokio runtime with [`WORKERS`] worker threads
//! that the client shares:
//!
//! - bare hyper answering a fixed small JSON body (the same connection setup as
//!   `fake_services::server`), the ceiling for any fake on this transport;
//! - the payments fake, creating a refund per request (`POST /v1/refunds`, a fresh
//!   `Idempotency-Key` each time);
//! - the same with [`RULES`] fault rules armed that never match, the cost of rule matching;
//! - the files fake, storing an object per request (S3 `PUT /bench/{key}`, a distinct key
//!   each time, a [`FILE_BYTES`]-byte body with the `x-amz-checksum-crc32` and hex
//!   `x-amz-content-sha256` that boto3 sends over plain HTTP, all of which the fake checks).
//!
//! These each run on a thread of their own with a current-thread tokio runtime, which is how
//! `wiremock` serves:
//!
//! - the payments fake again (`fake_services::Server` started inside that runtime), the
//!   payments figure with the same serving threads as the stub;
//! - a refund stub on a `wiremock::MockServer` as a user would write one ([`refund_stub`]):
//!   one `Mock` for `POST /v1/refunds` whose responder keeps the state the fake keeps for this
//!   workload (Bearer check, form decoding, idempotency keys with replay, refunds with
//!   generated ids, the amount left on the payment intent) behind a mutex, and answers a
//!   refund object with the same fields as the fake's. Twice: as `MockServer::start()` gives
//!   it (every request recorded), and with request recording disabled.
//!
//! - the chain fake (after the interleaved windows, on its own), taking one pre-signed EIP-1559
//!   transfer per `eth_sendRawTransaction`: decoding, sender recovery, nonce and balance
//!   checks, pooling and instant mining, with a ledger effect per transaction.
//!
//! A client opens [`CONNECTIONS`] keep-alive connections to each and sends requests one after
//! another on each connection. After a warm-up, it measures [`ROUNDS`] windows of [`WINDOW`]
//! per server, interleaved (bare, fake, fake with rules, ..., stub, bare, ...) so that drift
//! on the machine hits all of them alike. Every window starts from a reset fake (or stub), so
//! state does not pile up across windows.
//!
//! Output: readable lines, then one `BENCH {json}` line per figure, which `cargo xtask bench`
//! collects into `docs/benchmarks.md` (the record format is described in `xtask/src/main.rs`).
//! Run it alone with `cargo bench -p fake-services --bench throughput`.
//!
//! For profiling and quick A/B runs, `THROUGHPUT_ONLY=bare,fake,rules,files` (any of these)
//! measures only those servers, for `THROUGHPUT_SECONDS` (default 3) per window, prints the
//! `bare / fake` ratios when both are there, and no `BENCH` records. `THROUGHPUT_ONLY=inproc`
//! times the payments fake's refund create without a transport (`Fake::handle` called in a
//! loop), the fake's own cost per request.

mod chain_bench;
mod refund_stub;
mod servers;
mod target;
mod workload;

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use bench_support::summary;
use bytes::Bytes;

use fake_services::Fake;
use refund_stub::{Stub, WIREMOCK_VERSION};
use servers::{BareServer, OneThreadFake, start_fake, start_files};
use target::Target;
use workload::{BARE_BODY, FORM, INTENT, INTENT_AMOUNT, SEED};

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Result<T, E = BoxError> = std::result::Result<T, E>;

/// The name of this benchmark in `BENCH` records.
const BENCH: &str = "fake-services/throughput";
const WORKERS: usize = 2;
const CONNECTIONS: usize = 8;
const WARMUP: Duration = Duration::from_secs(1);
const WINDOW: Duration = Duration::from_secs(2);
const ROUNDS: usize = 11;
/// Non-matching rules armed on the second fake.
const RULES: usize = 100;
/// The fakes should serve within this factor of bare hyper's rate.
const TARGET_RATIO: f64 = 1.5;

const BARE: &str = "bare hyper, fixed JSON body";
const FAKE: &str = "payments fake, create refund, no rules";
const FAKE_RULES: &str = "payments fake, create refund, 100 non-matching rules";
const FILES_PUT: &str = "files fake, S3 PUT object";
const FAKE_ONE_THREAD: &str = "payments fake, create refund, one current-thread runtime";
const STUB: &str = "wiremock stub, create refund, request recording on (default)";
const STUB_QUIET: &str = "wiremock stub, create refund, request recording off";

/// The bucket the files target writes to, and the size of each object.
const FILE_BUCKET: &str = "bench";
const FILE_BYTES: usize = 1024;

fn main() -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(WORKERS).enable_all().build()?;
    runtime.block_on(run())
}

async fn run() -> Result<()> {
    if let Ok(only) = std::env::var("THROUGHPUT_ONLY") {
        return run_only(&only).await;
    }
    let bare = BareServer::start().await?;
    let plain = start_fake().await?;
    let ruled = start_fake().await?;
    let files = start_files().await?;
    let lone = OneThreadFake::start().await?;
    // `MockServer::start()` is what wiremock's documentation shows: request recording on.
    let stub = Stub::start(true).await?;
    let quiet = Stub::start(false).await?;
    let (stub_addr, quiet_addr) = (*stub.server.address(), *quiet.server.address());

    let mut targets = vec![
        Target::connect(BARE, bare.addr, None).await?,
        Target::connect(FAKE, plain.0.addr(), Some((plain.1.clone(), 0))).await?,
        Target::connect(FAKE_RULES, ruled.0.addr(), Some((ruled.1.clone(), RULES))).await?,
        Target::connect(FILES_PUT, files.0.addr(), Some((files.1.clone(), 0))).await?,
        Target::connect(FAKE_ONE_THREAD, lone.addr, Some((lone.fake.clone(), 0))).await?,
        Target::connect(STUB, stub_addr, None).await?.with_stub(stub),
        Target::connect(STUB_QUIET, quiet_addr, None).await?.with_stub(quiet),
    ];
    let keys = Arc::new(AtomicU64::new(0));
    let (fake_answer, stub_answer) = compare_answers(&mut targets, &keys).await?;

    println!(
        "{BENCH}: {CONNECTIONS} keep-alive loopback connections per server, {WORKERS} tokio workers, \
         {} s warm-up, {ROUNDS} interleaved windows of {} s",
        WARMUP.as_secs(),
        WINDOW.as_secs()
    );
    for target in &mut targets {
        target.window(WARMUP, &keys).await?;
    }
    for round in 1..=ROUNDS {
        for target in &mut targets {
            let (answered, rate) = target.window(WINDOW, &keys).await?;
            target.rates.push(rate);
            target.answered.push(answered);
            println!("  window {round}/{ROUNDS}  {:<62} {:>9.0} req/s", target.name, rate);
        }
    }

    let mut records = Vec::new();
    println!();
    for target in &targets {
        let (median, spread) = summary(&target.rates);
        println!("{:<64} median {median:>9.0} req/s, spread {spread:.1} %", target.name);
        let (fewest, most) =
            (target.answered.iter().min().unwrap_or(&0), target.answered.iter().max().unwrap_or(&0));
        let notes = match target.name {
            BARE => format!(
                "Ceiling for the fakes: the same transport answering a fixed {}-byte body. Every figure: \
                 {CONNECTIONS} keep-alive loopback connections, client and servers in one process on a \
                 {WORKERS}-worker tokio runtime, median of {ROUNDS} interleaved {} s windows after a \
                 {} s warm-up; spread is (max - min) / median.",
                BARE_BODY.len(),
                WINDOW.as_secs(),
                WARMUP.as_secs()
            ),
            FAKE => format!(
                "POST /v1/refunds (form body, Bearer key, a fresh Idempotency-Key each). Each window starts \
                 from a reset fake and ends with {} to {} refunds in its state; every answer is checked to \
                 be a 200 and every refund to be in the ledger.",
                target.answered.iter().min().unwrap_or(&0),
                target.answered.iter().max().unwrap_or(&0)
            ),
            FILES_PUT => format!(
                "S3 PutObject over the same transport: PUT /{FILE_BUCKET}/{{key}} with a distinct key per request, a \
                 {FILE_BYTES}-byte body, x-amz-checksum-crc32 and a hex x-amz-content-sha256 as boto3 sends over \
                 plain HTTP (the fake checks both and computes the MD5 ETag). Each window starts from a reset \
                 fake and ends with {} to {} objects stored; every answer is checked to be a 200 and every PUT \
                 to be an object.put in the ledger.",
                target.answered.iter().min().unwrap_or(&0),
                target.answered.iter().max().unwrap_or(&0)
            ),
            FAKE_ONE_THREAD => format!(
                "The payments fake's refund create as above, but served by a current-thread tokio runtime \
                 on a thread of its own (fake_services::Server started inside it), the threads wiremock \
                 serves with; the client stays on the {WORKERS}-worker runtime. {fewest} to {most} refunds \
                 per window, every answer a 200 and every refund in the ledger."
            ),
            STUB => format!(
                "The same requests to a refund stub on wiremock {WIREMOCK_VERSION}: MockServer::start() (request \
                 recording on, as wiremock's documentation shows it), one Mock for POST /v1/refunds whose \
                 Respond impl keeps, behind a mutex, what the fake keeps for this workload: the Bearer check \
                 (401 in Stripe's error envelope otherwise), the form decoded with form_urlencoded, \
                 idempotency keys with their stored answers (a replay returns it), refunds with a seeded \
                 re_ id, and the amount left on the payment intent; it keeps no request journal, ledger of \
                 effects or fault plan, which the fake does. It answers {} bytes of refund JSON with the \
                 same fields and headers as the fake's {} bytes; before measuring, both are checked to \
                 answer a create, its replay, a create without a key (401) and one for more than remains \
                 (400) alike. \
                 wiremock serves each MockServer from a current-thread tokio runtime on a thread of its \
                 own (hyper-util's HTTP/1-or-2 connection builder, no TCP_NODELAY), takes a write lock on \
                 its state per request, and clones every request into the matched Mock's own list as well \
                 as into the server's recording. Each window starts from a reset server (mock mounted \
                 again, fresh state) and ends with {fewest} to {most} refunds in the stub's state; every \
                 answer is checked to be a 200, and the stub to hold one refund and one recorded request \
                 per answer.",
                stub_answer.len(),
                fake_answer.len()
            ),
            STUB_QUIET => format!(
                "As above, with MockServer::builder().disable_request_recording(); the matched Mock still \
                 keeps every request. {fewest} to {most} refunds per window, every answer a 200, one refund \
                 per answer and no recording."
            ),
            _ => format!("As above, with {RULES} armed drop_after_commit rules whose paths never match."),
        };
        records.push(record(target.name, median, "req/s", spread, &notes));
    }
    let bare_rates = &targets[0].rates;
    for (target, label) in [(&targets[1], "no rules"), (&targets[2], "100 non-matching rules")] {
        // Windows are interleaved, so each round gives a paired ratio.
        let ratios: Vec<f64> = bare_rates.iter().zip(&target.rates).map(|(bare, fake)| bare / fake).collect();
        let (median, spread) = summary(&ratios);
        let met = if median <= TARGET_RATIO { "met" } else { "NOT met" };
        println!(
            "bare / fake, {label:<44} median {median:>9.2}x, spread {spread:.1} %  \
             (target: within {TARGET_RATIO}x of bare hyper: {met})"
        );
        let notes = format!(
            "Bare hyper's rate over the fake's, median of the {ROUNDS} per-window ratios. \
             Target: within {TARGET_RATIO}x of bare hyper; {met}."
        );
        records.push(record(&format!("bare / fake, {label}"), median, "x", spread, &notes));
    }
    records.extend(stub_ratios(&targets)?);
    // The chain fake is measured on its own, after the interleaved windows above.
    records.extend(chain_bench::measure().await?);
    println!();
    for r in &records {
        println!("BENCH {r}");
    }

    drop(targets);
    plain.0.stop().await;
    ruled.0.stop().await;
    files.0.stop().await;
    lone.stop().await?;
    bare.task.abort();
    Ok(())
}

/// The servers `only` names (see the module documentation), with no stub, chain or records.
async fn run_only(only: &str) -> Result<()> {
    let seconds: u64 = std::env::var("THROUGHPUT_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(3);
    let window = Duration::from_secs(seconds);
    if only == "inproc" {
        return in_process(window).await;
    }
    let bare = BareServer::start().await?;
    let plain = start_fake().await?;
    let ruled = start_fake().await?;
    let files = start_files().await?;
    let mut targets = Vec::new();
    for name in only.split(',') {
        targets.push(match name.trim() {
            "bare" => Target::connect(BARE, bare.addr, None).await?,
            "fake" => Target::connect(FAKE, plain.0.addr(), Some((plain.1.clone(), 0))).await?,
            "rules" => Target::connect(FAKE_RULES, ruled.0.addr(), Some((ruled.1.clone(), RULES))).await?,
            "files" => Target::connect(FILES_PUT, files.0.addr(), Some((files.1.clone(), 0))).await?,
            other => {
                return Err(
                    format!("THROUGHPUT_ONLY: no server \"{other}\" (bare, fake, rules, files)").into()
                );
            }
        });
    }
    let keys = Arc::new(AtomicU64::new(0));
    for target in &mut targets {
        target.window(WARMUP, &keys).await?;
    }
    for round in 1..=ROUNDS {
        for target in &mut targets {
            let (_, rate) = target.window(window, &keys).await?;
            target.rates.push(rate);
            println!("  window {round}/{ROUNDS}  {:<62} {:>9.0} req/s", target.name, rate);
        }
    }
    for target in &targets {
        let (median, spread) = summary(&target.rates);
        println!("{:<64} median {median:>9.0} req/s, spread {spread:.1} %", target.name);
    }
    if let Some(bare) = targets.iter().find(|t| t.name == BARE) {
        for target in targets.iter().filter(|t| t.name == FAKE || t.name == FAKE_RULES) {
            let ratios: Vec<f64> = bare.rates.iter().zip(&target.rates).map(|(b, f)| b / f).collect();
            let (median, spread) = summary(&ratios);
            println!("bare / {:<57} median {median:>9.2}x, spread {spread:.1} %", target.name);
        }
    }
    drop(targets);
    plain.0.stop().await;
    ruled.0.stop().await;
    files.0.stop().await;
    bare.task.abort();
    Ok(())
}

/// The payments fake's own time per refund create, called in process (see the module
/// documentation), over [`ROUNDS`] windows of `window`.
async fn in_process(window: Duration) -> Result<()> {
    use fake_services::FakeRequest;
    let (server, fake) = start_fake().await?;
    let Fake::Payments(payments) = &fake else { return Err("start_fake starts payments".into()) };
    for round in 1..=ROUNDS {
        fake.reset();
        payments.seed_payment_intent(Some(INTENT), INTENT_AMOUNT, "usd")?;
        let start = std::time::Instant::now();
        let mut n: u64 = 0;
        while start.elapsed() < window {
            for _ in 0..1000 {
                n += 1;
                let request = FakeRequest::new("POST", "/v1/refunds")
                    .header("authorization", "Bearer sk_test_x")
                    .header("content-type", "application/x-www-form-urlencoded")
                    .header("idempotency-key", &format!("bench-{n}"))
                    .body(Bytes::from_static(FORM));
                if fake.handle(request).await.response().map(|r| r.status) != Some(200) {
                    return Err("a refund create was not answered 200".into());
                }
            }
        }
        let per_request_ns = start.elapsed().as_nanos() as f64 / n as f64;
        println!("  window {round}/{ROUNDS}  in process: {n} refunds, {per_request_ns:.0} ns per request");
    }
    server.stop().await;
    Ok(())
}

/// Probes the payments fake and the stub alike (see [`Target::probe`]) and checks that their
/// refund answers carry the same headers and the same JSON fields, so that the stub does the
/// same work on the wire. Returns both refund bodies, whose sizes the notes give.
async fn compare_answers(targets: &mut [Target], keys: &Arc<AtomicU64>) -> Result<(Bytes, Bytes)> {
    let mut answers = Vec::new();
    for name in [FAKE, STUB] {
        let target =
            targets.iter_mut().find(|t| t.name == name).ok_or_else(|| format!("no target {name}"))?;
        answers.push(target.probe(keys).await?);
    }
    let [(fake_headers, fake_body), (stub_headers, stub_body)] =
        <[_; 2]>::try_from(answers).map_err(|_| "two answers expected")?;
    let fields = |body: &Bytes| -> Result<Vec<String>> {
        let value: serde_json::Value = serde_json::from_slice(body)?;
        let object = value.as_object().ok_or("a refund answer is a JSON object")?;
        Ok(object.keys().cloned().collect())
    };
    if fake_headers != stub_headers {
        return Err(format!("the stub answers headers {stub_headers:?}, the fake {fake_headers:?}").into());
    }
    if fields(&fake_body)? != fields(&stub_body)? {
        return Err(format!(
            "the stub's refund {} has other fields than the fake's {}",
            String::from_utf8_lossy(&stub_body),
            String::from_utf8_lossy(&fake_body)
        )
        .into());
    }
    println!(
        "refund answer: payments fake {} bytes, wiremock stub {} bytes, same headers ({}) and fields",
        fake_body.len(),
        stub_body.len(),
        fake_headers.join(", ")
    );
    Ok((fake_body, stub_body))
}

/// The payments fake and bare hyper over the wiremock stub, each a median of per-window ratios.
fn stub_ratios(targets: &[Target]) -> Result<Vec<serde_json::Value>> {
    let rates = |name: &str| -> Result<&[f64]> {
        let target = targets.iter().find(|t| t.name == name).ok_or_else(|| format!("no target {name}"))?;
        Ok(&target.rates)
    };
    let mut records = Vec::new();
    for (stub, recording) in [(STUB, "recording on"), (STUB_QUIET, "recording off")] {
        for (over, label, what) in [
            (FAKE, "payments fake", "The payments fake's rate (2-worker runtime shared with the client)"),
            (
                FAKE_ONE_THREAD,
                "payments fake on one thread",
                "The payments fake's rate when served from one current-thread runtime as wiremock is",
            ),
            (BARE, "bare", "Bare hyper's rate (2-worker runtime shared with the client)"),
        ] {
            // Windows are interleaved, so each round gives a paired ratio.
            let ratios: Vec<f64> = rates(over)?.iter().zip(rates(stub)?).map(|(a, b)| a / b).collect();
            let (median, spread) = summary(&ratios);
            let name = format!("{label} / wiremock stub, {recording}");
            println!("{name:<64} median {median:>9.2}x, spread {spread:.1} %");
            let notes = format!(
                "{what} over the wiremock stub's ({recording}): it serves {median:.2} times the stub's rate. \
                 Median of the {ROUNDS} per-window ratios."
            );
            records.push(record(&name, median, "x", spread, &notes));
        }
    }
    Ok(records)
}

/// A figure of this benchmark, every one with a spread.
fn record(name: &str, value: f64, unit: &str, spread_pct: f64, notes: &str) -> serde_json::Value {
    bench_support::record(BENCH, name, value, unit, Some(spread_pct), notes)
}
