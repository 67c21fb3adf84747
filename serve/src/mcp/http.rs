//! MCP over streamable HTTP (`POST /mcp`, with sessions), the SDK's service on hyper, one
//! task per connection, for `twice serve --mcp-port` and `twice mcp --mcp-port`.
//!
//! A POST's body is read here first, bounded as a stdio line is ([`MESSAGE_BYTES_MAX`]): one
//! declared larger is refused with 413 before a byte of it is read, one that turns out larger
//! once its first [`MESSAGE_BYTES_MAX`] bytes are in, and in both cases the rest is read and
//! let go (up to [`BODY_DRAIN_BYTES_MAX`]) so that a client still sending reads the 413
//! rather than a reset. A body the SDK cannot take gets JSON-RPC's error as a JSON body (HTTP
//! 400), as the stdio framing answers a line ([`super::message`]); the rest goes to the SDK.
//! Within a session, a request under an id still in flight is refused by the session manager
//! ([`super::sessions`]).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::Value;
use tokio::net::TcpListener;

use super::message::{self, Read};
use super::sessions::Sessions;
use super::{MESSAGE_BYTES_MAX, Server};
use crate::world::World;

/// The path the MCP endpoint answers at.
pub const PATH: &str = "/mcp";
/// A client has this long to send a request's headers, and as long again for its body.
pub const READ_MS_MAX: u64 = 30_000;
/// How much of a body past [`MESSAGE_BYTES_MAX`] is still read and let go after the 413, so
/// that a client still sending reads the answer rather than a reset; past it the connection
/// closes.
pub const BODY_DRAIN_BYTES_MAX: u64 = 512 * 1024 * 1024;

type Service = StreamableHttpService<Server, Sessions>;

type Body = http_body_util::Either<http_body_util::combinators::BoxBody<Bytes, Infallible>, Full<Bytes>>;

/// The endpoint, listening.
pub struct McpHttp {
    url: String,
    /// Ends every session (the SDK's cancellation token, cancelled).
    stop: Box<dyn FnOnce() + Send>,
    accept: tokio::task::JoinHandle<()>,
}

impl McpHttp {
    /// `http://host:port/mcp`.
    pub fn url(&self) -> &str {
        &self.url
    }

    pub async fn stop(self) {
        (self.stop)();
        self.accept.abort();
        let _ = self.accept.await;
    }
}

/// Listens on `addr` and serves MCP there over `world`.
pub async fn start(world: Arc<World>, addr: SocketAddr, timeout_ms: Option<u64>) -> std::io::Result<McpHttp> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    // The SDK's own bound stays as a second line behind the one read here.
    let mut config = StreamableHttpServerConfig::default().with_max_request_body_bytes(MESSAGE_BYTES_MAX);
    let token = config.cancellation_token.clone();
    let stop: Box<dyn FnOnce() + Send> = Box::new(move || token.cancel());
    if !addr.ip().is_loopback() {
        // Beyond loopback only with --allow-remote (checked by serve): the Host header may
        // then name the address it listens on.
        config.allowed_hosts.push(addr.ip().to_string());
    }
    let service: Service = StreamableHttpService::new(
        move || Ok(Server::new(Arc::clone(&world), timeout_ms, super::Transport::Http)),
        Arc::new(Sessions::default()),
        config,
    );
    let accept = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let service = service.clone();
            tokio::spawn(async move {
                let handler = hyper::service::service_fn(move |request: Request<Incoming>| {
                    let service = service.clone();
                    async move { Ok::<_, Infallible>(answer(&service, request).await) }
                });
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ = hyper::server::conn::http1::Builder::new()
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(Duration::from_millis(READ_MS_MAX))
                    .serve_connection(io, handler)
                    .await;
            });
        }
    });
    Ok(McpHttp { url: format!("http://{local}{PATH}"), stop, accept })
}

