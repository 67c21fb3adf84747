//! How a sim worker reaches the fakes: [`SimTransport`] hands each request to the fake as its
//! own task and implements the request points (a crash point keeps the reply from ever
//! arriving; a pause point holds it until the worker is resumed).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use executor::world::{HttpRequest, HttpResponse, SendError, SendFuture, Transport};
use fake_services::{Disposition, Fake, FakeRequest};
use scenarios::{EventAction, Scenario};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::points::RequestPoints;

/// The host a service has in sim URLs: `http://payments.sim`.
pub(super) fn sim_url(service: &str) -> String {
    format!("http://{service}.sim")
}

/// What a request that reached a point must do before its reply may go back.
#[derive(Debug, Default)]
struct Trip {
    events: Vec<usize>,
    /// A crash of the requesting worker: the reply never arrives.
    crash_self: bool,
    /// A pause of the requesting worker: the reply waits for the resume.
    pause_self: bool,
}

/// The request points of a run, and which events crash or pause which worker.
pub(super) struct Points {
    points: RequestPoints,
    /// Per event index: `(kind, worker)` for crash and pause events.
    targets: BTreeMap<usize, (&'static str, String)>,
}

impl Points {
    pub(super) fn new(scenario: &Scenario) -> Points {
        let mut targets = BTreeMap::new();
        for (i, event) in scenario.events.iter().enumerate() {
            match &event.action {
                EventAction::Crash { worker } => {
                    targets.insert(i, ("crash", worker.clone()));
                }
                EventAction::Pause { worker, .. } => {
                    targets.insert(i, ("pause", worker.clone()));
                }
                _ => {}
            }
        }
        Points { points: RequestPoints::new(scenario), targets }
    }

    fn on_request(&self, worker: &str, service: &str, method: &str, path: &str) -> Trip {
        let mut trip = Trip::default();
        for i in self.points.reached(service, method, path) {
            match self.targets.get(&i) {
                Some(("crash", w)) if w == worker => trip.crash_self = true,
                Some(("pause", w)) if w == worker => trip.pause_self = true,
                _ => {}
            }
            trip.events.push(i);
        }
        trip
    }
}

/// One worker's way to the fakes.
pub struct SimTransport {
    pub(super) worker: String,
    /// `worker#incarnation`: the origin every request of this life carries.
    pub(super) origin: String,
    pub(super) fakes: BTreeMap<String, Fake>,
    pub(super) points: Arc<Points>,
    pub(super) trips: mpsc::UnboundedSender<Vec<usize>>,
    /// While the worker is paused: since when.
    pub(super) paused: watch::Sender<Option<Instant>>,
}

impl SimTransport {
    /// Waits until the worker runs. A pause takes hold after the instant it began: what the
    /// worker set out to send at that very instant (a batch of concurrent requests, the
    /// first of which reached the point) still leaves, as it would have left a real process
    /// before the SIGSTOP landed.
    async fn wait_while_paused(&self) {
        let now = Instant::now();
        let mut rx = self.paused.subscribe();
        // A closed channel means the run is over; go on rather than hang.
        let _ = rx.wait_for(|paused| paused.is_none_or(|since| since == now)).await;
    }
}

impl Transport for SimTransport {
    fn send(&self, request: HttpRequest) -> SendFuture<'_> {
        Box::pin(async move {
            self.wait_while_paused().await;
            let rest = request.url.strip_prefix("http://").unwrap_or(&request.url);
            let (host, target) =
                rest.split_once('/').map(|(h, t)| (h, format!("/{t}"))).unwrap_or((rest, "/".into()));
            let service = host.strip_suffix(".sim").unwrap_or(host);
            let Some(fake) = self.fakes.get(service).cloned() else {
                return Err(SendError::NotSent(format!("no service at {host}")));
            };
            let mut fake_request =
                FakeRequest::new(request.method, &target).body(request.body.clone()).origin(&self.origin);
            for (name, value) in &request.headers {
                fake_request = fake_request.header(name, value);
            }
            let trip = self.points.on_request(&self.worker, service, request.method, &fake_request.path);
            // The fake works on its own task, like a server: it finishes even if the caller
            // is dropped (crashed) or gives up (timed out).
            let handled = tokio::spawn(async move { fake.handle(fake_request).await });
            if trip.pause_self {
                self.paused.send_replace(Some(Instant::now()));
            }
            if !trip.events.is_empty() {
                let _ = self.trips.send(trip.events);
            }
            if trip.crash_self {
                // The worker is about to be killed: its reply never arrives.
                std::future::pending::<()>().await;
            }
            self.exchange(handled, request.timeout_ms).await
        })
    }
}

impl SimTransport {
    /// Waits for the fake's answer as a process would that may be stopped meanwhile: a stopped
    /// process notices neither its timer nor the reply until it runs again, and then takes the
    /// reply if one has come (even past its timeout, as a socket read that finds data waiting
    /// returns it), else the timeout. The live driver's gates give the same order on real
    /// sockets: the reply is written only once the stop has taken hold.
    async fn exchange(
        &self,
        handled: tokio::task::JoinHandle<Disposition>,
        timeout_ms: u64,
    ) -> Result<HttpResponse, SendError> {
        let mut handled = handled;
        let mut paused = self.paused.subscribe();
        let deadline = tokio::time::sleep(Duration::from_millis(timeout_ms));
        tokio::pin!(deadline);
        let mut reply: Option<Result<HttpResponse, SendError>> = None;
        let mut expired = false;
        loop {
            if paused.borrow_and_update().is_none() {
                if let Some(reply) = reply.take() {
                    return reply;
                }
                if expired {
                    return Err(SendError::Ambiguous(format!("no answer within {timeout_ms} ms")));
                }
            }
            // Biased: the reply before the timer, so that a tie goes to the reply.
            tokio::select! {
                biased;
                done = &mut handled, if reply.is_none() => reply = Some(match done {
                    Ok(Disposition::Respond(r)) => {
                        Ok(HttpResponse { status: r.status, headers: r.headers, body: r.body.to_vec() })
                    }
                    Ok(Disposition::Reset) => Err(SendError::Ambiguous("connection reset by peer".into())),
                    Ok(Disposition::Close) => {
                        Err(SendError::Ambiguous("connection closed before an answer".into()))
                    }
                    Err(e) => Err(SendError::Ambiguous(format!("the fake failed: {e}"))),
                }),
                () = &mut deadline, if !expired => expired = true,
                // The sender lives in this transport, so the channel cannot close under us.
                _ = paused.changed() => {}
            }
        }
    }
}
