//! Requests per second that the fakes serve over loopback HTTP, next to bare hyper.
//!
//! Three servers run in this process, on one tokio runtime with two worker threads:
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
//! - the chain fake (after the interleaved windows, on its own), taking one pre-signed EIP-1559
//!   transfer per `eth_sendRawTransaction`: decoding, sender recovery, nonce and balance
//!   checks, pooling and instant mining, with a ledger effect per transaction.
//!
//! A client opens [`CONNECTIONS`] keep-alive connections to each and sends requests one after
//! another on each connection. After a warm-up, it measures [`ROUNDS`] windows of [`WINDOW`]
//! per server, interleaved (bare, fake, fake with rules, bare, ...) so that drift on the
//! machine hits all three alike. Every window starts from a reset fake, so state does not pile
//! up across windows.
//!
//! Output: readable lines, then one `BENCH {json}` line per figure, which `cargo xtask bench`
//! collects into `docs/benchmarks.md` (the record format is described in `xtask/src/main.rs`).
//! Run it alone with `cargo bench -p fake-services --bench throughput`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

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

    let mut targets = vec![
        Target::connect(BARE, bare.addr, None).await?,
        Target::connect(FAKE, plain.0.addr(), Some((plain.1.clone(), 0))).await?,
        Target::connect(FAKE_RULES, ruled.0.addr(), Some((ruled.1.clone(), RULES))).await?,
        Target::connect(FILES_PUT, files.0.addr(), Some((files.1.clone(), 0))).await?,
    ];
    let keys = Arc::new(AtomicU64::new(0));

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
            println!("  window {round}/{ROUNDS}  {:<54} {:>9.0} req/s", target.name, rate);
        }
    }

    let mut records = Vec::new();
    println!();
    for target in &targets {
        let (median, spread) = summary(&target.rates);
        println!("{:<56} median {median:>9.0} req/s, spread {spread:.1} %", target.name);
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
    bare.task.abort();
    Ok(())
}

fn record(name: &str, value: f64, unit: &str, spread_pct: f64, notes: &str) -> serde_json::Value {
    let round = |v: f64, places: i32| (v * 10f64.powi(places)).round() / 10f64.powi(places);
    json!({
        "bench": BENCH,
        "name": name,
        "value": round(value, if unit == "x" { 3 } else { 1 }),
        "unit": unit,
        "spread_pct": round(spread_pct, 1),
        "notes": notes,
    })
}

/// The median and the spread, (max - min) / median in percent.
fn summary(samples: &[f64]) -> (f64, f64) {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    if n == 0 {
        return (0.0, 0.0);
    }
    let median = if n % 2 == 1 { sorted[n / 2] } else { (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0 };
    let spread = if median > 0.0 { (sorted[n - 1] - sorted[0]) / median * 100.0 } else { 0.0 };
    (median, spread)
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
    senders: Vec<SendRequest<Full<Bytes>>>,
    workload: Workload,
    rates: Vec<f64>,
    /// Requests answered in each measured window.
    answered: Vec<u64>,
}

impl Target {
    async fn connect(name: &'static str, addr: SocketAddr, fake: Option<(Fake, usize)>) -> Result<Target> {
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
        let host = HeaderValue::from_str(&addr.to_string())?;
        let workload = Workload::of(fake.as_ref().map(|(f, _)| f))?;
        Ok(Target { name, host, fake, senders, workload, rates: Vec::new(), answered: Vec::new() })
    }

    /// Resets the fake to its starting state: one payment intent (or the files fake's empty
    /// bucket) and the rules, nothing else.
    fn prepare(&self) -> Result<()> {
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
        self.prepare()?;
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
        let mut connections = Vec::with_capacity(CONNECTIONS);
        for _ in 0..CONNECTIONS {
            let stream = TcpStream::connect(addr).await?;
            stream.set_nodelay(true)?;
            let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
            tokio::spawn(async move {
                let _ = connection.await;
            });
            connections.push(sender);
        }
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
