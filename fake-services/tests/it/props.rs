//! Random requests, thousands of them, against each fake in process: zero panics and zero
//! 5xx when no fault is armed, and every error in the service's own shape.

use fake_services::{Disposition, Fake, FakeRequest};
use proptest::prelude::*;
use serde_json::Value;

use crate::client::manual_fakes;

fn method() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(vec!["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"]).prop_map(String::from),
        1 => "[A-Z]{1,8}",
    ]
}

fn path() -> impl Strategy<Value = String> {
    let known = prop::sample::select(vec![
        "/v1/refunds",
        "/v1/refunds/",
        "/v1/refunds/re_x",
        "/v1/workspaces",
        "/v1/workspaces/ws_x",
        "/",
        "/v1",
        "/v1/refunds/re_x/extra",
        "/v1/payment_intents",
        "/v1/payment_intents/pi_1",
        "/v1/payment_intents/pi_1/confirm",
        "/v1/payment_intents/pi_1/cancel",
        "/v1/payment_intents/pi_x/confirm",
        "/emails",
        "/emails/",
        "/emails/4ef9a417-02e9-4d39-ad75-9611e0fcc33c",
        "/emails/x/y",
        "/mailboxes/ada@example.com/messages",
        "/mailboxes/ada%40example.com/messages",
        "/mailboxes/%/messages",
        "/mailboxes//messages",
    ])
    .prop_map(String::from);
    prop_oneof![3 => known, 1 => "(/[a-zA-Z0-9_%.~-]{0,12}){1,4}"]
}

fn query() -> impl Strategy<Value = String> {
    let name = prop::sample::select(vec![
        "payment_intent",
        "charge",
        "limit",
        "starting_after",
        "ending_before",
        "external_id",
        "expand[]",
        "after",
        "x",
    ]);
    let pair = (name, "[ -~]{0,12}")
        .prop_map(|(n, v)| form_urlencoded::Serializer::new(String::new()).append_pair(n, &v).finish());
    prop_oneof![2 => Just(String::new()), 3 => prop::collection::vec(pair, 1..4).prop_map(|p| p.join("&")), 1 => "[ -~]{0,30}"]
}

fn form() -> impl Strategy<Value = Vec<u8>> {
    let name = prop::sample::select(vec![
        "payment_intent",
        "charge",
        "amount",
        "reason",
        "currency",
        "metadata[k]",
        "metadata[]",
        "metadata",
        "expand[0]",
        "expand[]",
        "expand[1]",
        "instructions_email",
        "confirm",
        "payment_method",
        "cancellation_reason",
        "a[b][c]",
        "[",
        "]",
        "x[",
    ]);
    let value = prop_oneof![
        Just("pi_1".to_string()),
        Just("ch_1".to_string()),
        "[0-9]{1,10}",
        "-?[0-9]{1,3}(\\.[0-9])?",
        "[ -~]{0,20}",
        prop::sample::select(vec![
            "duplicate",
            "fraudulent",
            "requested_by_customer",
            "usd",
            "true",
            "pm_card_visa"
        ])
        .prop_map(String::from),
    ];
    prop::collection::vec((name, value), 0..6).prop_map(|pairs| {
        let mut s = form_urlencoded::Serializer::new(String::new());
        for (n, v) in pairs {
            s.append_pair(n, &v);
        }
        s.finish().into_bytes()
    })
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
        "[ -~]{0,30}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(
                prop::sample::select(vec![
                    "external_id",
                    "name",
                    "plan",
                    "x",
                    "from",
                    "to",
                    "subject",
                    "text",
                    "html",
                    "cc",
                    "bcc",
                    "reply_to",
                    "headers",
                    "tags",
                ])
                .prop_map(String::from),
                inner,
                0..6
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        1 => Just(Vec::new()),
        3 => form(),
        3 => json_value().prop_map(|v| v.to_string().into_bytes()),
        2 => prop::collection::vec(any::<u8>(), 0..256),
    ]
}

fn request() -> impl Strategy<Value = FakeRequest> {
    let headers = (
        prop::option::of(prop_oneof![
            Just("Bearer sk_test_x".to_string()),
            Just("Bearer re_test_x".to_string()),
            "[ -~]{0,20}"
        ]),
        prop::option::of("[ -~]{0,40}"),
        prop::option::of("[ -~]{0,6}"),
    );
    (method(), path(), query(), headers, body()).prop_map(
        |(method, path, query, (auth, key, fence), body)| {
            let target = if query.is_empty() { path } else { format!("{path}?{query}") };
            let mut req = FakeRequest::new(&method, &target).body(body);
            if let Some(a) = auth {
                req = req.header("Authorization", &a);
            }
            if let Some(k) = key {
                req = req.header("Idempotency-Key", &k);
            }
            if let Some(f) = fence {
                req = req.header("Fencing-Token", &f);
            }
            req
        },
    )
}

