//! The servers under measurement besides the wiremock stub: the payments and files fakes on
//! the shared runtime, bare hyper answering a fixed body, and the payments fake on a
//! current-thread runtime of its own.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fake_services::{Bounds, Fake, Fakes, Server};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use vocabulary::TokioClock;

use crate::{BARE_BODY, Result, SEED};

/// A fake without the bounds of what it holds: a measuring window sends more requests than a
/// run ever does (hundreds of thousands), and the bounds would refuse them.
pub(super) fn unbounded(fake: Fake) -> Fake {
    fake.set_bounds(Bounds {
        journal_entries_max: usize::MAX,
        ledger_effects_max: usize::MAX,
        keys_max: usize::MAX,
        seeded_objects_max: usize::MAX,
    });
    fake
}

pub(super) async fn start_fake() -> Result<(Server, Fake)> {
    let fakes = Fakes::new(Arc::new(TokioClock::from_wall_clock()), SEED);
    let fake = unbounded(Fake::Payments(fakes.payments));
    let server = Server::start(fake.clone(), "127.0.0.1:0".parse()?).await?;
    Ok((server, fake))
}

pub(super) async fn start_files() -> Result<(Server, Fake)> {
    let fakes = Fakes::new(Arc::new(TokioClock::from_wall_clock()), SEED);
    let fake = unbounded(Fake::Files(fakes.files));
    let server = Server::start(fake.clone(), "127.0.0.1:0".parse()?).await?;
    Ok((server, fake))
}

/// Bare hyper on the same transport setup as `fake_services::server`, answering a fixed body.
pub(super) struct BareServer {
    pub(super) addr: SocketAddr,
    pub(super) task: JoinHandle<()>,
}

impl BareServer {
    pub(super) async fn start() -> Result<BareServer> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            loop {
                match listener.accept().await {
                    Ok((stream, _)) => {
                        tokio::spawn(serve_bare(stream));
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                }
            }
        });
        Ok(BareServer { addr, task })
    }
}

/// The payments fake served by a current-thread tokio runtime on a std thread of its own, the
/// way wiremock serves a `MockServer`.
pub(super) struct OneThreadFake {
    pub(super) addr: SocketAddr,
    pub(super) fake: Fake,
    stop: tokio::sync::oneshot::Sender<()>,
    thread: std::thread::JoinHandle<Result<()>>,
}

impl OneThreadFake {
    pub(super) async fn start() -> Result<OneThreadFake> {
        let fakes = Fakes::new(Arc::new(TokioClock::from_wall_clock()), SEED);
        let fake = unbounded(Fake::Payments(fakes.payments));
        let served = fake.clone();
        let (started, addr) = tokio::sync::oneshot::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread =
            std::thread::Builder::new().name("payments-fake".into()).spawn(move || -> Result<()> {
                let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
                runtime.block_on(async move {
                    // `Server::start` spawns its accept loop and connections on the runtime it is
                    // called from: this one.
                    let server = Server::start(served, "127.0.0.1:0".parse()?).await?;
                    started.send(server.addr()).map_err(|_| "the bench stopped waiting")?;
                    let _ = stopped.await;
                    server.stop().await;
                    Ok(())
                })
            })?;
        match addr.await {
            Ok(addr) => Ok(OneThreadFake { addr, fake, stop, thread }),
            Err(_) => match thread.join() {
                Ok(Err(e)) => Err(format!("the one-thread fake did not start: {e}").into()),
                _ => Err("the one-thread fake did not start".into()),
            },
        }
    }

    pub(super) async fn stop(self) -> Result<()> {
        let _ = self.stop.send(());
        let thread = self.thread;
        match tokio::task::spawn_blocking(move || thread.join()).await? {
            Ok(served) => served,
            Err(_) => Err("the one-thread fake's thread panicked".into()),
        }
    }
}

async fn serve_bare(stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let service = service_fn(|request: Request<Incoming>| async move {
        // Read the body as the fake does, so both do the same transport work.
        request.into_body().collect().await?;
        let mut response = Response::new(Full::new(Bytes::from_static(BARE_BODY)));
        response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        Ok::<_, hyper::Error>(response)
    });
    let _ = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_millis(fake_services::server::HEADER_READ_MS_MAX))
        .keep_alive(true)
        .serve_connection(TokioIo::new(stream), service)
        .await;
}