/// One request's answer.
async fn answer(service: &Service, request: Request<Incoming>) -> Response<Body> {
    if request.uri().path() != PATH {
        return plain(StatusCode::NOT_FOUND, "not found: the MCP endpoint is POST /mcp\n");
    }
    if request.method() != hyper::Method::POST {
        // GET (the standalone stream) and DELETE (the session's end) carry no body the SDK reads.
        return service.handle(request).await.map(http_body_util::Either::Left);
    }
    let (parts, body) = request.into_parts();
    let declared = parts
        .headers
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let expects_continue = parts
        .headers
        .get(hyper::header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    if declared.is_some_and(|bytes| bytes > MESSAGE_BYTES_MAX as u64) {
        // A client waiting for 100 Continue sends nothing more: the 413 is its answer, and the
        // body it never sent needs no draining.
        if !expects_continue {
            tokio::spawn(drain(body, 0));
        }
        return too_large();
    }
    let bytes = match read_bounded(body).await {
        Ok(bytes) => bytes,
        Err(BodyError::TooLarge { rest, read }) => {
            tokio::spawn(drain(rest, read));
            return too_large();
        }
        Err(BodyError::Slow) => {
            let refusal = message::error(
                Value::Null,
                message::INVALID_REQUEST,
                format!("Invalid Request: the body did not arrive within {READ_MS_MAX} ms"),
            );
            return json(StatusCode::REQUEST_TIMEOUT, &refusal, true);
        }
        Err(BodyError::Broken) => {
            let refusal = message::error(
                Value::Null,
                message::INVALID_REQUEST,
                "Invalid Request: the body broke off".into(),
            );
            return json(StatusCode::BAD_REQUEST, &refusal, true);
        }
    };
    // A request the SDK refuses for its headers (what it accepts, what it sends) it answers
    // itself, as before: only a JSON body is read for what it holds.
    if is_json(&parts.headers) && accepts_both(&parts.headers) {
        match message::read(&bytes) {
            Read::Message(_) => {}
            Read::Refuse(refusal) => return json(StatusCode::BAD_REQUEST, &refusal, false),
            // A notification nobody knows is accepted and never answered.
            Read::Skip => return plain(StatusCode::ACCEPTED, ""),
        }
    }
    let request = Request::from_parts(parts, Full::new(bytes));
    service.handle(request).await.map(http_body_util::Either::Left)
}

/// Why a body was not read whole.
enum BodyError {
    /// Past [`MESSAGE_BYTES_MAX`]: `read` bytes in, `rest` still to come.
    TooLarge { rest: Incoming, read: u64 },
    /// Not whole within [`READ_MS_MAX`].
    Slow,
    /// The connection broke off in the middle.
    Broken,
}

/// The body, at most [`MESSAGE_BYTES_MAX`] bytes of it held at once, within [`READ_MS_MAX`].
async fn read_bounded(mut body: Incoming) -> Result<Bytes, BodyError> {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(READ_MS_MAX);
    let mut whole = bytes::BytesMut::new();
    loop {
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            Err(_) => return Err(BodyError::Slow),
            Ok(None) => return Ok(whole.freeze()),
            Ok(Some(Err(_))) => return Err(BodyError::Broken),
            Ok(Some(Ok(frame))) => frame,
        };
        // Trailers carry no body bytes.
        let Ok(data) = frame.into_data() else { continue };
        if whole.len() + data.len() > MESSAGE_BYTES_MAX {
            let read = (whole.len() + data.len()) as u64;
            return Err(BodyError::TooLarge { rest: body, read });
        }
        whole.extend_from_slice(&data);
    }
}

/// Reads what is left of a refused body and lets it go, up to [`BODY_DRAIN_BYTES_MAX`] in all
/// and within [`READ_MS_MAX`]; dropping the body then closes the connection.
async fn drain(mut body: Incoming, mut read: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(READ_MS_MAX);
    while read <= BODY_DRAIN_BYTES_MAX {
        match tokio::time::timeout_at(deadline, body.frame()).await {
            Ok(Some(Ok(frame))) => {
                read += frame.data_ref().map_or(0, |data| data.len() as u64);
            }
            _ => return,
        }
    }
}

fn too_large() -> Response<Body> {
    json(StatusCode::PAYLOAD_TOO_LARGE, &message::too_long(MESSAGE_BYTES_MAX), true)
}

/// Whether the request says its body is JSON (the SDK answers 415 otherwise).
fn is_json(headers: &hyper::HeaderMap) -> bool {
    headers.get(hyper::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|value| {
        value.split(';').next().is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
    })
}

/// Whether the request accepts both JSON and an event stream (the SDK answers 406 otherwise).
fn accepts_both(headers: &hyper::HeaderMap) -> bool {
    let accepted: Vec<String> = headers
        .get_all(hyper::header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|item| item.split(';').next())
        .map(|essence| essence.trim().to_ascii_lowercase())
        .collect();
    accepted.iter().any(|a| a == "application/json") && accepted.iter().any(|a| a == "text/event-stream")
}

/// A JSON-RPC error as the whole answer; `close` when the connection is not worth keeping.
fn json(status: StatusCode, body: &Value, close: bool) -> Response<Body> {
    let mut response = Response::new(http_body_util::Either::Right(Full::new(Bytes::from(body.to_string()))));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/json"));
    if close {
        headers.insert(hyper::header::CONNECTION, hyper::header::HeaderValue::from_static("close"));
    }
    response
}

fn plain(status: StatusCode, text: &'static str) -> Response<Body> {
    let mut response =
        Response::new(http_body_util::Either::Right(Full::new(Bytes::from_static(text.as_bytes()))));
    *response.status_mut() = status;
    response
}
