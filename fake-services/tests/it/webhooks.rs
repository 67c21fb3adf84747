//! Webhook endpoints and deliveries, over real HTTP on loopback both ways: an app registers an
//! endpoint, the payments fake POSTs each event the endpoint enables, signed as Stripe signs,
//! retries what is not answered 2xx on its backoff, gives up after the last attempt, and counts
//! what is still to send as pending work.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use fake_services::payments::{ATTEMPTS_MAX, sign_webhook};
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpListener;

use crate::client::{Req, Running, send};

/// One delivery as the app's endpoint received it.
#[derive(Debug, Clone)]
struct Received {
    path: String,
    signature: String,
    content_type: String,
    user_agent: String,
    body: String,
}

/// An app's endpoint on loopback that records what it receives and answers each delivery with
/// the next status of its script (200 once the script is spent).
struct Receiver {
    addr: SocketAddr,
    received: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    async fn start(script: Vec<u16>) -> Receiver {
        let socket = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = socket.local_addr().unwrap();
        let received = Arc::new(Mutex::new(Vec::new()));
        let script = Arc::new(Mutex::new(script.into_iter()));
        let (log, statuses) = (received.clone(), script.clone());
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = socket.accept().await else { return };
                let (log, statuses) = (log.clone(), statuses.clone());
                tokio::spawn(async move {
                    let service = service_fn(move |req: Request<hyper::body::Incoming>| {
                        let (log, statuses) = (log.clone(), statuses.clone());
                        async move {
                            let header = |name: &str| {
                                req.headers()
                                    .get(name)
                                    .and_then(|v| v.to_str().ok())
                                    .unwrap_or_default()
                                    .to_string()
                            };
                            let (signature, content_type, user_agent) =
                                (header("stripe-signature"), header("content-type"), header("user-agent"));
                            let path = req.uri().path().to_string();
                            let body = req.into_body().collect().await.unwrap().to_bytes();
                            log.lock().unwrap().push(Received {
                                path,
                                signature,
                                content_type,
                                user_agent,
                                body: String::from_utf8(body.to_vec()).unwrap(),
                            });
                            let status = statuses.lock().unwrap().next().unwrap_or(200);
                            Ok::<_, Infallible>(
                                Response::builder()
                                    .status(status)
                                    .body(Full::new(Bytes::from_static(b"{}")))
                                    .unwrap(),
                            )
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Receiver { addr, received }
    }

    fn url(&self) -> String {
        format!("http://{}/hooks/stripe", self.addr)
    }

    fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// Waits (at most 20 s) until `n` deliveries arrived.
    async fn wait_for(&self, n: usize) -> Vec<Received> {
        let start = Instant::now();
        while self.received().len() < n {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "only {:?} of {n} deliveries arrived",
                self.received()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.received()
    }
}

async fn stripe(running: &Running, method: &'static str, target: &str, form: &str) -> (u16, Value) {
    let req = Req::new(method, target)
        .header("Authorization", "Bearer sk_test_x")
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(form.as_bytes().to_vec());
    let seen = send(running.addr("payments"), &req, 10_000).await;
    (seen.status().unwrap(), seen.json())
}

async fn register(running: &Running, url: &str, events: &[&str]) -> Value {
    let mut form = format!("url={url}");
    for (i, e) in events.iter().enumerate() {
        form.push_str(&format!("&enabled_events[{i}]={e}"));
    }
    let (status, endpoint) = stripe(running, "POST", "/v1/webhook_endpoints", &form).await;
    assert_eq!(status, 200, "{endpoint}");
    endpoint
}

async fn webhooks_report(running: &Running) -> Value {
    send(running.addr("payments"), &Req::new("GET", "/__twice/webhooks"), 10_000).await.json()
}

/// Waits (at most 30 s) until the payments fake is settled.
async fn settle(running: &Running) {
    let start = Instant::now();
    while !running.fake("payments").settled() {
        assert!(start.elapsed() < Duration::from_secs(30), "{:?}", running.fake("payments").pending());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn an_endpoint_gets_each_event_it_enables_signed_as_stripe_signs() {
    let running = Running::start(7).await;
    let app = Receiver::start(Vec::new()).await;
    let endpoint = register(&running, &app.url(), &["payment_intent.succeeded", "charge.refunded"]).await;
    let secret = endpoint["secret"].as_str().unwrap().to_string();
    assert!(secret.starts_with("whsec_"), "{endpoint}");
    assert_eq!((&endpoint["object"], &endpoint["status"]), (&"webhook_endpoint".into(), &"enabled".into()));

    // pi_1 was seeded before the endpoint existed: its event is not sent.
    let (status, refund) = stripe(&running, "POST", "/v1/refunds", "payment_intent=pi_1&amount=1200").await;
    assert_eq!(status, 200, "{refund}");
    let (status, _) = stripe(
        &running,
        "POST",
        "/v1/payment_intents",
        "amount=900&currency=usd&payment_method=pm_card_visa&confirm=true",
    )
    .await;
    assert_eq!(status, 200);
    let received = app.wait_for(2).await;
    settle(&running).await;
    assert_eq!(app.received().len(), 2, "refund.created is not enabled, pi_1's success came before");

    let (_, events) = stripe(&running, "GET", "/v1/events?limit=10", "").await;
    let mut types = Vec::new();
    for delivery in &received {
        assert_eq!(delivery.path, "/hooks/stripe");
        assert_eq!(delivery.content_type, "application/json; charset=utf-8");
        assert!(delivery.user_agent.starts_with("Stripe/1.0"), "{}", delivery.user_agent);
        let t: u64 =
            delivery.signature.strip_prefix("t=").unwrap().split(',').next().unwrap().parse().unwrap();
        assert_eq!(
            delivery.signature,
            sign_webhook(&secret, t, &delivery.body),
            "the body is what was signed"
        );
        let wall_s = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
        assert!(t.abs_diff(wall_s) < 60, "t is the wall clock's: {t} vs {wall_s}");
        let event: Value = serde_json::from_str(&delivery.body).unwrap();
        let listed = events["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["id"] == event["id"])
            .expect("a logged event");
        assert_eq!(event["data"], listed["data"]);
        types.push(event["type"].as_str().unwrap().to_string());
    }
    types.sort();
    assert_eq!(types, ["charge.refunded", "payment_intent.succeeded"]);
}

#[tokio::test]
async fn an_attempt_not_answered_2xx_is_retried_on_the_backoff_until_one_is() {
    let running = Running::start(8).await;
    let app = Receiver::start(vec![500, 503]).await;
    register(&running, &app.url(), &["*"]).await;
    let (status, _) = stripe(&running, "POST", "/v1/refunds", "payment_intent=pi_1&amount=100").await;
    assert_eq!(status, 200);
    // refund.created and charge.refunded: the first two attempts are answered 500 and 503.
    let first = app.wait_for(2).await;
    let pending = running.fake("payments").pending();
    assert!(
        pending.iter().any(|p| p.kind.name() == "webhook" && p.detail.contains(&app.url())),
        "a delivery to retry is pending: {pending:?}"
    );
    let received = app.wait_for(4).await;
    settle(&running).await;
    assert_eq!(app.received().len(), 4, "a 2xx ends a delivery");
    let ids = |r: &[Received]| {
        let mut ids: Vec<String> = r
            .iter()
            .map(|d| serde_json::from_str::<Value>(&d.body).unwrap()["id"].as_str().unwrap().into())
            .collect();
        ids.sort();
        ids
    };
    assert_eq!(ids(&first), ids(&received[2..]), "the same events again");
    let report = webhooks_report(&running).await;
    let standings: Vec<&str> =
        report["deliveries"].as_array().unwrap().iter().map(|d| d["standing"].as_str().unwrap()).collect();
    assert_eq!(standings, ["delivered", "delivered"]);
    let statuses: Vec<u64> =
        report["attempts"].as_array().unwrap().iter().map(|a| a["status"].as_u64().unwrap()).collect();
    let mut sorted = statuses.clone();
    sorted.sort();
    assert_eq!(sorted, [200, 200, 500, 503], "{report}");
}

#[tokio::test]
async fn an_endpoint_that_never_answers_is_given_up_after_the_last_attempt() {
    let running = Running::start(9).await;
    // A port nothing listens on: every attempt is refused.
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
    register(&running, &format!("http://{closed}/gone"), &["charge.refunded"]).await;
    let (status, _) = stripe(&running, "POST", "/v1/refunds", "payment_intent=pi_1&amount=100").await;
    assert_eq!(status, 200);
    // The backoff is on the service clock: jumping it brings each retry at once.
    let start = Instant::now();
    while !running.fake("payments").settled() {
        assert!(start.elapsed() < Duration::from_secs(30), "{:?}", running.fake("payments").pending());
        running.fakes.payments.core().clock.jump_ms(5_000);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let report = webhooks_report(&running).await;
    assert_eq!(report["deliveries"][0]["standing"], "gave_up", "{report}");
    let attempts = report["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), ATTEMPTS_MAX as usize, "{report}");
    assert!(
        attempts.iter().all(|a| a["status"].is_null() && a["error"].as_str().unwrap().contains("connect"))
    );
}

#[tokio::test]
async fn endpoints_are_created_read_listed_updated_and_deleted_as_stripe_s() {
    let running = Running::start(10).await;
    let app = Receiver::start(vec![500]).await;
    let endpoint = register(&running, &app.url(), &["charge.refunded"]).await;
    let id = endpoint["id"].as_str().unwrap();
    assert!(id.starts_with("we_"), "{endpoint}");

    let (status, read) = stripe(&running, "GET", &format!("/v1/webhook_endpoints/{id}"), "").await;
    assert_eq!(status, 200);
    assert!(read.get("secret").is_none(), "only the create shows the secret: {read}");
    assert_eq!(read["enabled_events"], serde_json::json!(["charge.refunded"]));
    let (_, list) = stripe(&running, "GET", "/v1/webhook_endpoints", "").await;
    assert_eq!(list["data"][0]["id"], id);

    // A delivery waiting for its retry ends when its endpoint is disabled.
    stripe(&running, "POST", "/v1/refunds", "payment_intent=pi_1&amount=100").await;
    app.wait_for(1).await;
    let (status, updated) =
        stripe(&running, "POST", &format!("/v1/webhook_endpoints/{id}"), "disabled=true").await;
    assert_eq!((status, &updated["status"]), (200, &"disabled".into()), "{updated}");
    settle(&running).await;
    assert_eq!(webhooks_report(&running).await["deliveries"][0]["standing"], "endpoint_gone");
    stripe(&running, "POST", "/v1/refunds", "payment_intent=pi_1&amount=100").await;

    let (status, deleted) = stripe(&running, "DELETE", &format!("/v1/webhook_endpoints/{id}"), "").await;
    assert_eq!((status, &deleted["deleted"]), (200, &true.into()), "{deleted}");
    let (status, gone) = stripe(&running, "GET", &format!("/v1/webhook_endpoints/{id}"), "").await;
    assert_eq!((status, &gone["error"]["code"]), (404, &"resource_missing".into()), "{gone}");
    settle(&running).await;
    assert_eq!(app.received().len(), 1, "nothing is sent to a disabled endpoint");

    for (form, param, words) in [
        ("enabled_events[0]=*", "url", "Missing required param: url."),
        ("url=http://127.0.0.1:9/x", "enabled_events", "Missing required param: enabled_events."),
        ("url=https://example.com/x&enabled_events[0]=*", "url", "plain HTTP"),
        ("url=http://127.0.0.1:9/x&enabled_events[0]=Refund", "enabled_events[0]", "not an event type"),
        (
            "url=http://127.0.0.1:9/x&enabled_events[0]=*&colour=red",
            "colour",
            "Received unknown parameter: colour",
        ),
    ] {
        let (status, refused) = stripe(&running, "POST", "/v1/webhook_endpoints", form).await;
        assert_eq!((status, &refused["error"]["param"]), (400, &param.into()), "{form}: {refused}");
        assert!(refused["error"]["message"].as_str().unwrap().contains(words), "{form}: {refused}");
    }
}

#[tokio::test]
async fn an_account_holds_at_most_sixteen_endpoints() {
    let running = Running::start(19).await;
    for _ in 0..fake_services::payments::ENDPOINTS_MAX {
        register(&running, "http://127.0.0.1:9/hooks", &["*"]).await;
    }
    let form = "url=http://127.0.0.1:9/hooks&enabled_events[0]=*";
    let (status, refused) = stripe(&running, "POST", "/v1/webhook_endpoints", form).await;
    assert_eq!(status, 400, "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("maximum of 16"), "{refused}");
    let (_, list) = stripe(&running, "GET", "/v1/webhook_endpoints?limit=100", "").await;
    let first = list["data"][0]["id"].as_str().unwrap().to_string();
    stripe(&running, "DELETE", &format!("/v1/webhook_endpoints/{first}"), "").await;
    let (status, _) = stripe(&running, "POST", "/v1/webhook_endpoints", form).await;
    assert_eq!(status, 200, "a deleted endpoint frees its place");
}

#[tokio::test]
async fn a_restricted_key_needs_the_webhook_permission() {
    let running = Running::start(11).await;
    running
        .fakes
        .payments
        .seed_restricted_key("rk_test_events", &[fake_services::payments::Permission::EventRead])
        .unwrap();
    let req = Req::new("POST", "/v1/webhook_endpoints")
        .header("Authorization", "Bearer rk_test_events")
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(b"url=http://127.0.0.1:9/x&enabled_events[0]=*".to_vec());
    let seen = send(running.addr("payments"), &req, 10_000).await;
    assert_eq!(seen.status(), Some(403));
    assert!(seen.json()["error"]["message"].as_str().unwrap().contains("rak_webhook_write"), "{:?}", seen);
}

fn event_of(delivery: &Received) -> Value {
    serde_json::from_str(&delivery.body).unwrap()
}

fn t_of(delivery: &Received) -> u64 {
    delivery.signature.strip_prefix("t=").unwrap().split(',').next().unwrap().parse().unwrap()
}

fn arm(running: &Running, rule: &str) {
    running.fakes.payments.core().add_rule(serde_json::from_str(rule).unwrap()).unwrap();
}

#[tokio::test]
async fn duplicate_webhook_sends_each_event_of_the_request_twice() {
    let running = Running::start(12).await;
    let app = Receiver::start(Vec::new()).await;
    register(&running, &app.url(), &["charge.refunded"]).await;
    arm(
        &running,
        r#"{"method": "POST", "path": "/v1/refunds", "fault": {"kind": "duplicate_webhook", "after_ms": 100}}"#,
    );
    stripe(&running, "POST", "/v1/refunds", "payment_intent=pi_1&amount=100").await;
    let received = app.wait_for(2).await;
    settle(&running).await;
    assert_eq!(app.received().len(), 2);
    assert_eq!(event_of(&received[0])["id"], event_of(&received[1])["id"], "the same event, twice");
}

#[tokio::test]
async fn delay_webhook_sends_an_older_event_after_a_newer_one() {
    let running = Running::start(13).await;
    let app = Receiver::start(Vec::new()).await;
    register(&running, &app.url(), &["charge.refunded"]).await;
    // Two seconds: far more than the second refund takes, however loaded the machine.
    arm(
        &running,
        r#"{"method": "POST", "path": "/v1/refunds", "nth": 1, "fault": {"kind": "delay_webhook", "delay_ms": 2000}}"#,
    );
    stripe(&running, "POST", "/v1/refunds", "payment_intent=pi_1&amount=100").await;
    stripe(&running, "POST", "/v1/refunds", "payment_intent=pi_1&amount=200").await;
    let received = app.wait_for(2).await;
    let refunded: Vec<u64> =
        received.iter().map(|d| event_of(d)["data"]["object"]["amount_refunded"].as_u64().unwrap()).collect();
    assert_eq!(refunded, [300, 100], "the second refund's event arrives first");
}

#[tokio::test]
async fn lose_webhook_ack_loses_the_first_2xx_so_the_event_comes_again() {
    let running = Running::start(14).await;
    let app = Receiver::start(Vec::new()).await;
    register(&running, &app.url(), &["charge.refunded"]).await;
    arm(&running, r#"{"method": "POST", "path": "/v1/refunds", "fault": "lose_webhook_ack"}"#);
    stripe(&running, "POST", "/v1/refunds", "payment_intent=pi_1&amount=100").await;
    let received = app.wait_for(2).await;
    settle(&running).await;
    assert_eq!(app.received().len(), 2, "one retry after the lost 2xx, then the 2xx is heard");
    assert_eq!(event_of(&received[0])["id"], event_of(&received[1])["id"]);
    let report = webhooks_report(&running).await;
    assert!(report["attempts"][0]["error"].as_str().unwrap().contains("lose_webhook_ack"), "{report}");
    assert_eq!(report["deliveries"][0]["standing"], "delivered");
}

#[tokio::test]
async fn webhook_endpoint_down_fails_the_attempts_meanwhile_then_a_retry_arrives() {
    let running = Running::start(15).await;
    let app = Receiver::start(Vec::new()).await;
    register(&running, &app.url(), &["charge.refunded"]).await;
    arm(
        &running,
        r#"{"method": "POST", "path": "/v1/refunds", "fault": {"kind": "webhook_endpoint_down", "for_ms": 1500}}"#,
    );
    stripe(&running, "POST", "/v1/refunds", "payment_intent=pi_1&amount=100").await;
    app.wait_for(1).await;
    settle(&running).await;
    assert_eq!(app.received().len(), 1, "the attempts while down never reached it");
    let report = webhooks_report(&running).await;
    let errors: Vec<&str> =
        report["attempts"].as_array().unwrap().iter().filter_map(|a| a["error"].as_str()).collect();
    // At 0 s and (unless the machine is slow) at 1 s; then delivered at 3 s at the latest.
    assert!(!errors.is_empty() && errors.len() <= 2, "{report}");
    assert_eq!(report["deliveries"][0]["standing"], "delivered", "{report}");
    assert!(errors.iter().all(|e| e.contains("webhook_endpoint_down")), "{errors:?}");
}

#[tokio::test]
async fn stale_webhook_replays_the_event_under_a_signature_ten_minutes_old() {
    let running = Running::start(16).await;
    let app = Receiver::start(Vec::new()).await;
    let endpoint = register(&running, &app.url(), &["charge.refunded"]).await;
    let secret = endpoint["secret"].as_str().unwrap();
    arm(&running, r#"{"method": "POST", "path": "/v1/refunds", "fault": "stale_webhook"}"#);
    stripe(&running, "POST", "/v1/refunds", "payment_intent=pi_1&amount=100").await;
    let mut received = app.wait_for(2).await;
    settle(&running).await;
    received.sort_by_key(t_of);
    let (stale, genuine) = (&received[0], &received[1]);
    assert_eq!(event_of(stale)["id"], event_of(genuine)["id"]);
    // Signed 600 s before it was sent, a moment after the genuine one (a second may tick between).
    let age = t_of(genuine) - t_of(stale);
    let stale_s = vocabulary::rule::STALE_SIGNATURE_AGE_S;
    assert!((stale_s - 1..=stale_s).contains(&age), "{age}");
    assert_eq!(stale.signature, sign_webhook(secret, t_of(stale), &stale.body), "validly signed, long ago");
    let report = webhooks_report(&running).await;
    let signed: Vec<&str> =
        report["deliveries"].as_array().unwrap().iter().map(|d| d["signed"].as_str().unwrap()).collect();
    assert_eq!(signed, ["genuine", "stale"]);
}

#[tokio::test]
async fn a_payment_waits_for_a_listener_and_its_confirm_rules_shape_its_webhooks() {
    let running = Running::start(17).await;
    let payments = &running.fakes.payments;
    payments.seed_unpaid_intent("pi_order_1", 4_200, "usd").unwrap();
    payments.seed_unpaid_intent("pi_order_2", 900, "usd").unwrap();
    payments.pay_once_listened("pi_order_1", false);
    payments.pay_once_listened("pi_order_2", true);
    arm(
        &running,
        r#"{"method": "POST", "path": "/v1/payment_intents/pi_order_1/confirm", "fault": "duplicate_webhook"}"#,
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(payments.awaiting_listener(), ["pi_order_1", "pi_order_2"], "nobody listens yet");
    let (_, intent) = stripe(&running, "GET", "/v1/payment_intents/pi_order_1", "").await;
    assert_eq!(intent["status"], "requires_confirmation");

    let app = Receiver::start(Vec::new()).await;
    let endpoint = register(&running, &app.url(), &["payment_intent.succeeded"]).await;
    let secret = endpoint["secret"].as_str().unwrap();
    let received = app.wait_for(3).await;
    settle(&running).await;
    let (genuine, forged): (Vec<&Received>, Vec<&Received>) =
        received.iter().partition(|d| d.signature == sign_webhook(secret, t_of(d), &d.body));
    assert_eq!(genuine.len(), 2, "pi_order_1's event, twice (duplicate_webhook on its confirm)");
    assert!(genuine.iter().all(|d| event_of(d)["data"]["object"]["id"] == "pi_order_1"));
    assert_eq!(forged.len(), 1);
    let fake = event_of(forged[0]);
    assert_eq!(
        (&fake["type"], &fake["data"]["object"]["status"]),
        (&"payment_intent.succeeded".into(), &"succeeded".into())
    );
    let (status, _) =
        stripe(&running, "GET", &format!("/v1/events/{}", fake["id"].as_str().unwrap()), "").await;
    assert_eq!(status, 404, "a forged event is no event of the fake's");
    let (_, paid) = stripe(&running, "GET", "/v1/payment_intents/pi_order_1", "").await;
    let (_, unpaid) = stripe(&running, "GET", "/v1/payment_intents/pi_order_2", "").await;
    assert_eq!((&paid["status"], &unpaid["status"]), (&"succeeded".into(), &"requires_confirmation".into()));
    assert!(running.fake("payments").ledger().is_empty(), "a customer's payment is no effect of the app's");
}

#[tokio::test]
async fn the_control_api_forges_an_event_and_says_so_for_the_other_fakes() {
    let running = Running::start(18).await;
    let app = Receiver::start(vec![400]).await;
    register(&running, &app.url(), &["*"]).await;
    let forge = |service: &'static str| {
        let req = Req::new("POST", "/__twice/webhooks/forge")
            .body(br#"{"type": "payment_intent.succeeded", "payment_intent": "pi_1"}"#.to_vec());
        let addr = running.addr(service);
        async move { send(addr, &req, 10_000).await }
    };
    let forged = forge("payments").await;
    assert_eq!(forged.status(), Some(200), "{forged:?}");
    assert_eq!(forged.json()["endpoints"], 1);
    app.wait_for(1).await;
    settle(&running).await;
    let report = webhooks_report(&running).await;
    assert_eq!(
        (&report["deliveries"][0]["signed"], &report["deliveries"][0]["standing"]),
        (&"forged".into(), &"refused".into())
    );
    assert_eq!(report["attempts"].as_array().unwrap().len(), 1, "a forgery is not retried");
    assert_eq!(forge("workspaces").await.status(), Some(404));
}
