//! MCP over streamable HTTP (`POST /mcp`, with sessions), the SDK's service on hyper, one
//! task per connection, for `twice serve --mcp-port` and `twice mcp --mcp-port`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::TcpListener;

use super::Server;
use crate::serve::world::World;

/// The path the MCP endpoint answers at.
pub const PATH: &str = "/mcp";

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
    let mut config = StreamableHttpServerConfig::default();
    let token = config.cancellation_token.clone();
    let stop: Box<dyn FnOnce() + Send> = Box::new(move || token.cancel());
    if !addr.ip().is_loopback() {
        // Beyond loopback only with --allow-remote (checked by serve): the Host header may
        // then name the address it listens on.
        config.allowed_hosts.push(addr.ip().to_string());
    }
    let service = StreamableHttpService::new(
        move || Ok(Server::new(Arc::clone(&world), timeout_ms, super::Transport::Http)),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let accept = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let service = service.clone();
            tokio::spawn(async move {
                let handler =
                    hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                        let service = service.clone();
                        async move {
                            if request.uri().path() != PATH {
                                return Ok::<_, Infallible>(not_found());
                            }
                            Ok(service.handle(request).await.map(http_body_util::Either::Left))
                        }
                    });
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, handler).await;
            });
        }
    });
    Ok(McpHttp { url: format!("http://{local}{PATH}"), stop, accept })
}

type Body = http_body_util::Either<
    http_body_util::combinators::BoxBody<bytes::Bytes, Infallible>,
    http_body_util::Full<bytes::Bytes>,
>;

fn not_found() -> hyper::Response<Body> {
    let mut response = hyper::Response::new(http_body_util::Either::Right(http_body_util::Full::new(
        bytes::Bytes::from_static(b"not found: the MCP endpoint is POST /mcp\n"),
    )));
    *response.status_mut() = hyper::StatusCode::NOT_FOUND;
    response
}
