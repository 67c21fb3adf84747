//! Requests and answers, independent of any socket.
//!
//! A fake turns a [`FakeRequest`] into a [`Disposition`]. The loopback HTTP server in
//! [`crate::server`] is one transport; an in-process caller (the sim driver) is another. A
//! disposition can be an answer, or one of the two ways a connection ends without one.

use bytes::Bytes;
use http::HeaderMap;

/// Largest request body a fake reads, unless the fake allows more (see
/// [`crate::Fake::body_bytes_max`]); a larger one is answered 413 in the service's shape.
pub const BODY_BYTES_MAX: usize = 1024 * 1024;

/// What [`FakeResponse::json_of`] reserves for a body.
const BODY_BYTES_GUESS: usize = 512;

/// One request, already read off whatever transport carried it.
#[derive(Debug, Clone, Default)]
pub struct FakeRequest {
    pub method: String,
    /// The path without the query string.
    pub path: String,
    /// The raw query string, without `?`.
    pub query: String,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// Who sent it, as the transport that carried it knows: the label of the listener it
    /// arrived on (the harness gives each worker life its own, e.g. `w1#2`), or of the
    /// in-process caller. Never read from the request itself, so a caller cannot claim
    /// another's identity. `None` where the transport does not label.
    pub origin: Option<String>,
}

impl FakeRequest {
    /// A request with no headers and no body; `target` may carry a query string.
    pub fn new(method: &str, target: &str) -> Self {
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        FakeRequest {
            method: method.to_string(),
            path: path.to_string(),
            query: query.to_string(),
            headers: HeaderMap::new(),
            body: Bytes::new(),
            origin: None,
        }
    }

    /// Adds a header; a name or value that HTTP cannot carry is left out, as a real
    /// transport would never deliver it.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        if let (Ok(n), Ok(v)) = (
            http::header::HeaderName::from_bytes(name.as_bytes()),
            http::header::HeaderValue::from_str(value),
        ) {
            self.headers.append(n, v);
        }
        self
    }

    pub fn body(mut self, body: impl Into<Bytes>) -> Self {
        self.body = body.into();
        self
    }

    /// Labels the request with who sent it (see [`FakeRequest::origin`]).
    pub fn origin(mut self, origin: impl Into<String>) -> Self {
        self.origin = Some(origin.into());
        self
    }

    /// The header's value as text, if present and printable.
    pub fn header_str(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Query parameters, decoded, in order.
    pub fn query_pairs(&self) -> Vec<(String, String)> {
        form_urlencoded::parse(self.query.as_bytes()).into_owned().collect()
    }
}

/// An answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
}

impl FakeResponse {
    pub fn json(status: u16, value: &serde_json::Value) -> Self {
        FakeResponse::json_of(status, value)
    }

    /// An answer whose body is `value` as JSON, written straight from it (a typed answer needs
    /// no `serde_json::Value` tree first).
    pub fn json_of<T: serde::Serialize + ?Sized>(status: u16, value: &T) -> Self {
        // Most answers fit; one allocation instead of growing from serde_json's 128 bytes.
        let mut body = Vec::with_capacity(BODY_BYTES_GUESS);
        // Writing to a Vec fails only for a map whose keys are not strings, which no answer
        // has; an empty object is still valid JSON should one ever do.
        if serde_json::to_writer(&mut body, value).is_err() {
            body = b"{}".to_vec();
        }
        FakeResponse {
            status,
            // Room for the headers the pipeline adds (request id, idempotency key, replay).
            headers: {
                let mut headers = Vec::with_capacity(4);
                headers.push(("content-type".into(), "application/json".into()));
                headers
            },
            // Exactly as long as the body: answers are kept (idempotency keys replay them),
            // and a boxed slice becomes `Bytes` without a shared header to allocate.
            body: Bytes::from(body.into_boxed_slice()),
        }
    }

    pub fn with_header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    /// The first value of a header, by case-insensitive name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The body as JSON, when it is JSON.
    pub fn body_json(&self) -> Option<serde_json::Value> {
        serde_json::from_slice(&self.body).ok()
    }
}

/// How a request ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Disposition {
    /// An answer is sent.
    Respond(FakeResponse),
    /// The connection is reset (RST) without an answer.
    Reset,
    /// The connection is closed (FIN) without a byte of answer.
    Close,
}

impl Disposition {
    /// The answer, if there is one.
    pub fn response(&self) -> Option<&FakeResponse> {
        match self {
            Disposition::Respond(r) => Some(r),
            _ => None,
        }
    }
}
