//! `eth_sendRawTransaction` per second on the chain fake, signature recovery included.
//!
//! [`CONNECTIONS`] keep-alive connections, each sending one sender's EIP-1559 transfers at
//! consecutive nonces (so every one is pooled and mined at once, blocks being instant).
//! Every transaction is signed before the clock starts: the figure is the fake's decoding,
//! sender recovery, validation, pooling and mining. Each window starts from a reset fake with
//! the senders funded; every answer is checked to be the transaction's hash and every
//! transaction to be in the ledger as `tx.mined`.

use std::sync::Arc;
use std::time::Instant;

use bench_support::summary;
use bytes::Bytes;
use fake_services::chain::{address_of, sign_transfer};
use fake_services::{Fake, Fakes, Server};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{CONTENT_TYPE, HOST, HeaderValue};
use hyper::{Request, StatusCode};
use serde_json::json;
use vocabulary::TokioClock;

use crate::target::open_connections;
use crate::{CONNECTIONS, ROUNDS, Result, SEED, WARMUP, WINDOW, record};

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
    let fake = crate::servers::unbounded(Fake::Chain(fakes.chain.clone()));
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
