//! The servers whose instructions per request `cargo xtask bench` counts under Callgrind, and
//! the client that drives them from another process (so that only the server is counted).
//!
//! ```text
//! count_server serve payments|bare|wiremock   # prints its URL, serves until stdin closes
//! count_server drive URL N                    # N refund creates, one keep-alive connection
//! ```
//!
//! Each server runs on one current-thread tokio runtime, the way wiremock serves a
//! `MockServer`, so that the counted work is the serving alone: no work stealing, no idle
//! worker polling. The client sends its requests one after the other on one connection and
//! waits for each answer, so every request reaches the server as one read and the count per
//! request does not depend on how fast either side runs. The runner counts two runs of
//! different lengths and divides the difference, which cancels start-up; the server exits
//! without dropping its state, whose teardown would otherwise grow with the requests.
//!
//! The requests are the throughput benchmark's (`benches/throughput`): `POST /v1/refunds` with
//! a form body, a Bearer key and a fresh `Idempotency-Key` each; the servers are its servers
//! (bare hyper answering a fixed body, the payments fake, the stateful wiremock stub).

// The throughput benchmark's servers and stub, shared rather than copied; this program uses
// part of what they offer.
#[allow(dead_code)]
#[path = "../benches/throughput/refund_stub.rs"]
mod refund_stub;
#[allow(dead_code)]
#[path = "../benches/throughput/servers.rs"]
mod servers;
#[path = "../benches/throughput/workload.rs"]
mod workload;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use fake_services::Fake;
use http_body_util::{BodyExt, Full};
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST, HeaderValue};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use workload::{BARE_BODY, FORM, INTENT, INTENT_AMOUNT, SEED};

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Result<T, E = BoxError> = std::result::Result<T, E>;

/// The longest the client waits for one answer; under Callgrind a server runs some fifty
/// times slower than natively, and one answer still takes milliseconds.
const ANSWER_MS_MAX: u64 = 30_000;

const USAGE: &str = "usage: count_server serve payments|bare|wiremock | count_server drive URL N";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("count_server: could not start a tokio runtime: {e}");
            std::process::exit(1);
        }
    };
    let done = match args.as_slice() {
        ["serve", kind] => runtime.block_on(serve(kind)),
        ["drive", url, n] => match n.parse::<u64>() {
            Ok(n) => runtime.block_on(drive(url, n)),
            Err(e) => Err(format!("N must be a count: {e}").into()),
        },
        _ => Err(USAGE.into()),
    };
    if let Err(e) = done {
        eprintln!("count_server: {e}");
        std::process::exit(1);
    }
}

/// Starts the server called `kind`, prints its URL on a line of its own and serves until
/// standard input closes.
async fn serve(kind: &str) -> Result<()> {
    // Each arm keeps its server alive until the end of this function.
    let (addr, _bare, _fake, _stub): (SocketAddr, _, _, _) = match kind {
        "bare" => {
            let bare = servers::BareServer::start().await?;
            (bare.addr, Some(bare), None, None)
        }
        "payments" => {
            let (server, fake) = servers::start_fake().await?;
            if let Fake::Payments(payments) = &fake {
                payments.seed_payment_intent(Some(INTENT), INTENT_AMOUNT, "usd")?;
            }
            (server.addr(), None, Some(server), None)
        }
        "wiremock" => {
            let stub = refund_stub::Stub::start(true).await?;
            (*stub.server.address(), None, None, Some(stub))
        }
        other => return Err(format!("no server called {other:?}; {USAGE}").into()),
    };
    println!("http://{addr}");
    // Serving happens on this runtime while it waits; closing stdin is the signal to stop.
    let mut sink = Vec::new();
    tokio::io::stdin().read_to_end(&mut sink).await?;
    // Out without dropping what the server holds: freeing a state that grew with every request
    // is the process's teardown, not serving, and would count as a cost per request.
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    std::process::exit(0)
}

/// Sends `n` refund creates to `url`, one at a time on one keep-alive connection, and checks
/// that every answer is a 200.
async fn drive(url: &str, n: u64) -> Result<()> {
    let authority = url.strip_prefix("http://").ok_or("the URL must start with http://")?;
    let addr: SocketAddr = authority.trim_end_matches('/').parse()?;
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    let connection = tokio::spawn(connection);
    let host = HeaderValue::from_str(&addr.to_string())?;
    for i in 0..n {
        let request = Request::post("/v1/refunds")
            .header(HOST, host.clone())
            .header(AUTHORIZATION, "Bearer sk_test_twice")
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header("Idempotency-Key", format!("count-{i}"))
            .body(Full::new(Bytes::from_static(FORM)))?;
        let answer = async {
            sender.ready().await?;
            let response = sender.send_request(request).await?;
            let status = response.status();
            let body = response.into_body().collect().await?.to_bytes();
            Ok::<_, BoxError>((status, body))
        };
        let (status, body) = tokio::time::timeout(Duration::from_millis(ANSWER_MS_MAX), answer)
            .await
            .map_err(|_| format!("request {i}: no answer within {ANSWER_MS_MAX} ms"))??;
        if status != StatusCode::OK {
            return Err(format!("request {i}: {status}: {}", String::from_utf8_lossy(&body)).into());
        }
    }
    drop(sender);
    connection.abort();
    println!("{n} answered");
    Ok(())
}
