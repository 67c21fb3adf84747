//! The rule format's tests: names and tables, validation, matching.

use super::*;

fn parse(json: &str) -> Result<FaultRule, String> {
    serde_json::from_str::<FaultRule>(json).map_err(|e| e.to_string())
}

#[test]
fn bare_names_and_tables_parse_to_the_same_fault() {
    let bare = parse(r#"{"fault":"drop_after_commit"}"#).unwrap();
    let table = parse(r#"{"fault":{"kind":"drop_after_commit"}}"#).unwrap();
    assert_eq!(bare, table);
    let reject = parse(r#"{"fault":{"kind":"reject","status":429}}"#).unwrap();
    assert_eq!(reject.fault, FaultSpec::Reject { status: 429, body: None });
}

#[test]
fn errors_name_the_problem_and_the_fix() {
    let cases = [
        (r#"{"fault":"drop_after_comit"}"#, "did you mean \"drop_after_commit\""),
        (r#"{"fault":{"kind":"silent_nop"}}"#, "did you mean \"silent_noop\""),
        (r#"{"fault":"reject"}"#, "needs a status"),
        (r#"{"fault":{"kind":"latency","befor_ms":3}}"#, "unknown field `befor_ms`"),
        (r#"{"fault":{"status":3}}"#, "needs `kind`"),
        (r#"{"fault":"refuse","nht":1}"#, "unknown field `nht`"),
        (r#"{"fault":"deliver_late"}"#, "needs a delay"),
        (r#"{"fault":{"kind":"deliver_lat","delay_ms":1}}"#, "did you mean \"deliver_late\""),
    ];
    for (json, want) in cases {
        let err = parse(json).unwrap_err();
        assert!(err.contains(want), "{json}: {err}");
    }
}

#[test]
fn validation_bounds_every_wait() {
    let cases = [
        (r#"{"fault":"refuse","nth":0}"#, "1-based"),
        (r#"{"fault":"refuse","probability":1.5}"#, "between 0 and 1"),
        (r#"{"fault":{"kind":"timeout_after_commit","hold_ms":999999999}}"#, "above the limit"),
        (r#"{"fault":{"kind":"reject","status":200}}"#, "400 to 599"),
        (r#"{"fault":{"kind":"deliver_late","delay_ms":999999999}}"#, "above the limit"),
        (r#"{"fault":{"kind":"redeliver","after_ms":999999999}}"#, "above the limit"),
    ];
    for (json, want) in cases {
        let err = parse(json).unwrap().validate().unwrap_err();
        assert!(err.contains(want), "{json}: {err}");
    }
}

#[test]
fn delivery_faults_act_on_messages_only() {
    let late = parse(r#"{"fault":{"kind":"deliver_late","delay_ms":800}}"#).unwrap().fault;
    assert_eq!(late, FaultSpec::DeliverLate { delay_ms: 800 });
    let again = parse(r#"{"fault":"redeliver"}"#).unwrap().fault;
    assert_eq!(again, FaultSpec::Redeliver { after_ms: 0 });
    for fault in [late, again] {
        assert!(fault.check_service("messages").is_ok());
        let err = fault.check_service("payments").unwrap_err();
        assert!(err.contains("applies only to messages"), "{err}");
    }
    assert!(FaultSpec::DropAfterCommit.check_service("payments").is_ok());
}

#[test]
fn matching_uses_method_path_prefix_and_fields() {
    let fields: BTreeMap<String, String> = [("payment_intent".to_string(), "pi_1".to_string())].into();
    let view = RequestView { method: "POST", path: "/v1/refunds", fields: &fields };
    let rule = FaultRule::always(FaultSpec::Refuse);
    assert!(rule.clone().method("post").path("/v1/*").field("payment_intent", "pi_1").matches(&view));
    assert!(!rule.clone().method("GET").matches(&view));
    assert!(!rule.clone().path("/v1/refund").matches(&view));
    assert!(!rule.field("payment_intent", "pi_2").matches(&view));
}
