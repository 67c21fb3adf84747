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

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bench_support::summary;
use bytes::Bytes;
use fake_services::{Fake, Fakes, FaultRule, FaultSpec, Server, TokioClock};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use refund_stub::{Stub, WIREMOCK_VERSION};

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Result<T, E = BoxError> = std::result::Result<T, E>;

/// The name of this benchmark in `BENCH` records.
const BENCH: &str = "fake-services/throughput";
const WORKERS: usize = 2;
const CONNECTIONS: usize = 8;
const WARMUP: Duration = Duration::from_secs(1);
const WINDOW: Duration = Duration::from_secs(3);
const ROUNDS: usize = 5;
/// Non-matching rules armed on the second fake.
const RULES: usize = 100;
/// The fakes should serve within this factor of bare hyper's rate.
const TARGET_RATIO: f64 = 1.5;
const SEED: u64 = 7;

const INTENT: &str = "pi_bench";
/// Enough to refund 1 cent per request for as long as any run lasts.
const INTENT_AMOUNT: u64 = 1 << 60;
const FORM: &[u8] = b"payment_intent=pi_bench&amount=1";
const BARE_BODY: &[u8] =
    br#"{"id":"re_bench","object":"refund","amount":1,"currency":"usd","status":"succeeded"}"#;

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

async fn start_fake() -> Result<(Server, Fake)> {
    let fakes = Fakes::new(Arc::new(TokioClock::from_wall_clock()), SEED);
    let fake = Fake::Payments(fakes.payments);
    let server = Server::start(fake.clone(), "127.0.0.1:0".parse()?).await?;
    Ok((server, fake))
}

async fn start_files() -> Result<(Server, Fake)> {
    let fakes = Fakes::new(Arc::new(TokioClock::from_wall_clock()), SEED);
    let fake = Fake::Files(fakes.files);
    let server = Server::start(fake.clone(), "127.0.0.1:0".parse()?).await?;
    Ok((server, fake))
}

/// What the client sends to a target, one request after another.
#[derive(Clone)]
enum Workload {
    /// Bare hyper and the payments fake: a refund create.
    Refund,
    /// The files fake: a PUT of `body` (with its checksum headers) to a fresh key.
    Put { body: Bytes, crc32: HeaderValue, sha256: HeaderValue },
}

impl Workload {
    fn of(fake: Option<&Fake>) -> Result<Workload> {
        match fake {
            Some(Fake::Files(_)) => {
                use base64::Engine;
                use sha2::Digest;
                let body: Vec<u8> = (0..FILE_BYTES).map(|i| b'a' + (i % 26) as u8).collect();
                let crc32 =
                    base64::engine::general_purpose::STANDARD.encode(crc32fast::hash(&body).to_be_bytes());
                let sha256: String = sha2::Sha256::digest(&body).iter().map(|b| format!("{b:02x}")).collect();
                Ok(Workload::Put {
                    body: Bytes::from(body),
                    crc32: HeaderValue::from_str(&crc32)?,
                    sha256: HeaderValue::from_str(&sha256)?,
                })
            }
            _ => Ok(Workload::Refund),
        }
    }

    fn request(&self, host: &HeaderValue, n: u64) -> Result<Request<Full<Bytes>>> {
        let request = match self {
            Workload::Refund => Request::post("/v1/refunds")
                .header(HOST, host.clone())
                .header(AUTHORIZATION, "Bearer sk_test_x")
                .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
                .header("Idempotency-Key", format!("bench-{n}"))
                .body(Full::new(Bytes::from_static(FORM)))?,
            Workload::Put { body, crc32, sha256 } => Request::put(format!("/{FILE_BUCKET}/objects/{n}.txt"))
                .header(HOST, host.clone())
                .header(CONTENT_TYPE, "text/plain")
                .header("x-amz-checksum-crc32", crc32.clone())
                .header("x-amz-sdk-checksum-algorithm", "CRC32")
                .header("x-amz-content-sha256", sha256.clone())
                .body(Full::new(body.clone()))?,
        };
        Ok(request)
    }
}

/// One server under measurement and the client's connections to it.
struct Target {
    name: &'static str,
    host: HeaderValue,
    /// The fake behind the server and how many non-matching rules to arm; none for bare hyper.
    fake: Option<(Fake, usize)>,
    /// The wiremock stub behind the server, if that is what it is.
    stub: Option<Stub>,
    senders: Vec<SendRequest<Full<Bytes>>>,
    workload: Workload,
    rates: Vec<f64>,
    /// Requests answered in each measured window.
    answered: Vec<u64>,
}

