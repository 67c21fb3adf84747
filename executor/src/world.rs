//! What the executor needs from the world, injected: time, fresh ids, and a way to send HTTP.
//!
//! The defaults are the system clock, UUID v7 and real sockets. A simulation passes a clock
//! on virtual time, a counter for ids and an in-memory transport, and gets the same executor,
//! deterministically.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;

/// Milliseconds since the Unix epoch: the one clock trait the fakes use too, with the system
/// clock and tokio's (virtual under a paused runtime).
pub use vocabulary::clock::{Clock, SystemClock, TokioClock};

/// Named points in the executor's work where a test may stop the process, to prove that a
/// crash at exactly that point loses nothing and doubles nothing.
pub trait Hooks: Send + Sync {
    /// Called at `point`: `after_record` (an intent is durable, its reply not yet sent),
    /// `after_resolve` (a step's resolved references are durable with its `submitted`, no
    /// byte of it sent), `before_send` (marked submitted, no byte sent), `after_reply` (an
    /// answer received, its outcome not yet recorded).
    fn at(&self, point: &'static str);
}

/// No hooks: what every real run uses.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoHooks;

impl Hooks for NoHooks {
    fn at(&self, _point: &'static str) {}
}

/// A source of unique ids (idempotency keys, incarnations).
pub trait IdSource: Send + Sync {
    fn next_id(&self) -> String;
}

/// UUID v7: unique across processes and sortable by time.
#[derive(Debug, Default, Clone, Copy)]
pub struct UuidV7;

impl IdSource for UuidV7 {
    fn next_id(&self) -> String {
        uuid::Uuid::now_v7().to_string()
    }
}

/// `prefix-1`, `prefix-2`, ...: deterministic, for tests and simulations.
#[derive(Debug, Default)]
pub struct Counter {
    prefix: String,
    next: AtomicU64,
}

impl Counter {
    pub fn new(prefix: &str) -> Self {
        Counter { prefix: prefix.to_string(), next: AtomicU64::new(0) }
    }
}

impl IdSource for Counter {
    fn next_id(&self) -> String {
        let n = self.next.fetch_add(1, Ordering::SeqCst) + 1;
        format!("{}-{n}", self.prefix)
    }
}

/// One HTTP request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpRequest {
    pub method: &'static str,
    /// Absolute URL: `http://host:port/path?query`.
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub timeout_ms: u64,
}

/// One HTTP answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    pub fn json(&self) -> Option<serde_json::Value> {
        serde_json::from_slice(&self.body).ok()
    }
}

/// Why no answer came back. The split is the one that matters for safety: a request that was
/// never sent may be sent again; one that may have been sent may have taken effect.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// Nothing left the process: the connection could not be made.
    #[error("not sent: {0}")]
    NotSent(String),
    /// The request may have arrived: reset, closed or timed out after sending.
    #[error("no answer: {0}")]
    Ambiguous(String),
}

/// A boxed future, so that transports can be trait objects.
pub type SendFuture<'a> = Pin<Box<dyn Future<Output = Result<HttpResponse, SendError>> + Send + 'a>>;

/// Sends HTTP requests.
pub trait Transport: Send + Sync {
    fn send(&self, request: HttpRequest) -> SendFuture<'_>;
}

/// Real sockets: one connection per request, hyper's HTTP/1.1 client, a bound on every wait.
/// [`PooledHttpTransport`] is the same on reused keep-alive connections.
#[derive(Debug, Default, Clone, Copy)]
pub struct HttpTransport;

impl Transport for HttpTransport {
    fn send(&self, request: HttpRequest) -> SendFuture<'_> {
        Box::pin(send_http(request))
    }
}