/// A send to the messages fake, nearly well formed: Resend's fields with random values.
fn email_request() -> impl Strategy<Value = FakeRequest> {
    let address = prop_oneof![
        Just(Value::from("ada@example.com")),
        Just(Value::from("Ada <ada@example.com>")),
        Just(serde_json::json!(["ada@example.com", "grace@example.com"])),
        "[ -~]{0,24}".prop_map(Value::from),
        json_value(),
    ];
    let field = prop_oneof![
        4 => prop::sample::select(vec!["from", "to", "cc", "bcc", "reply_to"]).prop_flat_map(move |f| {
            address.clone().prop_map(move |v| (f.to_string(), v))
        }),
        3 => (prop::sample::select(vec!["subject", "text", "html", "headers", "tags", "scheduled_at", "x"]), json_value())
            .prop_map(|(f, v)| (f.to_string(), v)),
    ];
    let key = prop::option::of(prop_oneof![Just("k".to_string()), "[ -~]{0,300}"]);
    (prop::collection::vec(field, 0..8), key).prop_map(|(fields, key)| {
        let mut body = serde_json::json!({"from": "a@example.com", "to": "ada@example.com", "subject": "s", "text": "t"});
        for (name, value) in fields {
            body[name] = value;
        }
        let mut req = FakeRequest::new("POST", "/emails").header("Authorization", "Bearer re_test_x").body(body.to_string());
        if let Some(k) = key {
            req = req.header("Idempotency-Key", &k);
        }
        req
    })
}

/// A well-formed answer in Resend's shape: JSON, and `statusCode`, `message` and `name` on
/// every error.
fn resend_shaped(disposition: &Disposition) -> Result<u16, String> {
    let Disposition::Respond(response) = disposition else {
        return Err("messages ended a request without an answer and no fault armed".into());
    };
    let body: Value =
        serde_json::from_slice(&response.body).map_err(|e| format!("messages: a non-JSON body: {e}"))?;
    if response.status >= 400 {
        let named = body["name"].as_str().is_some_and(|n| !n.is_empty());
        let said = body["message"].as_str().is_some_and(|m| !m.is_empty());
        if !named || !said || body["statusCode"] != response.status {
            return Err(format!("messages: error {} not in Resend's shape: {body}", response.status));
        }
    }
    Ok(response.status)
}

/// A well-formed answer in the service's shape: JSON, and an `error` object on every error.
fn answer_is_well_formed(fake: &Fake, disposition: &Disposition) -> Result<u16, String> {
    let Disposition::Respond(response) = disposition else {
        return Err(format!("{} ended a request without an answer and no fault armed", fake.name()));
    };
    let body: Value = serde_json::from_slice(&response.body)
        .map_err(|e| format!("{}: a non-JSON body: {e}", fake.name()))?;
    if response.status >= 400 && body.pointer("/error/message").and_then(Value::as_str).is_none() {
        return Err(format!("{}: error {} without error.message: {body}", fake.name(), response.status));
    }
    Ok(response.status)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3_000, ..ProptestConfig::default() })]

    #[test]
    fn random_requests_never_panic_nor_answer_5xx(requests in prop::collection::vec(request(), 1..4)) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        let (fakes, _clock) = manual_fakes(3);
        // The files fake answers in S3's XML: `files::random_requests_to_files_never_panic_nor_answer_5xx`
        // sends it requests of its own and checks that shape. Messages answers in Resend's
        // shape, checked below.
        let own_shape = [fake_services::files::NAME, fake_services::messages::NAME];
        for fake in fakes.all().into_iter().filter(|f| !own_shape.contains(&f.name())) {
            for req in &requests {
                let disposition = runtime.block_on(fake.handle(req.clone()));
                let status = answer_is_well_formed(&fake, &disposition).map_err(TestCaseError::fail)?;
                prop_assert!(status < 500, "{} answered {status} to {req:?}", fake.name());
            }
        }
    }

    #[test]
    fn random_requests_to_messages_never_panic_nor_answer_5xx(
        requests in prop::collection::vec(prop_oneof![1 => request(), 2 => email_request()], 1..4),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        let (fakes, _clock) = manual_fakes(3);
        let fake = fakes.get(fake_services::messages::NAME).unwrap();
        for req in &requests {
            let disposition = runtime.block_on(fake.handle(req.clone()));
            let status = resend_shaped(&disposition).map_err(TestCaseError::fail)?;
            prop_assert!(status < 500, "messages answered {status} to {req:?}");
        }
    }

    #[test]
    fn random_control_bodies_are_accepted_or_refused_cleanly(
        route in prop::sample::select(vec!["/__twice/rules", "/__twice/contract", "/__twice/clock/jump", "/__twice/seed", "/__twice/reset", "/__twice/nope"]),
        method in prop::sample::select(vec!["GET", "POST", "PATCH", "DELETE"]),
        body in prop_oneof![json_value().prop_map(|v| v.to_string().into_bytes()), prop::collection::vec(any::<u8>(), 0..64)],
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        let (fakes, _clock) = manual_fakes(3);
        for fake in fakes.all() {
            let req = FakeRequest::new(method, route).body(body.clone());
            let disposition = runtime.block_on(fake.handle(req));
            let status = answer_is_well_formed(&fake, &disposition).map_err(TestCaseError::fail)?;
            prop_assert!([200, 201, 400, 404, 405].contains(&status), "{} {route}: {status}", method);
        }
    }
}