/// [`CONNECTIONS`] keep-alive HTTP/1 client connections to `addr`, each driven by a task of
/// its own.
async fn open_connections(addr: SocketAddr) -> Result<Vec<SendRequest<Full<Bytes>>>> {
    let mut senders = Vec::with_capacity(CONNECTIONS);
    for _ in 0..CONNECTIONS {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        senders.push(sender);
    }
    Ok(senders)
}

impl Target {
    async fn connect(name: &'static str, addr: SocketAddr, fake: Option<(Fake, usize)>) -> Result<Target> {
        let senders = open_connections(addr).await?;
        let host = HeaderValue::from_str(&addr.to_string())?;
        let workload = Workload::of(fake.as_ref().map(|(f, _)| f))?;
        Ok(Target {
            name,
            host,
            fake,
            stub: None,
            senders,
            workload,
            rates: Vec::new(),
            answered: Vec::new(),
        })
    }

    fn with_stub(mut self, stub: Stub) -> Target {
        self.stub = Some(stub);
        self
    }

    /// From a reset state, sends a refund create, its replay, one without a key and one for more
    /// than remains, checking each answer (200, a replay of the same body, 401, 400 on
    /// `amount`). Returns the first answer's header names (sorted, leaving out those that
    /// change with time or length) and its body.
    async fn probe(&mut self, keys: &Arc<AtomicU64>) -> Result<(Vec<String>, Bytes)> {
        self.prepare().await?;
        let key = keys.fetch_add(1, Ordering::Relaxed);
        let first = self.workload.request(&self.host, key)?;
        let (status, headers, body) = self.send(first).await?;
        let replay = self.workload.request(&self.host, key)?;
        let (replay_status, replay_headers, replay_body) = self.send(replay).await?;
        let mut unauthorized = self.workload.request(&self.host, keys.fetch_add(1, Ordering::Relaxed))?;
        unauthorized.headers_mut().remove(AUTHORIZATION);
        let (unauthorized_status, _, unauthorized_body) = self.send(unauthorized).await?;
        let mut too_much = self.workload.request(&self.host, keys.fetch_add(1, Ordering::Relaxed))?;
        *too_much.body_mut() =
            Full::new(Bytes::from(format!("payment_intent={INTENT}&amount={INTENT_AMOUNT}")));
        let (too_much_status, _, too_much_body) = self.send(too_much).await?;
        let error_param = |body: &Bytes| -> Option<String> {
            let value: serde_json::Value = serde_json::from_slice(body).ok()?;
            value.get("error")?.get("param")?.as_str().map(str::to_string)
        };
        let replayed = replay_headers.get("idempotent-replayed").is_some_and(|v| v == "true");
        let checks = [
            (status == StatusCode::OK, "the create is not a 200"),
            (replay_status == StatusCode::OK && replay_body == body && replayed, "the replay differs"),
            (unauthorized_status == StatusCode::UNAUTHORIZED, "a create without a key is not a 401"),
            (
                too_much_status == StatusCode::BAD_REQUEST
                    && error_param(&too_much_body).as_deref() == Some("amount"),
                "a refund of more than remains is not a 400 on amount",
            ),
        ];
        if let Some((_, failed)) = checks.iter().find(|(ok, _)| !ok) {
            return Err(format!(
                "{}: {failed}: {status} {}; {replay_status} {}; {unauthorized_status} {}; {too_much_status} {}",
                self.name,
                String::from_utf8_lossy(&body),
                String::from_utf8_lossy(&replay_body),
                String::from_utf8_lossy(&unauthorized_body),
                String::from_utf8_lossy(&too_much_body)
            )
            .into());
        }
        let mut names: Vec<String> = headers
            .keys()
            .map(|h| h.as_str().to_string())
            .filter(|h| h != "date" && h != "content-length")
            .collect();
        names.sort();
        Ok((names, body))
    }

    /// Sends one request on the first connection; returns the answer.
    async fn send(&mut self, request: Request<Full<Bytes>>) -> Result<(StatusCode, hyper::HeaderMap, Bytes)> {
        let sender = self.senders.first_mut().ok_or("no connection")?;
        sender.ready().await?;
        let response = sender.send_request(request).await?;
        let (parts, body) = response.into_parts();
        Ok((parts.status, parts.headers, body.collect().await?.to_bytes()))
    }

