//! What the executor needs from the world, injected: time, fresh ids, and a way to send HTTP.
//!
//! The defaults are the system clock, UUID v7 and real sockets. A simulation passes a clock
//! on virtual time, a counter for ids and an in-memory transport, and gets the same executor,
//! deterministically.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
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
