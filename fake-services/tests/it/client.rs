//! A deliberately plain HTTP/1.1 client over a raw socket, so a test sees exactly how a
//! request ended: an answer, a reset, a close without a byte, or nothing before its timeout.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use fake_services::{Fake, Fakes, Server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use vocabulary::ManualClock;
use vocabulary::TokioClock;

/// What the caller saw.
#[derive(Debug, Clone, PartialEq)]
pub enum Seen {
    Answer { status: u16, headers: Vec<(String, String)>, body: String },
    Reset,
    Closed,
    Timeout,
}

impl Seen {
    pub fn status(&self) -> Option<u16> {
        match self {
            Seen::Answer { status, .. } => Some(*status),
            _ => None,
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        match self {
            Seen::Answer { headers, .. } => {
                headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
            }
            _ => None,
        }
    }

    pub fn json(&self) -> serde_json::Value {
        match self {
            Seen::Answer { body, .. } => serde_json::from_str(body).unwrap_or(serde_json::Value::Null),
            _ => serde_json::Value::Null,
        }
    }
}

/// A request to send.
#[derive(Debug, Clone, Default)]
pub struct Req {
    pub method: &'static str,
    pub target: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Req {
    pub fn new(method: &'static str, target: impl Into<String>) -> Self {
        Req { method, target: target.into(), ..Req::default() }
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// A Stripe-style refund create.
    pub fn refund(form: &str) -> Self {
        Req::new("POST", "/v1/refunds")
            .header("Authorization", "Bearer sk_test_x")
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(form.as_bytes().to_vec())
    }

    /// A workspace create.
    pub fn workspace(external_id: &str) -> Self {
        Req::new("POST", "/v1/workspaces")
            .header("Content-Type", "application/json")
            .body(serde_json::json!({"external_id": external_id, "name": "Acme"}).to_string().into_bytes())
    }

    /// A Resend send to `to`, with a plain-text body.
    pub fn email(to: &str) -> Self {
        Req::new("POST", "/emails")
            .header("Authorization", "Bearer re_test_x")
            .header("Content-Type", "application/json")
            .body(
                serde_json::json!({"from": "Acme <billing@acme.example>", "to": to, "subject": "Invoice 42", "text": "Your invoice."})
                    .to_string()
                    .into_bytes(),
            )
    }

    /// A read of `address`'s inbox through the messages fake's test mailbox.
    pub fn mailbox(address: &str) -> Self {
        Req::new("GET", format!("/mailboxes/{address}/messages"))
    }

    pub fn key(self, key: &str) -> Self {
        self.header("Idempotency-Key", key)
    }

    pub fn authorized(self) -> Self {
        self.header("Authorization", "Bearer sk_test_x")
    }
}

/// The longest a hasty caller waits for its request to reach the fake at all.
const ARRIVAL_MS_MAX: u64 = 10_000;

/// A caller with a short timeout, for faults that hold the reply: sends `req` and gives up
/// `hasty_ms` after `fake` has the request in its journal. The wait is counted from the
/// arrival, not from the send: on a loaded machine a timeout counted from the send can run out
/// before the fake has read the request, and the fault meant for it then hits the next one.
pub async fn send_hasty(addr: SocketAddr, req: &Req, fake: &Fake, hasty_ms: u64) -> Seen {
    let before = fake.journal().len();
    let owned = req.clone();
    let mut exchange = tokio::spawn(async move { send(addr, &owned, ARRIVAL_MS_MAX + hasty_ms).await });
    let deadline = tokio::time::Instant::now() + Duration::from_millis(ARRIVAL_MS_MAX);
    while fake.journal().len() <= before && !exchange.is_finished() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} {} did not reach the fake within {ARRIVAL_MS_MAX} ms",
            req.method,
            req.target
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    match tokio::time::timeout(Duration::from_millis(hasty_ms), &mut exchange).await {
        Ok(seen) => seen.expect("the exchange's task"),
        Err(_) => {
            // Dropping the connection is the caller giving up.
            exchange.abort();
            Seen::Timeout
        }
    }
}

/// Sends one request on a fresh connection and reads until the server closes it.
pub async fn send(addr: SocketAddr, req: &Req, timeout_ms: u64) -> Seen {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await.expect("the fake listens");
        let mut head =
            format!("{} {} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n", req.method, req.target);
        for (name, value) in &req.headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str(&format!("Content-Length: {}\r\n\r\n", req.body.len()));
        if stream.write_all(head.as_bytes()).await.is_err() || stream.write_all(&req.body).await.is_err() {
            return Seen::Reset;
        }
        let mut raw = Vec::new();
        match stream.read_to_end(&mut raw).await {
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => Seen::Reset,
            Err(e) => panic!("unexpected read error: {e}"),
            Ok(_) if raw.is_empty() => Seen::Closed,
            Ok(_) => parse(&raw),
        }
    };
    tokio::time::timeout(Duration::from_millis(timeout_ms), exchange).await.unwrap_or(Seen::Timeout)
}

fn parse(raw: &[u8]) -> Seen {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").expect("a complete HTTP head");
    let mut lines = head.lines();
    let status_line = lines.next().expect("a status line");
    let status = status_line.split(' ').nth(1).and_then(|s| s.parse().ok()).expect("a status code");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Seen::Answer { status, headers, body: body.to_string() }
}

/// The fakes on loopback, one server each.
pub struct Running {
    pub fakes: Fakes,
    pub servers: Vec<Server>,
}

impl Running {
    pub async fn start(seed: u64) -> Running {
        let fakes = Fakes::new(Arc::new(TokioClock::from_wall_clock()), seed);
        let mut servers = Vec::new();
        for fake in fakes.all() {
            servers.push(Server::start(fake, "127.0.0.1:0".parse().unwrap()).await.unwrap());
        }
        fakes.payments.seed_payment_intent(Some("pi_1"), 5_000, "usd").unwrap();
        Running { fakes, servers }
    }

    pub fn addr(&self, service: &str) -> SocketAddr {
        self.servers.iter().find(|s| s.name() == service).expect("a known service").addr()
    }

    pub fn fake(&self, service: &str) -> Fake {
        self.fakes.get(service).expect("a known service")
    }
}

/// Fakes on a clock that moves only when told, for in-process tests.
pub fn manual_fakes(seed: u64) -> (Fakes, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(1_767_225_600_000));
    let fakes = Fakes::new(clock.clone(), seed);
    fakes.payments.seed_payment_intent(Some("pi_1"), 5_000, "usd").unwrap();
    (fakes, clock)
}