    /// Resets the fake to its starting state: one payment intent (or the files fake's empty
    /// bucket) and the rules, nothing else. A stub starts afresh the same way.
    async fn prepare(&self) -> Result<()> {
        if let Some(stub) = &self.stub {
            return stub.reset().await;
        }
        let Some((fake, rules)) = &self.fake else { return Ok(()) };
        fake.reset();
        match fake {
            Fake::Payments(payments) => {
                payments.seed_payment_intent(Some(INTENT), INTENT_AMOUNT, "usd")?;
            }
            Fake::Files(files) => files.seed_bucket(FILE_BUCKET)?,
            _ => return Err("the bench drives the payments and files fakes".into()),
        }
        for n in 0..*rules {
            fake.add_rule(FaultRule::always(FaultSpec::DropAfterCommit).path(&format!("/v1/never-{n}")))?;
        }
        Ok(())
    }

    /// Drives every connection for `length`; returns the number of answered requests and
    /// their rate.
    async fn window(&mut self, length: Duration, keys: &Arc<AtomicU64>) -> Result<(u64, f64)> {
        self.prepare().await?;
        let start = Instant::now();
        let deadline = start + length;
        let mut tasks = tokio::task::JoinSet::new();
        for sender in self.senders.drain(..) {
            tasks.spawn(drive(sender, self.workload.clone(), self.host.clone(), deadline, Arc::clone(keys)));
        }
        let mut answered = 0;
        while let Some(joined) = tasks.join_next().await {
            let (sender, count) = joined??;
            self.senders.push(sender);
            answered += count;
        }
        let elapsed = start.elapsed();
        if let Some((fake, _)) = &self.fake {
            let effects = fake.ledger().len() as u64;
            if effects != answered {
                return Err(
                    format!("{}: {answered} writes answered but {effects} in the ledger", self.name).into()
                );
            }
        }
        if let Some(stub) = &self.stub {
            stub.check(answered).await.map_err(|e| format!("{}: {e}", self.name))?;
        }
        Ok((answered, answered as f64 / elapsed.as_secs_f64()))
    }
}

/// Sends the workload's writes one after another until `deadline`; returns the connection
/// and the number of requests answered.
async fn drive(
    mut sender: SendRequest<Full<Bytes>>,
    workload: Workload,
    host: HeaderValue,
    deadline: Instant,
    keys: Arc<AtomicU64>,
) -> Result<(SendRequest<Full<Bytes>>, u64)> {
    let mut answered = 0;
    while Instant::now() < deadline {
        let key = keys.fetch_add(1, Ordering::Relaxed);
        let request = workload.request(&host, key)?;
        sender.ready().await?;
        let response = sender.send_request(request).await?;
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        if status != StatusCode::OK {
            return Err(format!("answered {status}: {}", String::from_utf8_lossy(&body)).into());
        }
        answered += 1;
    }
    Ok((sender, answered))
}

/// Bare hyper on the same transport setup as `fake_services::server`, answering a fixed body.
struct BareServer {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl BareServer {
    async fn start() -> Result<BareServer> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            loop {
                match listener.accept().await {
                    Ok((stream, _)) => {
                        tokio::spawn(serve_bare(stream));
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                }
            }
        });
        Ok(BareServer { addr, task })
    }
}

async fn serve_bare(stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let service = service_fn(|request: Request<Incoming>| async move {
        // Read the body as the fake does, so both do the same transport work.
        request.into_body().collect().await?;
        let mut response = Response::new(Full::new(Bytes::from_static(BARE_BODY)));
        response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        Ok::<_, hyper::Error>(response)
    });
    let _ = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_millis(fake_services::server::HEADER_READ_MS_MAX))
        .keep_alive(true)
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

/// `eth_sendRawTransaction` per second on the chain fake, signature recovery included.
///
/// [`CONNECTIONS`] keep-alive connections, each sending one sender's EIP-1559 transfers at
/// consecutive nonces (so every one is pooled and mined at once, blocks being instant).
/// Every transaction is signed before the clock starts: the figure is the fake's decoding,
/// sender recovery, validation, pooling and mining. Each window starts from a reset fake with
/// the senders funded; every answer is checked to be the transaction's hash and every
/// transaction to be in the ledger as `tx.mined`.
mod chain_bench {
    use fake_services::chain::{address_of, sign_transfer};

