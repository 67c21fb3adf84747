//! The loopback HTTP transport: hyper serving a [`Fake`], one task per connection (and, for
//! the payments fake, its webhook delivery task beside the listener; `outbound.rs` holds the
//! socket code of a delivery).
//!
//! The transport only turns bytes into a [`FakeRequest`] and a [`Disposition`] back into
//! bytes, or into a closed (FIN) or reset (RST) connection. Reading is bounded: headers
//! within [`HEADER_READ_MS_MAX`], bodies within [`BODY_READ_MS_MAX`] and the fake's
//! [`Fake::body_bytes_max`]. The request line and headers are bounded too ([`URL_BYTES_MAX`],
//! [`HEADER_BYTES_MAX`], [`HEADER_SECTION_BYTES_MAX`]), answered in the fake's own error shape;
//! beyond hyper's own bounds ([`HEADER_SECTION_READ_BYTES_MAX`], [`HEADERS_MAX`] headers, a
//! URL over 65 534 bytes) hyper answers 431 or 414 with no body before a fake sees anything.
//!
//! A program that embeds the fakes can start a listener with a [`Listener`]: an origin label
//! put on every request it reads (so that journals say which caller sent what), and a
//! [`Tap`] that sees each request arrive and may hold its answer behind a gate until the
//! program has acted (the harness's observation points: "when payments has received the
//! first refund request and before it answers").

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderName, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use crate::fake::Fake;
use crate::wire::{Disposition, FakeRequest, FakeResponse};

/// A client has this long to send a request's headers.
pub const HEADER_READ_MS_MAX: u64 = 30_000;
/// And this long to send its body.
pub const BODY_READ_MS_MAX: u64 = 30_000;
/// How much of a body over the fake's bound is still read (and let go) before the 413, so
/// that the client, still sending, reads the answer rather than a reset.
pub const BODY_DRAIN_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Longest path and query a fake reads; longer is 414 in the fake's shape.
pub const URL_BYTES_MAX: usize = 16 * 1024;
/// Longest single header (name and value) a fake reads; longer is 431 in the fake's shape.
pub const HEADER_BYTES_MAX: usize = 16 * 1024;
/// Largest header section (request line and every header) a fake reads; larger is 431 in the
/// fake's shape.
pub const HEADER_SECTION_BYTES_MAX: usize = 64 * 1024;
/// What hyper buffers of a header section before it answers 431 itself (no body): twice the
/// bound above, so that every section between the two gets the fake's own answer.
pub const HEADER_SECTION_READ_BYTES_MAX: usize = 2 * HEADER_SECTION_BYTES_MAX;
/// Most headers hyper parses in one request (its default, kept: more costs a heap allocation
/// per request); more is hyper's own 431 with no body.
pub const HEADERS_MAX: usize = 100;
/// The longest a [`Tap`]'s gate holds an answer, as long as the longest fault may.
pub const GATE_HOLD_MS_MAX: u64 = vocabulary::rule::HOLD_MS_MAX;

/// Holds an answer until it opens: when its sender sends, or is dropped.
pub type Gate = oneshot::Receiver<()>;