async fn send_http(request: HttpRequest) -> Result<HttpResponse, SendError> {
    let uri: hyper::Uri =
        request.url.parse().map_err(|e| SendError::NotSent(format!("bad URL {}: {e}", request.url)))?;
    let host =
        uri.host().ok_or_else(|| SendError::NotSent(format!("no host in {}", request.url)))?.to_string();
    let port = uri.port_u16().unwrap_or(80);
    let timeout = Duration::from_millis(request.timeout_ms);
    let stream = tokio::time::timeout(timeout, tokio::net::TcpStream::connect((host.as_str(), port)))
        .await
        .map_err(|_| SendError::NotSent(format!("connect to {host}:{port} timed out")))?
        .map_err(|e| SendError::NotSent(format!("connect to {host}:{port}: {e}")))?;
    let _ = stream.set_nodelay(true);
    // From here on bytes may leave the process: every failure is ambiguous.
    let exchange = async {
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| SendError::Ambiguous(format!("handshake: {e}")))?;
        let driver = tokio::spawn(connection);
        let path = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
        let mut builder = hyper::Request::builder()
            .method(request.method)
            .uri(path)
            .header("host", format!("{host}:{port}"));
        for (name, value) in &request.headers {
            builder = builder.header(name.as_str(), value.as_str());
        }
        let req = builder
            .body(Full::new(Bytes::from(request.body.clone())))
            .map_err(|e| SendError::NotSent(format!("cannot build the request: {e}")))?;
        let response = sender.send_request(req).await.map_err(|e| SendError::Ambiguous(e.to_string()))?;
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(n, v)| (n.as_str().to_string(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
            .collect();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| SendError::Ambiguous(format!("reading the answer: {e}")))?
            .to_bytes()
            .to_vec();
        driver.abort();
        Ok(HttpResponse { status, headers, body })
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| SendError::Ambiguous(format!("no answer within {} ms", request.timeout_ms)))?
}

/// How long an idle connection is kept for reuse: well under the 30 s a hyper server (the
/// fakes') gives a client to send its next request's headers, so that a connection is never
/// reused just as the server gives up on it.
pub const IDLE_MS_MAX: u64 = 5_000;
/// Idle connections kept per host and port: a pass sends at most `batch_max` requests at once.
pub const IDLE_PER_HOST_MAX: usize = 256;

type Sender = SendRequest<Full<Bytes>>;
/// Idle connections by host and port, each with when it went idle.
type IdlePool = HashMap<(String, u16), Vec<(Sender, Instant)>>;

/// Real sockets as [`HttpTransport`], on keep-alive connections: a connection whose answer
/// was read to its end goes back to an idle pool and carries a later request to the same host
/// and port. What a failure means is exactly as without the pool: `NotSent` only when
/// nothing left the process (the connection could not be made), `Ambiguous` once a request
/// may have been written. A reused connection that the server closed meanwhile is caught by
/// hyper before a byte is written (it hands the request back unsent), and the request then
/// goes on a new connection; hyper's own pooled client (hyper-util's `client::legacy`) does
/// the same, but it connects inside the request's future, where a connect that timed out
/// (nothing sent) cannot be told from an answer that did not come.
#[derive(Clone, Default)]
pub struct PooledHttpTransport {
    idle: Arc<Mutex<IdlePool>>,
}

impl PooledHttpTransport {
    pub fn new() -> PooledHttpTransport {
        PooledHttpTransport::default()
    }

    /// An idle connection to `host:port` still open, if any (the newest first).
    fn take_idle(&self, host: &str, port: u16) -> Option<Sender> {
        // A panic while holding the pool leaves it consistent (a map of idle senders).
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let list = idle.get_mut(&(host.to_string(), port))?;
        while let Some((sender, since)) = list.pop() {
            if !sender.is_closed() && since.elapsed() < Duration::from_millis(IDLE_MS_MAX) {
                return Some(sender);
            }
        }
        None
    }

    fn put_idle(&self, host: String, port: u16, sender: Sender) {
        if sender.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let list = idle.entry((host, port)).or_default();
        list.retain(|(s, since)| !s.is_closed() && since.elapsed() < Duration::from_millis(IDLE_MS_MAX));
        if list.len() < IDLE_PER_HOST_MAX {
            list.push((sender, Instant::now()));
        }
    }