    use super::*;

    pub const CHAIN_SEND: &str = "chain fake, eth_sendRawTransaction with signature recovery";
    /// Transactions signed per connection: more than a warm-up or a window can send.
    const TXS_PER_CONNECTION: u64 = 6_000;
    const TO: &str = "0x70997970c51812dc3a010c7d01b50e0d17dc79c8";
    const GWEI: u128 = 1_000_000_000;

    /// One sender's transactions, as JSON-RPC request bodies, nonce 0 first.
    type Bodies = Arc<Vec<Bytes>>;

    fn key(i: usize) -> String {
        format!("0x{:064x}", i + 1)
    }

    fn sign_all(i: usize) -> Result<Vec<Bytes>> {
        (0..TXS_PER_CONNECTION)
            .map(|nonce| {
                let (raw, _) = sign_transfer(&key(i), 31337, nonce, TO, 1, 3 * GWEI, GWEI, 21_000)?;
                let raw = alloy_primitives::hex::encode_prefixed(raw);
                let body =
                    json!({"jsonrpc": "2.0", "id": nonce, "method": "eth_sendRawTransaction", "params": [raw]});
                Ok(Bytes::from(body.to_string()))
            })
            .collect()
    }

    pub async fn measure() -> Result<Vec<serde_json::Value>> {
        let fakes = Fakes::new(Arc::new(TokioClock::from_wall_clock()), SEED);
        let fake = Fake::Chain(fakes.chain.clone());
        let server = Server::start(fake.clone(), "127.0.0.1:0".parse()?).await?;
        let addr = server.addr();
        let started = Instant::now();
        let mut signing = tokio::task::JoinSet::new();
        for i in 0..CONNECTIONS {
            signing.spawn_blocking(move || sign_all(i).map(|bodies| (i, Arc::new(bodies))));
        }
        let mut signed = Vec::with_capacity(CONNECTIONS);
        while let Some(joined) = signing.join_next().await {
            signed.push(joined??);
        }
        signed.sort_by_key(|(i, _)| *i);
        let bodies: Vec<Bodies> = signed.into_iter().map(|(_, bodies)| bodies).collect();
        println!(
            "\n{CHAIN_SEND}: {} transfers signed in {:.1} s before measuring",
            CONNECTIONS as u64 * TXS_PER_CONNECTION,
            started.elapsed().as_secs_f64()
        );
        let senders: Vec<String> = (0..CONNECTIONS).map(|i| address_of(&key(i))).collect::<Result<_, _>>()?;
        let mut connections = open_connections(addr).await?;
        let host = HeaderValue::from_str(&addr.to_string())?;

        let mut rates = Vec::new();
        let mut answered = Vec::new();
        for round in 0..=ROUNDS {
            let length = if round == 0 { WARMUP } else { WINDOW };
            fake.reset();
            for sender in &senders {
                fakes.chain.seed_account(sender, 1_000_000 * 1_000_000_000_000_000_000)?;
            }
            let start = Instant::now();
            let deadline = start + length;
            let mut tasks = tokio::task::JoinSet::new();
            for (i, connection) in connections.drain(..).enumerate() {
                tasks.spawn(send_all(connection, host.clone(), Arc::clone(&bodies[i]), deadline));
            }
            let mut count = 0;
            while let Some(joined) = tasks.join_next().await {
                let (connection, sent) = joined??;
                connections.push(connection);
                count += sent;
            }
            let elapsed = start.elapsed();
            let mined = fake.ledger().iter().filter(|e| e.kind == "tx.mined").count() as u64;
            if mined != count {
                return Err(format!("{CHAIN_SEND}: {count} sends answered but {mined} mined").into());
            }
            if round > 0 {
                let rate = count as f64 / elapsed.as_secs_f64();
                println!("  window {round}/{ROUNDS}  {CHAIN_SEND:<60} {rate:>9.0} req/s");
                rates.push(rate);
                answered.push(count);
            }
        }
        server.stop().await;
        let (median, spread) = summary(&rates);
        println!("{CHAIN_SEND:<62} median {median:>9.0} req/s, spread {spread:.1} %");
        let notes = format!(
            "eth_sendRawTransaction of pre-signed EIP-1559 transfers (signing is outside the timed \
             windows), {CONNECTIONS} keep-alive connections with one sender each; per request the \
             fake decodes the EIP-2718 bytes, recovers the sender (k256), validates as geth does, pools \
             and mines it (instant blocks) and records tx.mined. Median of {ROUNDS} {} s windows after a \
             {} s warm-up, measured after the interleaved windows above; {} to {} transactions per \
             window, every answer checked to be the hash and every transaction to be mined.",
            WINDOW.as_secs(),
            WARMUP.as_secs(),
            answered.iter().min().unwrap_or(&0),
            answered.iter().max().unwrap_or(&0)
        );
        Ok(vec![record(CHAIN_SEND, median, "req/s", spread, &notes)])
    }

