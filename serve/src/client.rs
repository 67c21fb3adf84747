//! A plain HTTP/1 client on hyper, for the harness's own requests to the fakes and to serve:
//! one connection per exchange, the whole exchange within a bound, and a failure that says
//! how far the request got (never connected, or sent and then no answer), which is what an
//! MCP tool reports as the error a real client library would have met.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;

/// Largest answer body read; a longer one is an error, not a truncation.
pub const ANSWER_BYTES_MAX: usize = 16 * 1024 * 1024;

/// One request.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: &'static str,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub timeout_ms: u64,
}

/// A status, the headers (lowercase names) and the whole body.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
}

impl Answer {
    /// The first value of header `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// How an exchange failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// Nothing was sent: the URL is bad or the connection could not be made.
    #[error("{0}")]
    NotSent(String),
    /// The request may have been sent, and the connection ended before a whole answer came.
    #[error("{0}")]
    Closed(String),
    /// No whole answer within the bound.
    #[error("no answer within {0} ms")]
    TimedOut(u64),
}

/// Sends `request` on a new connection and reads the whole answer.
pub async fn exchange(request: Request) -> Result<Answer, ClientError> {
    let uri: hyper::Uri =
        request.url.parse().map_err(|e| ClientError::NotSent(format!("bad URL {}: {e}", request.url)))?;
    let host =
        uri.host().ok_or_else(|| ClientError::NotSent(format!("no host in {}", request.url)))?.to_string();
    let port = uri.port_u16().unwrap_or(80);
    let timeout_ms = request.timeout_ms;
    let work = async move {
        let stream = tokio::net::TcpStream::connect((host.as_str(), port))
            .await
            .map_err(|e| ClientError::NotSent(format!("cannot connect to {host}:{port}: {e}")))?;
        let _ = stream.set_nodelay(true);
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| ClientError::NotSent(format!("handshake with {host}:{port}: {e}")))?;
        let driver = tokio::spawn(connection);
        let path = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
        let mut builder = hyper::Request::builder()
            .method(request.method)
            .uri(path)
            .header("host", format!("{host}:{port}"));
        for (name, value) in &request.headers {
            builder = builder.header(name.as_str(), value.as_str());
        }
        let outgoing = builder
            .body(Full::new(Bytes::from(request.body)))
            .map_err(|e| ClientError::NotSent(format!("cannot build the request: {e}")))?;
        // From here on the request may have left: every failure is "closed", never "not sent".
        let response =
            sender.send_request(outgoing).await.map_err(|e| ClientError::Closed(closed_reason(&e)))?;
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(n, v)| (n.as_str().to_string(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
            .collect();
        let body = http_body_util::Limited::new(response.into_body(), ANSWER_BYTES_MAX)
            .collect()
            .await
            .map_err(|e| ClientError::Closed(format!("the answer's body broke off: {e}")))?
            .to_bytes();
        driver.abort();
        Ok(Answer { status, headers, body })
    };
    tokio::time::timeout(Duration::from_millis(timeout_ms), work)
        .await
        .map_err(|_| ClientError::TimedOut(timeout_ms))?
}

/// hyper's words for a connection that ended, in a client library's: the peer closed it or
/// reset it before a whole answer.
fn closed_reason(error: &hyper::Error) -> String {
    if error.is_incomplete_message() {
        "the connection was closed before a response was received".into()
    } else {
        format!("the connection failed before a response was received: {error}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_refused_connection_is_not_sent_and_a_silent_server_times_out() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
        let port = listener.local_addr().expect("an address").port();
        drop(listener);
        let request = |timeout_ms| Request {
            method: "GET",
            url: format!("http://127.0.0.1:{port}/"),
            headers: vec![],
            body: vec![],
            timeout_ms,
        };
        assert!(matches!(exchange(request(2_000)).await, Err(ClientError::NotSent(_))));
        // Accepts, reads, never answers.
        let silent = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.expect("the port again");
        let held = tokio::spawn(async move {
            let (socket, _) = silent.accept().await.expect("a connection");
            tokio::time::sleep(Duration::from_secs(5)).await;
            drop(socket);
        });
        assert_eq!(exchange(request(200)).await.unwrap_err(), ClientError::TimedOut(200));
        held.abort();
    }

    #[tokio::test]
    async fn a_connection_closed_after_the_request_is_closed_not_unsent() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let port = listener.local_addr().expect("an address").port();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.expect("a connection");
            let mut buffer = [0u8; 1024];
            let _ = tokio::io::AsyncReadExt::read(&mut socket, &mut buffer).await;
            drop(socket);
        });
        let answer = exchange(Request {
            method: "POST",
            url: format!("http://127.0.0.1:{port}/v1/refunds"),
            headers: vec![],
            body: b"a=1".to_vec(),
            timeout_ms: 5_000,
        })
        .await;
        assert!(matches!(answer, Err(ClientError::Closed(_))), "{answer:?}");
    }
}