    async fn send_pooled(&self, mut request: HttpRequest) -> Result<HttpResponse, SendError> {
        let uri: hyper::Uri =
            request.url.parse().map_err(|e| SendError::NotSent(format!("bad URL {}: {e}", request.url)))?;
        let host =
            uri.host().ok_or_else(|| SendError::NotSent(format!("no host in {}", request.url)))?.to_string();
        let port = uri.port_u16().unwrap_or(80);
        let path = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
        let timeout = Duration::from_millis(request.timeout_ms);
        // The body moves into the request: only its URL and timeout are read after this.
        let body = std::mem::take(&mut request.body);
        let mut req = build_request(&request, body, path, &host, port)?;
        loop {
            let (mut sender, reused) = match self.take_idle(&host, port) {
                Some(sender) => (sender, true),
                None => (connect(&host, port, timeout).await?, false),
            };
            // From here on bytes may leave the process: every failure is ambiguous, except a
            // request hyper hands back unwritten.
            let exchange = async {
                let response = match sender.try_send_request(req).await {
                    Ok(response) => response,
                    Err(mut e) => return Err((e.take_message(), e.into_error())),
                };
                let status = response.status().as_u16();
                let headers = response
                    .headers()
                    .iter()
                    .map(|(n, v)| {
                        (n.as_str().to_string(), String::from_utf8_lossy(v.as_bytes()).into_owned())
                    })
                    .collect();
                // `Vec::from` takes the collected buffer over when nothing else holds it.
                let body = Vec::from(response.into_body().collect().await.map_err(|e| (None, e))?.to_bytes());
                Ok(HttpResponse { status, headers, body })
            };
            let answer = tokio::time::timeout(timeout, exchange)
                .await
                .map_err(|_| SendError::Ambiguous(format!("no answer within {} ms", request.timeout_ms)))?;
            match answer {
                Ok(response) => {
                    // The answer was read to its end: the connection can carry the next one.
                    self.put_idle(host, port, sender);
                    return Ok(response);
                }
                // Closed before this request was written (the server ended the idle
                // connection): nothing left, so it goes again on another connection.
                Err((Some(unsent), _)) if reused => req = unsent,
                Err((_, e)) => {
                    let stage = if reused { "on a reused connection" } else { "on a new connection" };
                    return Err(SendError::Ambiguous(format!("{e} ({stage})")));
                }
            }
        }
    }
}

impl Transport for PooledHttpTransport {
    fn send(&self, request: HttpRequest) -> SendFuture<'_> {
        // Each exchange on a task of its own, so that a pass's concurrent sends (building,
        // writing, reading and decoding each request) spread over every worker thread instead
        // of taking turns in the pass's task.
        let pool = self.clone();
        let exchange = tokio::spawn(async move { pool.send_pooled(request).await });
        Box::pin(async move {
            exchange
                .await
                .unwrap_or_else(|e| Err(SendError::Ambiguous(format!("the send's task failed: {e}"))))
        })
    }
}

/// A new connection to `host:port`, its driver running on a task of its own until the
/// connection closes.
async fn connect(host: &str, port: u16, timeout: Duration) -> Result<Sender, SendError> {
    let stream = tokio::time::timeout(timeout, tokio::net::TcpStream::connect((host, port)))
        .await
        .map_err(|_| SendError::NotSent(format!("connect to {host}:{port} timed out")))?
        .map_err(|e| SendError::NotSent(format!("connect to {host}:{port}: {e}")))?;
    let _ = stream.set_nodelay(true);
    let (sender, connection) =
        tokio::time::timeout(timeout, hyper::client::conn::http1::handshake(TokioIo::new(stream)))
            .await
            .map_err(|_| SendError::Ambiguous(format!("handshake with {host}:{port} timed out")))?
            .map_err(|e| SendError::Ambiguous(format!("handshake: {e}")))?;
    // Ends by itself once the sender is dropped (out of the pool) or the server closes.
    tokio::spawn(connection);
    Ok(sender)
}