/// Watches requests arrive at a listener.
pub trait Tap: Send + Sync {
    /// `request` has been read and is about to reach `service`'s fake. A gate returned here
    /// holds whatever the fake makes of it (an answer, a close or a reset) until the gate
    /// opens, at most [`GATE_HOLD_MS_MAX`]; meanwhile the fake processes the request to the
    /// end on a task of its own, even if the caller goes away.
    fn arrived(&self, service: &'static str, request: &FakeRequest) -> Option<Gate>;
}

/// What a listener adds to the requests it reads.
#[derive(Clone, Default)]
pub struct Listener {
    /// Put on every request as [`FakeRequest::origin`].
    pub origin: Option<String>,
    pub tap: Option<Arc<dyn Tap>>,
}

/// A fake listening on a socket.
pub struct Server {
    name: &'static str,
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl Server {
    /// Binds `addr` (port 0 for an ephemeral port) and starts serving `fake`.
    pub async fn start(fake: Fake, addr: SocketAddr) -> std::io::Result<Server> {
        Server::start_with(fake, addr, Listener::default()).await
    }

    /// As [`Server::start`], labelling and watching requests as `listener` says.
    pub async fn start_with(fake: Fake, addr: SocketAddr, listener: Listener) -> std::io::Result<Server> {
        let socket = TcpListener::bind(addr).await?;
        let addr = socket.local_addr()?;
        let (stop, stopped) = watch::channel(false);
        let name = fake.name();
        // A fake that sends to apps (the payments fake's webhooks) does so while it listens.
        if let Fake::Payments(payments) = &fake {
            tokio::spawn(crate::payments::driver::run(payments.clone(), stopped.clone()));
        }
        let task = tokio::spawn(accept_loop(fake, socket, listener, stopped));
        Ok(Server { name, addr, stop, task: Some(task) })
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://IP:PORT`, without a trailing slash.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops accepting, closes every connection and waits for the tasks to end.
    pub async fn stop(mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

async fn accept_loop(
    fake: Fake,
    socket: TcpListener,
    listener: Listener,
    mut stopped: watch::Receiver<bool>,
) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = stopped.changed() => break,
            accepted = socket.accept() => match accepted {
                Ok((stream, _)) => {
                    connections.spawn(serve_connection(fake.clone(), stream, listener.clone()));
                }
                // Running out of file descriptors must not end the server: wait a moment
                // for connections to close, then accept again.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    connections.shutdown().await;
}

/// Why the connection ends without an answer.
#[derive(Debug)]
struct NoAnswer;

impl std::fmt::Display for NoAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the fault plan ends this connection without an answer")
    }
}

impl std::error::Error for NoAnswer {}

async fn serve_connection(fake: Fake, stream: TcpStream, listener: Listener) {
    let _ = stream.set_nodelay(true);
    // A second handle on the same socket lets a request turn the coming close into a reset
    // (SO_LINGER 0) while hyper owns the stream. Socket options belong to the socket, so
    // setting one through the duplicate applies to both.
    let Ok(std_stream) = stream.into_std() else { return };
    let Ok(twin) = std_stream.try_clone() else { return };
    let Ok(stream) = TcpStream::from_std(std_stream) else { return };
    let twin = Arc::new(twin);
    let service = service_fn(move |req: Request<Incoming>| {
        let fake = fake.clone();
        let twin = Arc::clone(&twin);
        let listener = listener.clone();
        async move {
            if let Some((status, message)) = oversized_head(&req) {
                return Ok(to_hyper(fake.transport_error(status, &message)));
            }
            let body_bytes_max = fake.body_bytes_max();
            let mut request = match read_request(req, body_bytes_max).await {
                Ok(request) => request,
                Err(ReadError::TooLarge) => {
                    let message = format!("The request body is larger than {body_bytes_max} bytes.");
                    return Ok(to_hyper(fake.transport_error(413, &message)));
                }
                Err(ReadError::Slow) => {
                    let message = format!("The request body did not arrive within {BODY_READ_MS_MAX} ms.");
                    return Ok(to_hyper(fake.transport_error(408, &message)));
                }
                Err(ReadError::Broken) => return Err(NoAnswer),
            };
            request.origin = listener.origin.clone();
            let gate = listener.tap.as_ref().and_then(|tap| tap.arrived(fake.name(), &request));
            let disposition = match gate {
                None => fake.handle(request).await,
                Some(gate) => {
                    // The fake finishes on its own task: what the tap's owner does meanwhile
                    // (kill the caller, say) must not cancel a commit half-way.
                    let handled = tokio::spawn(async move { fake.handle(request).await });
                    let _ = tokio::time::timeout(Duration::from_millis(GATE_HOLD_MS_MAX), gate).await;
                    match handled.await {
                        Ok(disposition) => disposition,
                        Err(_) => Disposition::Close,
                    }
                }
            };
            match disposition {
                Disposition::Respond(response) => Ok(to_hyper(response)),
                Disposition::Reset => {
                    let _ = socket2::SockRef::from(&*twin).set_linger(Some(Duration::ZERO));
                    Err(NoAnswer)
                }
                Disposition::Close => Err(NoAnswer),
            }
        }
    });
    let _ = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_millis(HEADER_READ_MS_MAX))
        .max_header_size(HEADER_SECTION_READ_BYTES_MAX)
        .keep_alive(true)
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

/// The status and words for a request line or header section over the bounds, if it is.
fn oversized_head(req: &Request<Incoming>) -> Option<(u16, String)> {
    let url_bytes = req.uri().path_and_query().map_or(0, |p| p.as_str().len());
    if url_bytes > URL_BYTES_MAX {
        return Some((
            414,
            format!("The request URL is {url_bytes} bytes long; at most {URL_BYTES_MAX} are read."),
        ));
    }
    // As the bytes arrived: "NAME: VALUE\r\n" per header after the request line.
    let mut section_bytes = req.method().as_str().len() + url_bytes + " HTTP/1.1\r\n".len() + 1;
    for (name, value) in req.headers() {
        let header_bytes = name.as_str().len() + value.len();
        if header_bytes > HEADER_BYTES_MAX {
            return Some((
                431,
                format!(
                    "The header {name} is {header_bytes} bytes long; at most {HEADER_BYTES_MAX} are read."
                ),
            ));
        }
        section_bytes += header_bytes + 4;
    }
    (section_bytes > HEADER_SECTION_BYTES_MAX).then(|| {
        (
            431,
            format!(
                "The request's header section is {section_bytes} bytes long; at most {HEADER_SECTION_BYTES_MAX} are read."
            ),
        )
    })
}

enum ReadError {
    TooLarge,
    Slow,
    Broken,
}

async fn read_request(req: Request<Incoming>, body_bytes_max: usize) -> Result<FakeRequest, ReadError> {
    let (parts, mut body) = req.into_parts();
    let deadline = tokio::time::Instant::now() + Duration::from_millis(BODY_READ_MS_MAX);
    // Nearly every body arrives as one frame: kept as it is, with no list to allocate.
    let mut first: Option<Bytes> = None;
    let mut more: Vec<Bytes> = Vec::new();
    let mut read_bytes = 0usize;
    loop {
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            Err(_) if read_bytes > body_bytes_max => return Err(ReadError::TooLarge),
            Err(_) => return Err(ReadError::Slow),
            Ok(None) => break,
            Ok(Some(Err(_))) if read_bytes > body_bytes_max => return Err(ReadError::TooLarge),
            Ok(Some(Err(_))) => return Err(ReadError::Broken),
            Ok(Some(Ok(frame))) => frame,
        };
        // Trailers carry no body bytes.
        let Ok(data) = frame.into_data() else { continue };
        read_bytes = read_bytes.saturating_add(data.len());
        if read_bytes <= body_bytes_max {
            match first {
                None => first = Some(data),
                Some(_) => more.push(data),
            }
        } else if read_bytes > body_bytes_max.saturating_add(BODY_DRAIN_BYTES_MAX) {
            // Past what is worth reading to answer cleanly: answer now, and the client may
            // see its connection reset while still sending.
            return Err(ReadError::TooLarge);
        } else {
            // Over the bound: read the rest and let it go, so that the answer is not lost to a
            // reset (closing a socket with unread bytes resets it, and a client still sending
            // may never read the 413).
            first = None;
            more.clear();
        }
    }
    if read_bytes > body_bytes_max {
        return Err(ReadError::TooLarge);
    }
    let body = match first {
        None => Bytes::new(),
        Some(first) if more.is_empty() => first,
        Some(first) => {
            let mut whole = Vec::with_capacity(read_bytes);
            whole.extend_from_slice(&first);
            for chunk in &more {
                whole.extend_from_slice(chunk);
            }
            Bytes::from(whole)
        }
    };
    Ok(FakeRequest {
        method: parts.method.as_str().to_string(),
        path: parts.uri.path().to_string(),
        query: parts.uri.query().unwrap_or("").to_string(),
        headers: parts.headers,
        body,
        origin: None,
    })
}

fn to_hyper(response: FakeResponse) -> Response<Full<Bytes>> {
    let FakeResponse { status, headers, body } = response;
    let mut answer = Response::new(Full::new(body));
    let Ok(status) = hyper::StatusCode::from_u16(status) else { return fallback() };
    *answer.status_mut() = status;
    let map = answer.headers_mut();
    map.reserve(headers.len());
    for (name, value) in headers {
        let Ok(name) = header_name(&name) else { return fallback() };
        // The value's bytes become the header's: no copy.
        let Ok(value) = HeaderValue::from_maybe_shared(Bytes::from(value)) else { return fallback() };
        map.append(name, value);
    }
    answer
}

/// Only a header a fake built wrongly can get here; answer rather than drop.
fn fallback() -> Response<Full<Bytes>> {
    let mut fallback = Response::new(Full::new(Bytes::from_static(b"{\"error\":{\"type\":\"api_error\"}}")));
    *fallback.status_mut() = hyper::StatusCode::INTERNAL_SERVER_ERROR;
    fallback
}

/// The names the fakes send on (nearly) every answer, without parsing and allocating them each
/// time; any other is parsed. Either way the name goes out lowercase, as HTTP/1 writes it.
fn header_name(name: &str) -> Result<HeaderName, http::header::InvalidHeaderName> {
    use http::header;
    // Names of different lengths are told apart by the length alone.
    let known = |n: &str| name.eq_ignore_ascii_case(n);
    // Constants: `from_static` outside a constant checks its name on every call.
    const REQUEST_ID: HeaderName = HeaderName::from_static("request-id");
    const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
    const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");
    const IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");
    const STRIPE_SHOULD_RETRY: HeaderName = HeaderName::from_static("stripe-should-retry");
    const X_AMZ_REQUEST_ID: HeaderName = HeaderName::from_static("x-amz-request-id");
    const X_AMZ_ID_2: HeaderName = HeaderName::from_static("x-amz-id-2");
    const X_AMZ_SERVER_SIDE_ENCRYPTION: HeaderName = HeaderName::from_static("x-amz-server-side-encryption");
    const X_AMZ_CHECKSUM_TYPE: HeaderName = HeaderName::from_static("x-amz-checksum-type");
    const X_AMZ_CHECKSUM_CRC32: HeaderName = HeaderName::from_static("x-amz-checksum-crc32");
    Ok(match () {
        () if known("content-type") => header::CONTENT_TYPE,
        () if known("etag") => header::ETAG,
        () if known("server") => header::SERVER,
        () if known("request-id") => REQUEST_ID,
        () if known("x-request-id") => X_REQUEST_ID,
        () if known("idempotency-key") => IDEMPOTENCY_KEY,
        () if known("idempotent-replayed") => IDEMPOTENT_REPLAYED,
        () if known("stripe-should-retry") => STRIPE_SHOULD_RETRY,
        () if known("x-amz-request-id") => X_AMZ_REQUEST_ID,
        () if known("x-amz-id-2") => X_AMZ_ID_2,
        () if known("x-amz-server-side-encryption") => X_AMZ_SERVER_SIDE_ENCRYPTION,
        () if known("x-amz-checksum-type") => X_AMZ_CHECKSUM_TYPE,
        () if known("x-amz-checksum-crc32") => X_AMZ_CHECKSUM_CRC32,
        () => return HeaderName::from_bytes(name.as_bytes()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A known name is the name HTTP parsing gives, whatever its case.
    #[test]
    fn known_header_names_are_the_parsed_names() {
        for name in [
            "Content-Type",
            "ETag",
            "Server",
            "Request-Id",
            "X-Request-Id",
            "Idempotency-Key",
            "Idempotent-Replayed",
            "Stripe-Should-Retry",
            "x-amz-request-id",
            "x-amz-id-2",
            "x-amz-server-side-encryption",
            "x-amz-checksum-type",
            "x-amz-checksum-crc32",
            "x-other",
        ] {
            assert_eq!(
                header_name(name).unwrap(),
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                "{name}"
            );
        }
        assert!(header_name("bad name").is_err());
    }
}