    /// Sends one sender's transactions in nonce order until `deadline` (or until they run
    /// out); returns the connection and how many were answered with their hash.
    async fn send_all(
        mut connection: SendRequest<Full<Bytes>>,
        host: HeaderValue,
        bodies: Bodies,
        deadline: Instant,
    ) -> Result<(SendRequest<Full<Bytes>>, u64)> {
        let mut answered = 0;
        for body in bodies.iter() {
            if Instant::now() >= deadline {
                break;
            }
            let request = Request::post("/")
                .header(HOST, host.clone())
                .header(CONTENT_TYPE, "application/json")
                .body(Full::new(body.clone()))?;
            connection.ready().await?;
            let response = connection.send_request(request).await?;
            let status = response.status();
            let answer = response.into_body().collect().await?.to_bytes();
            let hash = serde_json::from_slice::<serde_json::Value>(&answer)?
                .get("result")
                .and_then(|r| r.as_str().map(|s| s.len()));
            if status != StatusCode::OK || hash != Some(66) {
                return Err(format!("answered {status}: {}", String::from_utf8_lossy(&answer)).into());
            }
            answered += 1;
        }
        Ok((connection, answered))
    }
}

/// The payments fake served by a current-thread tokio runtime on a std thread of its own, the
/// way wiremock serves a `MockServer`.
struct OneThreadFake {
    addr: SocketAddr,
    fake: Fake,
    stop: tokio::sync::oneshot::Sender<()>,
    thread: std::thread::JoinHandle<Result<()>>,
}

impl OneThreadFake {
    async fn start() -> Result<OneThreadFake> {
        let fakes = Fakes::new(Arc::new(TokioClock::from_wall_clock()), SEED);
        let fake = Fake::Payments(fakes.payments);
        let served = fake.clone();
        let (started, addr) = tokio::sync::oneshot::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread =
            std::thread::Builder::new().name("payments-fake".into()).spawn(move || -> Result<()> {
                let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
                runtime.block_on(async move {
                    // `Server::start` spawns its accept loop and connections on the runtime it is
                    // called from: this one.
                    let server = Server::start(served, "127.0.0.1:0".parse()?).await?;
                    started.send(server.addr()).map_err(|_| "the bench stopped waiting")?;
                    let _ = stopped.await;
                    server.stop().await;
                    Ok(())
                })
            })?;
        match addr.await {
            Ok(addr) => Ok(OneThreadFake { addr, fake, stop, thread }),
            Err(_) => match thread.join() {
                Ok(Err(e)) => Err(format!("the one-thread fake did not start: {e}").into()),
                _ => Err("the one-thread fake did not start".into()),
            },
        }
    }

    async fn stop(self) -> Result<()> {
        let _ = self.stop.send(());
        let thread = self.thread;
        match tokio::task::spawn_blocking(move || thread.join()).await? {
            Ok(served) => served,
            Err(_) => Err("the one-thread fake's thread panicked".into()),
        }
    }
}

