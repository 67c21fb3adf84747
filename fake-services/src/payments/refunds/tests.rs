//! Tests of refunds: the typed answers write the bytes the JSON tree of the same fields
//! wrote, one refund and a page of them, and a flat form reads as the object it decodes to.

use super::*;

fn refund(reason: Option<&str>, metadata: Map<String, Value>) -> Refund {
    Refund {
        id: "re_1".into(),
        amount: 250,
        charge: "ch_\"x\"".into(),
        payment_intent: "pi_é".into(),
        currency: "usd".into(),
        metadata,
        reason: reason.map(str::to_string),
        created_ms: 1_700_000_123_456,
    }
}

/// The typed answers write the bytes a `Value` tree of the same fields writes.
#[test]
fn typed_refunds_serialize_as_the_json_tree_did() {
    let mut metadata = Map::new();
    metadata.insert("z".into(), json!("last"));
    metadata.insert("a b".into(), json!("first\n"));
    let refunds = [refund(None, Map::new()), refund(Some("duplicate"), metadata)];
    for r in &refunds {
        assert_eq!(serde_json::to_string(&r.object()).unwrap(), r.to_json().to_string());
    }
    let list = RefundList {
        data: refunds.iter().map(Refund::object).collect(),
        has_more: true,
        object: "list",
        url: "/v1/refunds",
    };
    let tree = json!({"object": "list", "url": "/v1/refunds", "has_more": true,
        "data": refunds.iter().map(Refund::to_json).collect::<Vec<_>>()});
    assert_eq!(serde_json::to_string(&list).unwrap(), tree.to_string());
    for r in &refunds {
        let tree = json!({
            "payment_intent": &*r.payment_intent,
            "charge": &*r.charge,
            "amount": r.amount,
            "currency": &*r.currency,
            "reason": r.reason,
            "metadata": r.metadata,
        });
        assert_eq!(refund_params(r), tree);
    }
}

/// The hand-written answer is the bytes serde_json writes of the object, whatever the
/// refund holds.
#[test]
fn a_refund_answer_is_its_objects_json() {
    let mut metadata = Map::new();
    metadata.insert("k".into(), json!("v"));
    let mut refunds = vec![refund(None, Map::new()), refund(Some("duplicate"), metadata)];
    let mut plain = refund(Some("fraudulent"), Map::new());
    (plain.charge, plain.payment_intent) = ("ch_1".into(), "pi_é\u{7f}".into());
    refunds.push(plain);
    let mut zero = refund(None, Map::new());
    (zero.charge, zero.amount, zero.created_ms) = ("ch_0".into(), 0, 999);
    refunds.push(zero);
    refunds.push(Refund { amount: u64::MAX, ..refund(Some("q\"x"), Map::new()) });
    for r in &refunds {
        let answer = r.answer();
        assert_eq!(answer, FakeResponse::json_of(200, &r.object()), "{r:?}");
        assert_eq!(answer.body.len(), serde_json::to_vec(&r.object()).unwrap().len());
    }
    assert!(refunds[2].plain_json().is_some() && refunds[3].plain_json().is_some());
}

/// A form of plain names reads as the same parameters, and is refused with the same
/// error, as its decoded JSON object.
#[test]
fn flat_forms_read_as_their_decoded_objects() {
    let bodies = [
        "payment_intent=pi_bench&amount=1",
        "amount=1&payment_intent=pi_bench",
        "charge=ch_1&reason=duplicate&currency=usd",
        "payment_intent=pi%22q%5C&amount=99999999&metadata=",
        "payment_intent=pi+1&charge=ch%0A",
        "amount=0",
        "amount=100000000",
        "amount=x&reason=nope",
        "reason=nope",
        "metadata=x",
        "payment_intent=",
        "charge=",
        "currency=usdx",
        "currency=",
        "currency=u1d",
        "zzz=1&aaa=2",
        "amount=1&amount=2",
        "=1&amount=2&amount=3",
        "amount=2&amount=3&=1",
        "a=1&&b=2",
        "",
        "expand=charge&instructions_email=a%40b",
        "payment_intent=%FF%FE",
    ];
    for body in bodies {
        let flat = read_flat_create(body.as_bytes()).expect("plain names");
        let decoded = form::decode(body.as_bytes()).map_err(ApiError::invalid).and_then(read_create);
        assert_eq!(flat, decoded, "{body}");
    }
    assert!(read_flat_create(b"metadata[a]=1").is_none());
    let many = (0..=FLAT_PAIRS_MAX).map(|i| format!("p{i}=1")).collect::<Vec<_>>().join("&");
    assert!(read_flat_create(many.as_bytes()).is_none());
}
