//! The executor process's one listening socket: webhook deliveries, over HTTP/1.1 on loopback,
//! each handed to [`Executor::receive_webhook`] and answered with its status. Bound at `init`
//! on a port the OS picks; the endpoint registered with the payments API names it.

use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::net::TcpListener;

use crate::intent_engine::Executor;

/// The path deliveries are posted to.
pub const WEBHOOK_PATH: &str = "/webhooks";
/// The largest delivery read; a larger one is refused (Stripe's events are a few KiB).
pub const DELIVERY_BYTES_MAX: usize = 1024 * 1024;

/// Binds `127.0.0.1:0` and serves deliveries to `executor` until the process ends; returns
/// the endpoint's URL. Must be called inside the runtime.
pub fn listen(executor: Arc<Executor>) -> std::io::Result<String> {
    let socket = std::net::TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))?;
    socket.set_nonblocking(true)?;
    let address = socket.local_addr()?;
    let listener = TcpListener::from_std(socket)?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let executor = Arc::clone(&executor);
            tokio::spawn(async move {
                let service = service_fn(move |request| answer(Arc::clone(&executor), request));
                // A connection that breaks is the sender's to retry.
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(format!("http://{address}{WEBHOOK_PATH}"))
}

async fn answer(
    executor: Arc<Executor>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if request.method() != hyper::Method::POST || request.uri().path() != WEBHOOK_PATH {
        return Ok(reply(404, "only POST /webhooks is served here"));
    }
    let signature = request
        .headers()
        .get(vocabulary::webhook::SIGNATURE_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = match Limited::new(request.into_body(), DELIVERY_BYTES_MAX).collect().await {
        Ok(body) => body.to_bytes(),
        Err(e) => return Ok(reply(413, &format!("a delivery of at most {DELIVERY_BYTES_MAX} bytes: {e}"))),
    };
    let answered = executor.receive_webhook(signature.as_deref(), &body).await;
    Ok(reply(answered.status, &answered.note))
}

fn reply(status: u16, note: &str) -> Response<Full<Bytes>> {
    let body = json!({"note": note}).to_string();
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() =
        hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    response
        .headers_mut()
        .insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/json"));
    response
}