/// A stateful refund stub on `wiremock`, written as a user of wiremock would write one: a
/// `Respond` impl holding its state behind a mutex.
mod refund_stub {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};
    use std::time::{SystemTime, UNIX_EPOCH};

    use rand::SeedableRng;
    use rand::distr::{Alphanumeric, SampleString};
    use rand_chacha::ChaCha8Rng;
    use serde_json::json;
    use wiremock::matchers::{method, path};
    use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

    use super::{INTENT, INTENT_AMOUNT, Result, SEED};

    /// The wiremock release the workspace manifest asks for, named in the notes.
    pub const WIREMOCK_VERSION: &str = "0.6";

    /// A payment intent refunds draw on.
    struct Intent {
        charge: String,
        amount: u64,
        currency: String,
    }

    /// A refund as the stub keeps it: every field it answers that is not constant.
    struct Refund {
        id: String,
        amount: u64,
        charge: String,
        payment_intent: String,
        currency: String,
        created: u64,
    }

    impl Refund {
        fn to_json(&self) -> serde_json::Value {
            json!({
                "id": self.id,
                "object": "refund",
                "amount": self.amount,
                "balance_transaction": null,
                "charge": self.charge,
                "created": self.created,
                "currency": self.currency,
                "metadata": {},
                "payment_intent": self.payment_intent,
                "reason": null,
                "receipt_number": null,
                "source_transfer_reversal": null,
                "status": "succeeded",
                "transfer_reversal": null,
            })
        }
    }

    /// An answer kept for its idempotency key, with the form body it answered.
    struct Saved {
        body_sent: Vec<u8>,
        status: u16,
        answer: String,
    }

    /// What the stub remembers: the same objects the payments fake keeps for refund creates.
    struct StubState {
        rng: ChaCha8Rng,
        intents: HashMap<String, Intent>,
        /// In creation order.
        refunds: Vec<Refund>,
        /// Refund id to its index in `refunds`.
        by_id: HashMap<String, usize>,
        /// Amount refunded so far per payment intent.
        refunded: HashMap<String, u64>,
        keys: HashMap<String, Saved>,
    }

    impl StubState {
        fn new() -> StubState {
            let intent = Intent {
                charge: format!("ch_{}", INTENT.trim_start_matches("pi_")),
                amount: INTENT_AMOUNT,
                currency: "usd".into(),
            };
            StubState {
                rng: ChaCha8Rng::seed_from_u64(SEED),
                intents: HashMap::from([(INTENT.to_string(), intent)]),
                refunds: Vec::new(),
                by_id: HashMap::new(),
                refunded: HashMap::new(),
                keys: HashMap::new(),
            }
        }

        fn new_id(&mut self, prefix: &str, len: usize) -> String {
            format!("{prefix}{}", Alphanumeric.sample_string(&mut self.rng, len))
        }

        fn create(&mut self, request: &Request) -> ResponseTemplate {
            let request_id = self.new_id("req_", 14);
            let token = request
                .headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(str::trim);
            if token.is_none_or(str::is_empty) {
                let (status, body) = error(401, "Invalid API Key provided.", None, None);
                return answer(status, body, &request_id, None);
            }
            let key =
                request.headers.get("idempotency-key").and_then(|v| v.to_str().ok()).map(str::to_string);
            if let Some(saved) = key.as_ref().and_then(|k| self.keys.get(k)) {
                if saved.body_sent != request.body {
                    let (status, body) = error(
                        400,
                        "Keys for idempotent requests can only be used with the same parameters they were first used with.",
                        None,
                        None,
                    );
                    return answer(status, body, &request_id, key.as_deref());
                }
                return answer(saved.status, saved.answer.clone(), &request_id, key.as_deref())
                    .insert_header("Idempotent-Replayed", "true");
            }
            let (status, body) = self.commit(request);
            if let Some(k) = &key {
                let saved = Saved { body_sent: request.body.clone(), status, answer: body.clone() };
                self.keys.insert(k.clone(), saved);
            }
            answer(status, body, &request_id, key.as_deref())
        }

        /// The refund itself: the status and the JSON body.
        fn commit(&mut self, request: &Request) -> (u16, String) {
            let params: HashMap<String, String> =
                form_urlencoded::parse(&request.body).into_owned().collect();
            let Some(pi) = params.get("payment_intent") else {
                return error(
                    400,
                    "One of the following parameters is required: charge, payment_intent.",
                    None,
                    None,
                );
            };
            let Some(intent) = self.intents.get(pi) else {
                return error(
                    404,
                    &format!("No such payment_intent: '{pi}'"),
                    Some("resource_missing"),
                    Some("payment_intent"),
                );
            };
            let (charge, currency) = (intent.charge.clone(), intent.currency.clone());
            let remaining = intent.amount.saturating_sub(self.refunded.get(pi).copied().unwrap_or(0));
            let amount = match params.get("amount").map(|a| a.parse::<u64>()) {
                None => remaining,
                Some(Ok(n)) if n >= 1 => n,
                Some(_) => return error(400, "Invalid integer: amount", None, Some("amount")),
            };
            if amount > remaining {
                let message = format!(
                    "Refund amount ({amount}) is greater than unrefunded amount on charge ({remaining})"
                );
                return error(400, &message, None, Some("amount"));
            }
            let created = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
            let refund = Refund {
                id: self.new_id("re_", 24),
                amount,
                charge,
                payment_intent: pi.clone(),
                currency,
                created,
            };
            let body = refund.to_json().to_string();
            *self.refunded.entry(pi.clone()).or_insert(0) += amount;
            self.by_id.insert(refund.id.clone(), self.refunds.len());
            self.refunds.push(refund);
            (200, body)
        }
    }

    /// Stripe's error envelope.
    fn error(status: u16, message: &str, code: Option<&str>, param: Option<&str>) -> (u16, String) {
        let mut error = json!({"type": "invalid_request_error", "message": message});
        if let Some(code) = code {
            error["code"] = json!(code);
        }
        if let Some(param) = param {
            error["param"] = json!(param);
        }
        (status, json!({ "error": error }).to_string())
    }

    fn answer(status: u16, body: String, request_id: &str, key: Option<&str>) -> ResponseTemplate {
        let template = ResponseTemplate::new(status).set_body_raw(body, "application/json");
        let template = template.insert_header("Request-Id", request_id);
        match key {
            Some(k) => template.insert_header("Idempotency-Key", k),
            None => template,
        }
    }

    /// The mock's responder.
    struct Refunds {
        state: Arc<Mutex<StubState>>,
    }

    impl Respond for Refunds {
        fn respond(&self, request: &Request) -> ResponseTemplate {
            match self.state.lock() {
                Ok(mut state) => state.create(request),
                // A responder that panicked while holding the lock: answer 500, which the bench
                // reports.
                Err(_) => ResponseTemplate::new(500),
            }
        }
    }

    /// A `MockServer` with the refund mock mounted, and the state its responder keeps.
    pub struct Stub {
        pub server: MockServer,
        state: Arc<Mutex<StubState>>,
        recording: bool,
    }

    impl Stub {
        /// `MockServer::start()` when `recording`, else a server built without request recording.
        pub async fn start(recording: bool) -> Result<Stub> {
            let server = if recording {
                MockServer::start().await
            } else {
                MockServer::builder().disable_request_recording().start().await
            };
            let stub = Stub { server, state: Arc::new(Mutex::new(StubState::new())), recording };
            stub.reset().await?;
            Ok(stub)
        }

        /// Forgets every mock and recorded request, starts the state afresh (one payment
        /// intent, nothing else) and mounts the refund mock again.
        pub async fn reset(&self) -> Result<()> {
            self.server.reset().await;
            *self.state.lock().map_err(|_| "the stub's state is poisoned")? = StubState::new();
            Mock::given(method("POST"))
                .and(path("/v1/refunds"))
                .respond_with(Refunds { state: Arc::clone(&self.state) })
                .mount(&self.server)
                .await;
            Ok(())
        }

        /// Checks that the stub holds one refund per answered request, of 1 cent each, and one
        /// recorded request each when recording is on.
        pub async fn check(&self, answered: u64) -> Result<()> {
            {
                let state = self.state.lock().map_err(|_| "the stub's state is poisoned")?;
                let refunds = state.refunds.len() as u64;
                let indexed = state.by_id.len() as u64;
                let cents: u64 =
                    state.refunds.iter().filter(|r| r.payment_intent == INTENT).map(|r| r.amount).sum();
                let refunded = state.refunded.get(INTENT).copied().unwrap_or(0);
                if refunds != answered || indexed != answered || cents != answered || refunded != answered {
                    return Err(format!(
                        "{answered} refunds answered but {refunds} in the stub ({indexed} by id, {cents} cents, {refunded} refunded)"
                    )
                    .into());
                }
                if state.refunds.iter().enumerate().any(|(i, r)| state.by_id.get(&r.id) != Some(&i)) {
                    return Err("two refunds share an id".into());
                }
            }
            let recorded = self.server.received_requests().await.map(|r| r.len() as u64);
            match (self.recording, recorded) {
                (true, Some(n)) if n == answered => Ok(()),
                (false, None) => Ok(()),
                (_, recorded) => {
                    Err(format!("{answered} answered but recorded requests {recorded:?}").into())
                }
            }
        }
    }
}