fn build_request(
    request: &HttpRequest,
    body: Vec<u8>,
    path: &str,
    host: &str,
    port: u16,
) -> Result<hyper::Request<Full<Bytes>>, SendError> {
    let mut builder =
        hyper::Request::builder().method(request.method).uri(path).header("host", format!("{host}:{port}"));
    for (name, value) in &request.headers {
        builder = builder.header(name.as_str(), value.as_str());
    }
    builder
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| SendError::NotSent(format!("cannot build the request: {e}")))
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    const ANSWER: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";

    fn get(url: &str) -> HttpRequest {
        HttpRequest {
            method: "GET",
            url: url.to_string(),
            headers: Vec::new(),
            body: Vec::new(),
            timeout_ms: 2_000,
        }
    }

    /// Reads one request's head (these requests have no body).
    async fn read_head(stream: &mut tokio::net::TcpStream) -> bool {
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            match stream.read(&mut byte).await {
                Ok(1) => head.push(byte[0]),
                _ => return false,
            }
        }
        true
    }

    /// A connection the server closed while it was idle in the pool is not used again: the
    /// next request goes on a new connection and is answered, neither refused as unsent nor
    /// called ambiguous.
    #[tokio::test]
    async fn a_pooled_connection_the_server_closed_is_replaced_without_a_wrong_verdict() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/x", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            let mut accepted = 0;
            loop {
                let (mut stream, _) = listener.accept().await.unwrap();
                accepted += 1;
                // One answer per connection, then a close (FIN) while the client keeps it idle.
                if read_head(&mut stream).await {
                    stream.write_all(ANSWER).await.unwrap();
                }
                drop(stream);
                if accepted == 2 {
                    return accepted;
                }
            }
        });
        let transport = PooledHttpTransport::new();
        assert_eq!(transport.send(get(&url)).await.unwrap().body, b"ok");
        // Long enough for the connection's driver to read the FIN.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(transport.send(get(&url)).await.unwrap().body, b"ok");
        assert_eq!(server.await.unwrap(), 2, "the second request came on a new connection");
    }

    /// Two requests in a row share one keep-alive connection.
    #[tokio::test]
    async fn a_connection_carries_the_next_request() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/x", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut answered = 0;
            while read_head(&mut stream).await {
                stream.write_all(ANSWER).await.unwrap();
                answered += 1;
            }
            answered
        });
        let transport = PooledHttpTransport::new();
        for _ in 0..3 {
            assert_eq!(transport.send(get(&url)).await.unwrap().status, 200);
        }
        drop(transport);
        assert_eq!(server.await.unwrap(), 3, "three answers on the one connection");
    }

    /// Nothing listening: not sent. A request read and the connection closed or reset without
    /// an answer: ambiguous, on a new connection as on a reused one.
    #[tokio::test]
    async fn refused_is_not_sent_and_closed_after_the_request_is_ambiguous() {
        let transport = PooledHttpTransport::new();
        let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let nobody = format!("http://{}/x", closed.local_addr().unwrap());
        drop(closed);
        assert!(matches!(transport.send(get(&nobody)).await, Err(SendError::NotSent(_))));

        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/x", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            // The first request is answered, the second read and left without an answer.
            read_head(&mut stream).await;
            stream.write_all(ANSWER).await.unwrap();
            read_head(&mut stream).await;
            drop(stream);
            let (mut stream, _) = listener.accept().await.unwrap();
            read_head(&mut stream).await;
            // A zero linger makes the close a reset (RST); it does not block the drop, which is
            // what the deprecation warns of.
            #[allow(deprecated)]
            let _ = stream.set_linger(Some(Duration::ZERO));
            drop(stream);
        });
        assert_eq!(transport.send(get(&url)).await.unwrap().status, 200);
        assert!(
            matches!(transport.send(get(&url)).await, Err(SendError::Ambiguous(_))),
            "closed on a reused connection"
        );
        assert!(
            matches!(transport.send(get(&url)).await, Err(SendError::Ambiguous(_))),
            "reset on a new connection"
        );
    }
}
