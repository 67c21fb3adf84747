//! The fakes' only outgoing socket code: one HTTP/1.1 POST to an app's endpoint (a webhook
//! delivery), bounded in time, over plain HTTP. `server.rs` holds the incoming side.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::Request;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// At most this much of an endpoint's answer is read; the rest is let go (only its status
/// matters).
pub(crate) const ANSWER_BYTES_MAX: usize = 64 * 1024;

/// POSTs `body` to `url` (`http://host[:port]/path`) with `headers`, and answers the status,
/// or why there is none (refused, reset, not answered within `timeout_ms`).
pub(crate) async fn post(
    url: &str,
    headers: &[(String, String)],
    body: String,
    timeout_ms: u64,
) -> Result<u16, String> {
    match tokio::time::timeout(Duration::from_millis(timeout_ms), send(url, headers, body)).await {
        Ok(answer) => answer,
        Err(_) => Err(format!("no answer within {timeout_ms} ms")),
    }
}

async fn send(url: &str, headers: &[(String, String)], body: String) -> Result<u16, String> {
    let uri: http::Uri = url.parse().map_err(|e| format!("bad URL {url:?}: {e}"))?;
    let host = uri.host().ok_or_else(|| format!("URL {url:?} has no host"))?;
    let port = uri.port_u16().unwrap_or(80);
    let stream = TcpStream::connect((host.trim_start_matches('[').trim_end_matches(']'), port))
        .await
        .map_err(|e| format!("could not connect to {host}:{port}: {e}"))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("HTTP handshake with {host}:{port} failed: {e}"))?;
    // Ends when the exchange does, or when this future is dropped (the timeout).
    let connection = tokio::spawn(connection);
    let authority = uri.authority().map_or_else(|| host.to_string(), |a| a.to_string());
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let mut request = Request::post(path).header(http::header::HOST, authority);
    for (name, value) in headers {
        request = request.header(name.as_str(), value.as_str());
    }
    let request = request.body(Full::new(Bytes::from(body))).map_err(|e| format!("bad request: {e}"))?;
    let answer = sender.send_request(request).await;
    let result = match answer {
        Ok(response) => {
            let status = response.status().as_u16();
            // Read (a bounded part of) the answer so that the connection ends cleanly.
            let _ = Limited::new(response.into_body(), ANSWER_BYTES_MAX).collect().await;
            Ok(status)
        }
        Err(e) => Err(format!("the endpoint did not answer: {e}")),
    };
    connection.abort();
    result
}

#[cfg(test)]
mod tests {
    use tokio::net::TcpListener;

    use super::*;

    /// An endpoint that takes the connection and never answers: the attempt ends at its bound
    /// (`DELIVERY_TIMEOUT_MS` in the fake; shorter here), as "no answer in time".
    #[tokio::test]
    async fn an_endpoint_that_never_answers_ends_the_attempt_at_its_bound() {
        let socket = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hooks", socket.local_addr().unwrap());
        let held = tokio::spawn(async move {
            let (stream, _) = socket.accept().await.unwrap();
            tokio::time::sleep(Duration::from_secs(30)).await;
            drop(stream);
        });
        let started = std::time::Instant::now();
        let answer = post(&url, &[], "{}".into(), 200).await;
        assert_eq!(answer, Err("no answer within 200 ms".to_string()));
        assert!(started.elapsed() < Duration::from_secs(10), "bounded: {:?}", started.elapsed());
        held.abort();
    }

    #[tokio::test]
    async fn a_refused_connection_says_so() {
        let closed = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
        let answer = post(&format!("http://{closed}/hooks"), &[], "{}".into(), 5_000).await;
        assert!(answer.as_ref().is_err_and(|e| e.contains("could not connect")), "{answer:?}");
    }
}
