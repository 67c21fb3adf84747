//! The client side: one server under measurement (`Target`) with its keep-alive
//! connections, the workload it is sent (a refund create or an S3 PUT), the probe that checks
//! the fake and the stub answer alike, and the measured windows.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use fake_services::Fake;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST, HeaderValue};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use vocabulary::FaultRule;
use vocabulary::FaultSpec;

use crate::refund_stub::Stub;
use crate::{CONNECTIONS, FILE_BUCKET, FILE_BYTES, FORM, INTENT, INTENT_AMOUNT, Result};

/// One server under measurement and the client's connections to it.
pub(super) struct Target {
    pub(super) name: &'static str,
    host: HeaderValue,
    /// The fake behind the server and how many non-matching rules to arm; none for bare hyper.
    fake: Option<(Fake, usize)>,
    /// The wiremock stub behind the server, if that is what it is.
    stub: Option<Stub>,
    senders: Vec<SendRequest<Full<Bytes>>>,
    workload: Workload,
    pub(super) rates: Vec<f64>,
    /// Requests answered in each measured window.
    pub(super) answered: Vec<u64>,
}

/// [`CONNECTIONS`] keep-alive HTTP/1 client connections to `addr`, each driven by a task of
/// its own.
pub(super) async fn open_connections(addr: SocketAddr) -> Result<Vec<SendRequest<Full<Bytes>>>> {
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
    pub(super) async fn connect(
        name: &'static str,
        addr: SocketAddr,
        fake: Option<(Fake, usize)>,
    ) -> Result<Target> {
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

    pub(super) fn with_stub(mut self, stub: Stub) -> Target {
        self.stub = Some(stub);
        self
    }

    /// From a reset state, sends a refund create, its replay, one without a key and one for more
    /// than remains, checking each answer (200, a replay of the same body, 401, 400 on
    /// `amount`). Returns the first answer's header names (sorted, leaving out those that
    /// change with time or length) and its body.
    pub(super) async fn probe(&mut self, keys: &Arc<AtomicU64>) -> Result<(Vec<String>, Bytes)> {
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
    pub(super) async fn window(&mut self, length: Duration, keys: &Arc<AtomicU64>) -> Result<(u64, f64)> {
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
