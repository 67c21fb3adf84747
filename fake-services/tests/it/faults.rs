//! Every fault on both services, over real loopback HTTP: what the caller sees and what the
//! ledger holds. One table, one runner.

use std::time::Duration;

use serde_json::{Value, json};

use crate::client::{self, Req, Running, Seen};

const P: &str = "payments";
const W: &str = "workspaces";
const F: &str = "files";
const C: &str = "chain";
const M: &str = "messages";
/// A caller that waits this long is a patient one: faults that answer, answer well within it.
const PATIENT_MS: u64 = 10_000;
/// A caller with a short timeout, for faults that hold the reply.
const HASTY_MS: u64 = 300;

/// What a step expects to see.
#[derive(Debug, Clone)]
enum Expect {
    Status(u16),
    /// This status, and the body mentions this text.
    Error(u16, &'static str),
    /// 200 with `Idempotent-Replayed: true`, or this other status replayed.
    Replayed(u16),
    /// S3's XML error: this status and this `<Code>`.
    S3(u16, &'static str),
    /// Resend's error: this status and this `name`.
    Resend(u16, &'static str),
    /// An answer whose JSON array at this pointer has this many items.
    Count(&'static str, usize),
    Reset,
    Closed,
    Timeout,
}

#[derive(Debug, Clone)]
enum Step {
    Send(Req, u64, Expect),
    /// A caller that gives up [`HASTY_MS`] after its request reached the fake.
    Hasty(Req, Expect),
    /// `first` starts; `second` starts `after_ms` later; both are checked.
    Overlap {
        first: Req,
        after_ms: u64,
        second: Req,
        first_sees: Expect,
        second_sees: Expect,
    },
    /// Polls until the ledger holds this many effects (bounded).
    Ledger(usize),
    JumpMs(u64),
}

struct Case {
    name: &'static str,
    service: &'static str,
    contract: Value,
    rules: Value,
    steps: Vec<Step>,
    ledger: usize,
}

fn case(name: &'static str, service: &'static str, rules: Value, steps: Vec<Step>, ledger: usize) -> Case {
    Case { name, service, contract: json!({}), rules, steps, ledger }
}

fn send(req: Req, expect: Expect) -> Step {
    Step::Send(req, PATIENT_MS, expect)
}

fn send_hasty(req: Req, expect: Expect) -> Step {
    Step::Hasty(req, expect)
}

fn refund() -> Req {
    Req::refund("payment_intent=pi_1&amount=100")
}

fn refund_keyed(key: &str) -> Req {
    refund().key(key)
}

/// A confirmed PaymentIntent create with an idempotency key.
fn intent_keyed(key: &str) -> Req {
    Req::refund("amount=1000&currency=usd&confirm=true&payment_method=pm_card_visa")
        .target_intent("")
        .key(key)
}

trait IntentTarget {
    /// The same form request, sent to `/v1/payment_intents/{rest}` (or the collection).
    fn target_intent(self, rest: &str) -> Self;
}

impl IntentTarget for Req {
    fn target_intent(mut self, rest: &str) -> Self {
        self.target = if rest.is_empty() {
            "/v1/payment_intents".into()
        } else {
            format!("/v1/payment_intents/{rest}")
        };
        self
    }
}

fn ws() -> Req {
    Req::workspace("org-1")
}

fn list_refunds() -> Req {
    Req::new("GET", "/v1/refunds?payment_intent=pi_1").authorized()
}

fn list_ws() -> Req {
    Req::new("GET", "/v1/workspaces?external_id=org-1")
}

/// A PUT of an object to the files fake's bucket `reports`.
fn obj_put(key: &str, body: &str) -> Req {
    Req::new("PUT", format!("/reports/{key}")).body(body.as_bytes().to_vec())
}

/// A PUT that stores only if the key holds nothing.
fn obj_create(key: &str, body: &str) -> Req {
    obj_put(key, body).header("If-None-Match", "*")
}

fn obj_get(key: &str) -> Req {
    Req::new("GET", format!("/reports/{key}"))
}

/// The files fake's cases start by seeding bucket `reports` (control requests never meet
/// the fault engine), with `q3.csv` = `v1`.
fn seed_files() -> Step {
    let seed =
        json!({"buckets": ["reports"], "objects": [{"bucket": "reports", "key": "q3.csv", "body": "v1"}]});
    send(Req::new("POST", "/__twice/seed").body(seed.to_string()), Expect::Status(201))
}

fn files_case(name: &'static str, rules: Value, steps: Vec<Step>, ledger: usize) -> Case {
    case(name, F, rules, [vec![seed_files()], steps].concat(), ledger)
}

fn cases() -> Vec<Case> {
    use Expect::*;
    let mut cases = vec![
        // Payments.
        case("refuse resets before reading", P, json!([{"fault": "refuse"}]), vec![send(refund(), Reset)], 0),
        case(
            "reject answers its status without executing",
            P,
            json!([{"fault": {"kind": "reject", "status": 429}, "nth": 1}]),
            vec![send(refund(), Error(429, "api_error")), send(refund(), Status(200))],
            1,
        ),
        case(
            "reject answers the given body",
            P,
            json!([{"fault": {"kind": "reject", "status": 402, "body": {"error": {"type": "card_error", "code": "card_declined", "message": "declined"}}}}]),
            vec![send(refund(), Error(402, "card_declined"))],
            0,
        ),
        case(
            "error_after_commit commits and answers 500",
            P,
            json!([{"fault": "error_after_commit", "method": "POST"}]),
            vec![send(refund(), Error(500, "api_error"))],
            1,
        ),
        case(
            "error_after_commit's 500 is what the key replays",
            P,
            json!([{"fault": "error_after_commit", "nth": 1}]),
            vec![send(refund_keyed("k"), Error(500, "api_error")), send(refund_keyed("k"), Replayed(500))],
            1,
        ),
        case(
            "drop_after_commit closes without a byte; the key replays the success",
            P,
            json!([{"fault": "drop_after_commit", "nth": 1}]),
            vec![send(refund_keyed("k"), Closed), send(refund_keyed("k"), Replayed(200))],
            1,
        ),
        case(
            "drop_after_commit without a key: the retry refunds twice",
            P,
            json!([{"fault": "drop_after_commit", "nth": 1}]),
            vec![send(refund(), Closed), send(refund(), Status(200))],
            2,
        ),
        case(
            "timeout_after_commit holds the reply past the caller's timeout",
            P,
            json!([{"fault": {"kind": "timeout_after_commit", "hold_ms": 60000}}]),
            vec![send_hasty(refund(), Timeout), Step::Ledger(1)],
            1,
        ),
        case(
            "commit_after_timeout commits after the caller has gone",
            P,
            json!([{"fault": {"kind": "commit_after_timeout", "delay_ms": 3000}, "method": "POST"}]),
            vec![send_hasty(refund(), Timeout), send(list_refunds(), Count("/data", 0)), Step::Ledger(1)],
            1,
        ),
        case(
            "commit_after_timeout keeps the key in flight: 409 until it commits, then a replay",
            P,
            json!([{"fault": {"kind": "commit_after_timeout", "delay_ms": 3000}, "nth": 1}]),
            vec![
                send_hasty(refund_keyed("k"), Timeout),
                send(refund_keyed("k"), Error(409, "idempotency_key_in_use")),
                Step::Ledger(1),
                send(refund_keyed("k"), Replayed(200)),
            ],
            1,
        ),
        case(
            "silent_noop answers success and commits nothing",
            P,
            json!([{"fault": "silent_noop"}]),
            vec![send(refund(), Status(200)), send(list_refunds(), Count("/data", 0))],
            0,
        ),
        case(
            "stale_read hides writes younger than the lag",
            P,
            json!([{"fault": {"kind": "stale_read", "lag_ms": 60000}, "method": "GET"}]),
            vec![send(refund(), Status(200)), send(list_refunds(), Count("/data", 0))],
            1,
        ),
        case(
            "stale_read for a number of reads",
            P,
            json!([{"fault": {"kind": "stale_read", "lag_ms": 60000}, "method": "GET", "times": 2}]),
            vec![
                send(refund(), Status(200)),
                send(list_refunds(), Count("/data", 0)),
                send(list_refunds(), Count("/data", 0)),
                send(list_refunds(), Count("/data", 1)),
            ],
            1,
        ),
        case(
            "forget_keys: the retry after the service forgot executes again",
            P,
            json!([{"fault": "forget_keys", "nth": 2}]),
            vec![send(refund_keyed("k"), Status(200)), send(refund_keyed("k"), Status(200))],
            2,
        ),
        case(
            "ignore_keys: the same key executes twice",
            P,
            json!([{"fault": "ignore_keys"}]),
            vec![send(refund_keyed("k"), Status(200)), send(refund_keyed("k"), Status(200))],
            2,
        ),
        case(
            "latency before the commit keeps the key in flight",
            P,
            json!([{"fault": {"kind": "latency", "before_ms": 2000}, "nth": 1}]),
            vec![Step::Overlap {
                first: refund_keyed("k"),
                after_ms: 300,
                second: refund_keyed("k"),
                first_sees: Status(200),
                second_sees: Error(409, "idempotency_key_in_use"),
            }],
            1,
        ),
        case(
            "latency after the commit still answers",
            P,
            json!([{"fault": {"kind": "latency", "after_ms": 200}}]),
            vec![send(refund(), Status(200))],
            1,
        ),
        case(
            "a probability of 0 never fires",
            P,
            json!([{"fault": "refuse", "probability": 0.0}]),
            vec![send(refund(), Status(200))],
            1,
        ),
        case(
            "rules match on form fields",
            P,
            json!([{"fault": "refuse", "where": {"amount": "200"}}]),
            vec![send(refund(), Status(200)), send(Req::refund("payment_intent=pi_1&amount=200"), Reset)],
            1,
        ),
        case(
            "the same key with other parameters is an idempotency_error",
            P,
            json!([]),
            vec![
                send(refund_keyed("k"), Status(200)),
                send(Req::refund("payment_intent=pi_1&amount=200").key("k"), Error(400, "idempotency_error")),
            ],
            1,
        ),
        case(
            "keys are pruned after the retention window of service time",
            P,
            json!([]),
            vec![
                send(refund_keyed("k"), Status(200)),
                Step::JumpMs(25 * 3600 * 1000),
                send(refund_keyed("k"), Status(200)),
            ],
            2,
        ),
        case(
            "payment_intents: drop_after_commit on a confirmed create; the key replays, one intent charged",
            P,
            json!([{"fault": "drop_after_commit", "path": "/v1/payment_intents", "nth": 1}]),
            vec![send(intent_keyed("k"), Closed), send(intent_keyed("k"), Replayed(200))],
            2,
        ),
        case(
            "payment_intents: error_after_commit's 500 is what the key replays",
            P,
            json!([{"fault": "error_after_commit", "path": "/v1/payment_intents", "nth": 1}]),
            vec![send(intent_keyed("k"), Error(500, "api_error")), send(intent_keyed("k"), Replayed(500))],
            2,
        ),
        case(
            "payment_intents: silent_noop answers an intent that does not exist",
            P,
            json!([{"fault": "silent_noop", "path": "/v1/payment_intents"}]),
            vec![send(intent_keyed("k"), Status(200))],
            0,
        ),
        case(
            "payment_intents: reject on confirm, nothing charged",
            P,
            json!([{"fault": {"kind": "reject", "status": 503}, "path": "/v1/payment_intents/*"}]),
            vec![send(
                Req::refund("payment_method=pm_card_visa").target_intent("pi_1/confirm"),
                Error(503, "api_error"),
            )],
            0,
        ),
        // Workspaces.
        case("workspaces: refuse", W, json!([{"fault": "refuse"}]), vec![send(ws(), Reset)], 0),
        case(
            "workspaces: reject",
            W,
            json!([{"fault": {"kind": "reject", "status": 503}}]),
            vec![send(ws(), Error(503, "error"))],
            0,
        ),
        case(
            "workspaces: error_after_commit",
            W,
            json!([{"fault": "error_after_commit", "nth": 1}]),
            vec![send(ws().key("k"), Error(500, "api_error")), send(ws().key("k"), Replayed(500))],
            1,
        ),
        case(
            "workspaces: drop_after_commit, then the retry hits the unique external id",
            W,
            json!([{"fault": "drop_after_commit", "nth": 1}]),
            vec![send(ws(), Closed), send(ws(), Error(409, "workspace_exists"))],
            1,
        ),
        case(
            "workspaces: timeout_after_commit",
            W,
            json!([{"fault": {"kind": "timeout_after_commit", "hold_ms": 60000}}]),
            vec![send_hasty(ws(), Timeout), Step::Ledger(1)],
            1,
        ),
        case(
            "workspaces: commit_after_timeout",
            W,
            json!([{"fault": {"kind": "commit_after_timeout", "delay_ms": 3000}, "method": "POST"}]),
            vec![
                send_hasty(ws(), Timeout),
                send(list_ws(), Count("/data", 0)),
                Step::Ledger(1),
                send(list_ws(), Count("/data", 1)),
            ],
            1,
        ),
        case(
            "workspaces: silent_noop",
            W,
            json!([{"fault": "silent_noop"}]),
            vec![send(ws(), Status(200)), send(list_ws(), Count("/data", 0))],
            0,
        ),
        case(
            "workspaces: stale_read",
            W,
            json!([{"fault": {"kind": "stale_read", "lag_ms": 60000}, "method": "GET", "times": 1}]),
            vec![
                send(ws(), Status(200)),
                send(list_ws(), Count("/data", 0)),
                send(list_ws(), Count("/data", 1)),
            ],
            1,
        ),
        case(
            "workspaces: latency before the commit keeps the key in flight",
            W,
            json!([{"fault": {"kind": "latency", "before_ms": 2000}, "nth": 1}]),
            vec![Step::Overlap {
                first: ws().key("k"),
                after_ms: 300,
                second: ws().key("k"),
                first_sees: Status(200),
                second_sees: Error(409, "idempotency_key_in_use"),
            }],
            1,
        ),
        case(
            "workspaces: rules match on JSON fields",
            W,
            json!([{"fault": "drop_after_commit", "where": {"external_id": "org-2"}}]),
            vec![send(ws(), Status(200)), send(Req::workspace("org-2"), Closed)],
            2,
        ),
    ];
    cases.extend(files_cases());
    cases.extend(chain_cases());
    cases.extend(messages_cases());
    // Workspaces cases whose contract differs from the default.
    let loose = json!({"unique_business_key": false});
    let with = |mut c: Case, contract: &Value| {
        c.contract = contract.clone();
        c
    };
    cases.extend([
        with(
            case(
                "workspaces: forget_keys",
                W,
                json!([{"fault": "forget_keys", "nth": 2}]),
                vec![send(ws().key("k"), Status(200)), send(ws().key("k"), Status(200))],
                2,
            ),
            &loose,
        ),
        with(
            case(
                "workspaces: ignore_keys",
                W,
                json!([{"fault": "ignore_keys"}]),
                vec![send(ws().key("k"), Status(200)), send(ws().key("k"), Status(200))],
                2,
            ),
            &loose,
        ),
        with(
            case(
                "workspaces: a contract that ignores keys creates twice",
                W,
                json!([]),
                vec![send(ws().key("k"), Status(200)), send(ws().key("k"), Status(200))],
                2,
            ),
            &json!({"unique_business_key": false, "idempotency_keys": "ignored"}),
        ),
        with(
            case(
                "workspaces: a stale fencing token is refused",
                W,
                json!([]),
                vec![
                    send(ws().header("Fencing-Token", "2"), Status(200)),
                    send(ws().header("Fencing-Token", "1"), Error(409, "stale_fencing_token")),
                    send(ws().header("Fencing-Token", "2"), Status(200)),
                ],
                2,
            ),
            &loose,
        ),
        with(
            case(
                "workspaces: without fencing, tokens are ignored",
                W,
                json!([]),
                vec![
                    send(ws().header("Fencing-Token", "2"), Status(200)),
                    send(ws().header("Fencing-Token", "1"), Status(200)),
                ],
                2,
            ),
            &json!({"unique_business_key": false, "fencing": false}),
        ),
    ]);
    cases
}

/// Files (S3): every fault on PUT /{bucket}/{key}, mostly with the conditional writes that
/// S3 offers instead of idempotency keys.
fn files_cases() -> Vec<Case> {
    use Expect::*;
    // The quoted MD5 of "v2", which the stale-read case expects to see.
    const V2_ETAG: &str = "\"1b267619c4812cc46ee281747884ca50\"";
    vec![
        files_case(
            "files: refuse",
            json!([{"fault": "refuse", "method": "PUT"}]),
            vec![send(obj_put("k", "x"), Reset)],
            0,
        ),
        files_case(
            "files: reject answers S3's error document without storing",
            json!([{"fault": {"kind": "reject", "status": 503}, "nth": 1}]),
            vec![
                send(obj_put("k", "x"), S3(503, "SlowDown")),
                send(obj_get("k"), S3(404, "NoSuchKey")),
                send(obj_put("k", "x"), Status(200)),
            ],
            1,
        ),
        files_case(
            "files: error_after_commit, then the retried If-None-Match finds its own write: 412",
            json!([{"fault": "error_after_commit", "method": "PUT", "nth": 1}]),
            vec![
                send(obj_create("k", "x"), S3(500, "InternalError")),
                send(obj_create("k", "x"), S3(412, "PreconditionFailed")),
            ],
            1,
        ),
        files_case(
            "files: drop_after_commit, and the object is there",
            json!([{"fault": "drop_after_commit", "method": "PUT", "nth": 1}]),
            vec![send(obj_put("k", "x"), Closed), send(obj_get("k"), Status(200))],
            1,
        ),
        files_case(
            "files: drop_after_commit on DELETE removes the object",
            json!([{"fault": "drop_after_commit", "method": "DELETE"}]),
            vec![
                send(Req::new("DELETE", "/reports/q3.csv"), Closed),
                send(obj_get("q3.csv"), S3(404, "NoSuchKey")),
            ],
            1,
        ),
        files_case(
            "files: timeout_after_commit",
            json!([{"fault": {"kind": "timeout_after_commit", "hold_ms": 60000}, "method": "PUT"}]),
            vec![send_hasty(obj_put("k", "x"), Timeout), Step::Ledger(1)],
            1,
        ),
        files_case(
            "files: commit_after_timeout commits after the caller has gone; a read-back says 404 first",
            json!([{"fault": {"kind": "commit_after_timeout", "delay_ms": 3000}, "method": "PUT"}]),
            vec![
                send_hasty(obj_put("k", "x"), Timeout),
                send(obj_get("k"), S3(404, "NoSuchKey")),
                Step::Ledger(1),
                send(obj_get("k"), Status(200)),
            ],
            1,
        ),
        files_case(
            "files: commit_after_timeout keeps a conditional write in flight: 409, then 412",
            json!([{"fault": {"kind": "commit_after_timeout", "delay_ms": 3000}, "method": "PUT", "nth": 1}]),
            vec![
                send_hasty(obj_create("k", "x"), Timeout),
                send(obj_create("k", "x"), S3(409, "ConditionalRequestConflict")),
                Step::Ledger(1),
                send(obj_create("k", "x"), S3(412, "PreconditionFailed")),
            ],
            1,
        ),
        files_case(
            "files: silent_noop answers 200 and stores nothing",
            json!([{"fault": "silent_noop", "method": "PUT"}]),
            vec![send(obj_put("k", "x"), Status(200)), send(obj_get("k"), S3(404, "NoSuchKey"))],
            0,
        ),
        files_case(
            "files: stale_read serves the object as it was",
            json!([{"fault": {"kind": "stale_read", "lag_ms": 60000}, "method": "GET", "times": 2}]),
            vec![
                send(obj_put("q3.csv", "v2"), Status(200)),
                send(obj_put("new", "x"), Status(200)),
                send(obj_get("q3.csv").header("If-Match", V2_ETAG), S3(412, "PreconditionFailed")),
                send(obj_get("new"), S3(404, "NoSuchKey")),
                send(obj_get("q3.csv").header("If-Match", V2_ETAG), Status(200)),
            ],
            2,
        ),
        files_case(
            "files: forget_keys is harmless, S3 has no keys",
            json!([{"fault": "forget_keys", "nth": 2}]),
            vec![
                send(obj_put("k", "x").key("k1"), Status(200)),
                send(obj_put("k", "x").key("k1"), Status(200)),
            ],
            2,
        ),
        files_case(
            "files: ignore_keys is harmless, S3 has no keys",
            json!([{"fault": "ignore_keys"}]),
            vec![
                send(obj_put("k", "x").key("k1"), Status(200)),
                send(obj_put("k", "x").key("k1"), Status(200)),
            ],
            2,
        ),
        files_case(
            "files: latency before the commit: a racing conditional write gets 409",
            json!([{"fault": {"kind": "latency", "before_ms": 2000}, "method": "PUT", "nth": 1}]),
            vec![Step::Overlap {
                first: obj_create("k", "first"),
                after_ms: 300,
                second: obj_create("k", "second"),
                first_sees: Status(200),
                second_sees: S3(409, "ConditionalRequestConflict"),
            }],
            1,
        ),
        files_case(
            "files: latency after the commit still answers",
            json!([{"fault": {"kind": "latency", "after_ms": 200}}]),
            vec![send(obj_put("k", "x"), Status(200))],
            1,
        ),
        files_case(
            "files: rules match on bucket and key",
            json!([{"fault": "refuse", "where": {"bucket": "reports", "key": "b.txt"}}]),
            vec![send(obj_put("a.txt", "x"), Status(200)), send(obj_put("b.txt", "x"), Reset)],
            1,
        ),
    ]
}

/// Chain (Ethereum JSON-RPC): every fault on `eth_sendRawTransaction`, the write, and
/// `stale_read` on the block a client polls. Each case funds the sender first; blocks are
/// instant, so a committed send is mined at once and a resend of its bytes is a used nonce.
fn chain_cases() -> Vec<Case> {
    use Expect::*;

    use crate::chain::{VALUE, call, funding, latest_block, send_raw, transfer};
    let on_send =
        |fault: Value| json!([{"fault": fault, "where": {"rpc_method": "eth_sendRawTransaction"}, "nth": 1}]);
    let raw = transfer(0, VALUE).raw;
    let tx = move || send_raw(&raw);
    let mined = |n| send(latest_block(), Count("/result/transactions", n));
    let used_nonce = || Error(200, "nonce too low: next nonce 1, tx nonce 0");
    let chain_case = |name, rules, steps: Vec<Step>, ledger| {
        case(name, C, rules, [vec![send(funding(), Status(201))], steps].concat(), ledger)
    };
    vec![
        chain_case(
            "chain: refuse",
            on_send(json!("refuse")),
            vec![send(tx(), Reset), mined(0), send(tx(), Status(200))],
            1,
        ),
        chain_case(
            "chain: reject answers its status, nothing pooled",
            on_send(json!({"kind": "reject", "status": 429})),
            vec![send(tx(), Error(429, "error")), mined(0), send(tx(), Status(200)), mined(1)],
            1,
        ),
        chain_case(
            "chain: error_after_commit mines, answers 500; the resend is a used nonce",
            on_send(json!("error_after_commit")),
            vec![send(tx(), Error(500, "error")), send(tx(), used_nonce())],
            1,
        ),
        chain_case(
            "chain: drop_after_commit",
            on_send(json!("drop_after_commit")),
            vec![send(tx(), Closed), mined(1), send(tx(), used_nonce())],
            1,
        ),
        chain_case(
            "chain: timeout_after_commit",
            on_send(json!({"kind": "timeout_after_commit", "hold_ms": 60000})),
            vec![send_hasty(tx(), Timeout), Step::Ledger(1), send(tx(), used_nonce())],
            1,
        ),
        chain_case(
            "chain: commit_after_timeout pools after the caller has gone",
            on_send(json!({"kind": "commit_after_timeout", "delay_ms": 3000})),
            vec![send_hasty(tx(), Timeout), mined(0), Step::Ledger(1), mined(1)],
            1,
        ),
        chain_case(
            "chain: silent_noop answers the hash and pools nothing",
            on_send(json!("silent_noop")),
            vec![send(tx(), Status(200)), mined(0)],
            0,
        ),
        chain_case(
            "chain: stale_read serves the block as it was",
            json!([{"fault": {"kind": "stale_read", "lag_ms": 60000}, "where": {"rpc_method": "eth_getBlockByNumber"}, "times": 1}]),
            vec![send(tx(), Status(200)), mined(0), mined(1)],
            1,
        ),
        chain_case(
            "chain: forget_keys is harmless, a node has no keys",
            on_send(json!("forget_keys")),
            vec![send(tx().key("k"), Status(200)), send(tx().key("k"), used_nonce())],
            1,
        ),
        chain_case(
            "chain: ignore_keys is harmless, a node has no keys",
            on_send(json!("ignore_keys")),
            vec![send(tx().key("k"), Status(200)), send(tx().key("k"), used_nonce())],
            1,
        ),
        chain_case(
            "chain: latency still answers",
            on_send(json!({"kind": "latency", "before_ms": 300, "after_ms": 100})),
            vec![send(tx(), Status(200)), mined(1)],
            1,
        ),
        chain_case(
            "chain: rules match on rpc_method",
            json!([{"fault": "refuse", "where": {"rpc_method": "eth_sendRawTransaction"}}]),
            vec![send(call("eth_chainId", json!([])), Status(200)), send(tx(), Reset)],
            0,
        ),
    ]
}

/// Messages (Resend): every fault on `POST /emails`, the read faults on the test mailbox,
/// and the delivery faults, which only this service has. What counts is the inbox: a case
/// reads it, and its ledger holds one effect per delivery.
fn messages_cases() -> Vec<Case> {
    use Expect::*;
    let email = || Req::email("ada@example.com");
    let keyed = |key: &str| Req::email("ada@example.com").key(key);
    let inbox = |n| send(Req::mailbox("ada@example.com"), Count("/data", n));
    let on_send = |fault: Value| json!([{"fault": fault, "method": "POST", "path": "/emails", "nth": 1}]);
    vec![
        case("messages: refuse", M, on_send(json!("refuse")), vec![send(email(), Reset), inbox(0)], 0),
        case(
            "messages: reject answers Resend's 429, nothing sent",
            M,
            on_send(json!({"kind": "reject", "status": 429})),
            vec![
                send(email(), Resend(429, "rate_limit_exceeded")),
                inbox(0),
                send(email(), Status(200)),
                inbox(1),
            ],
            1,
        ),
        case(
            "messages: error_after_commit delivers, answers 500, and the key replays the 500",
            M,
            on_send(json!("error_after_commit")),
            vec![
                send(keyed("k"), Resend(500, "application_error")),
                inbox(1),
                send(keyed("k"), Replayed(500)),
            ],
            1,
        ),
        case(
            "messages: drop_after_commit delivers; the key replays the success",
            M,
            on_send(json!("drop_after_commit")),
            vec![send(keyed("k"), Closed), inbox(1), send(keyed("k"), Replayed(200)), inbox(1)],
            1,
        ),
        case(
            "messages: timeout_after_commit",
            M,
            on_send(json!({"kind": "timeout_after_commit", "hold_ms": 60000})),
            vec![send_hasty(email(), Timeout), Step::Ledger(1), inbox(1)],
            1,
        ),
        case(
            "messages: commit_after_timeout accepts and delivers after the caller has gone",
            M,
            on_send(json!({"kind": "commit_after_timeout", "delay_ms": 3000})),
            vec![send_hasty(email(), Timeout), inbox(0), Step::Ledger(1), inbox(1)],
            1,
        ),
        case(
            "messages: silent_noop answers an id and delivers nothing",
            M,
            on_send(json!("silent_noop")),
            vec![send(email(), Status(200)), inbox(0)],
            0,
        ),
        case(
            "messages: stale_read shows the inbox as it was",
            M,
            json!([{"fault": {"kind": "stale_read", "lag_ms": 60000}, "method": "GET", "times": 1}]),
            vec![send(email(), Status(200)), inbox(0), inbox(1)],
            1,
        ),
        case(
            "messages: forget_keys delivers the retry again",
            M,
            json!([{"fault": "forget_keys", "nth": 2}]),
            vec![send(keyed("k"), Status(200)), send(keyed("k"), Status(200)), inbox(2)],
            2,
        ),
        case(
            "messages: ignore_keys delivers the same key twice",
            M,
            json!([{"fault": "ignore_keys"}]),
            vec![send(keyed("k"), Status(200)), send(keyed("k"), Status(200)), inbox(2)],
            2,
        ),
        case(
            "messages: latency keeps the key in flight: Resend's concurrent_idempotent_requests",
            M,
            on_send(json!({"kind": "latency", "before_ms": 2000})),
            vec![Step::Overlap {
                first: keyed("k"),
                after_ms: 300,
                second: keyed("k"),
                first_sees: Status(200),
                second_sees: Resend(409, "concurrent_idempotent_requests"),
            }],
            1,
        ),
        case(
            "messages: deliver_late answers at once and delivers later",
            M,
            on_send(json!({"kind": "deliver_late", "delay_ms": 1500})),
            vec![send(email(), Status(200)), inbox(0), Step::Ledger(1), inbox(1)],
            1,
        ),
        // A webhook fault acts on the webhooks of the events a request makes (tests/it/webhooks.rs),
        // never on the request: the refund is answered and made as without it.
        case(
            "payments: a webhook fault leaves its request alone",
            P,
            json!([
                {"method": "POST", "path": "/v1/refunds", "fault": "duplicate_webhook"},
                {"method": "POST", "path": "/v1/refunds", "fault": {"kind": "delay_webhook", "delay_ms": 500}},
                {"method": "POST", "path": "/v1/refunds", "fault": "lose_webhook_ack"},
                {"method": "POST", "path": "/v1/refunds", "fault": {"kind": "webhook_endpoint_down", "for_ms": 500}},
                {"method": "POST", "path": "/v1/refunds", "fault": "stale_webhook"}
            ]),
            vec![send(refund(), Status(200)), Step::Ledger(1)],
            1,
        ),
        case(
            "messages: redeliver lands the message twice",
            M,
            on_send(json!({"kind": "redeliver", "after_ms": 500})),
            vec![send(email(), Status(200)), Step::Ledger(2), inbox(2)],
            2,
        ),
        case(
            "messages: the same key with another payload is invalid_idempotent_request",
            M,
            json!([]),
            vec![
                send(keyed("k"), Status(200)),
                send(Req::email("grace@example.com").key("k"), Resend(409, "invalid_idempotent_request")),
            ],
            1,
        ),
        case(
            "messages: rules match on the recipient, at a send and at its mailbox",
            M,
            json!([{"fault": "refuse", "where": {"to": "grace@example.com"}}]),
            vec![
                send(email(), Status(200)),
                send(Req::email("grace@example.com"), Reset),
                send(Req::mailbox("grace@example.com"), Reset),
                inbox(1),
            ],
            1,
        ),
    ]
}

fn check(seen: &Seen, expect: &Expect) -> Result<(), String> {
    let ok = match expect {
        Expect::Status(s) => seen.status() == Some(*s),
        Expect::Error(s, text) => {
            let Seen::Answer { body, .. } = seen else {
                return Err(format!("expected {expect:?}, saw {seen:?}"));
            };
            seen.status() == Some(*s) && body.contains(text) && seen.json().get("error").is_some()
        }
        Expect::S3(s, code) => {
            let Seen::Answer { body, .. } = seen else {
                return Err(format!("expected {expect:?}, saw {seen:?}"));
            };
            seen.status() == Some(*s) && body.contains(&format!("<Code>{code}</Code>"))
        }
        Expect::Resend(s, name) => {
            let body = seen.json();
            seen.status() == Some(*s)
                && body["statusCode"] == *s
                && body["name"] == *name
                && body["message"].as_str().is_some_and(|m| !m.is_empty())
        }
        Expect::Replayed(s) => {
            seen.status() == Some(*s) && seen.header("idempotent-replayed") == Some("true")
        }
        Expect::Count(pointer, n) => {
            seen.status() == Some(200)
                && seen.json().pointer(pointer).and_then(Value::as_array).map(Vec::len) == Some(*n)
        }
        Expect::Reset => *seen == Seen::Reset,
        Expect::Closed => *seen == Seen::Closed,
        Expect::Timeout => *seen == Seen::Timeout,
    };
    if ok { Ok(()) } else { Err(format!("expected {expect:?}, saw {seen:?}")) }
}

async fn run(case: Case) -> Result<(), String> {
    let running = Running::start(7).await;
    let addr = running.addr(case.service);
    let fake = running.fake(case.service);
    // Contract and rules go through the control API, as a `twice serve` user would send them.
    let control =
        |method, path: &str, body: &Value| Req::new(method, path.to_string()).body(body.to_string());
    let patched =
        client::send(addr, &control("PATCH", "/__twice/contract", &case.contract), PATIENT_MS).await;
    check(&patched, &Expect::Status(200))?;
    let armed = client::send(addr, &control("POST", "/__twice/rules", &case.rules), PATIENT_MS).await;
    check(&armed, &Expect::Status(201))?;
    for (i, step) in case.steps.iter().enumerate() {
        let at = |e: String| format!("step {}: {e}", i + 1);
        match step {
            Step::Send(req, timeout_ms, expect) => {
                check(&client::send(addr, req, *timeout_ms).await, expect).map_err(at)?
            }
            Step::Hasty(req, expect) => {
                check(&client::send_hasty(addr, req, &fake, HASTY_MS).await, expect).map_err(at)?
            }
            Step::Overlap { first, after_ms, second, first_sees, second_sees } => {
                let first = first.clone();
                let first = tokio::spawn(async move { client::send(addr, &first, PATIENT_MS).await });
                tokio::time::sleep(Duration::from_millis(*after_ms)).await;
                let second = client::send(addr, second, PATIENT_MS).await;
                check(&first.await.expect("the first request's task"), first_sees).map_err(at)?;
                check(&second, second_sees).map_err(at)?;
            }
            Step::Ledger(n) => {
                let deadline = tokio::time::Instant::now() + Duration::from_millis(PATIENT_MS);
                while fake.ledger().len() < *n && tokio::time::Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                if fake.ledger().len() != *n {
                    return Err(at(format!("ledger holds {}, expected {n}", fake.ledger().len())));
                }
            }
            Step::JumpMs(ms) => fake.clock().jump_ms(*ms),
        }
    }
    let effects = fake.ledger().len();
    if effects != case.ledger {
        return Err(format!("ledger holds {effects} effects, expected {}", case.ledger));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fault_on_every_service() {
    let mut tasks = tokio::task::JoinSet::new();
    for case in cases() {
        tasks.spawn(async move {
            let name = case.name;
            (name, run(case).await)
        });
    }
    let mut failures = Vec::new();
    let mut ran = 0;
    while let Some(done) = tasks.join_next().await {
        let (name, result) = done.expect("a case's task");
        ran += 1;
        if let Err(e) = result {
            failures.push(format!("{name}: {e}"));
        }
    }
    assert!(ran >= 30, "only {ran} cases ran");
    assert!(failures.is_empty(), "{} of {ran} cases failed:\n{}", failures.len(), failures.join("\n"));
}

/// Every fault kind appears in the table above for every service it can act on, so none is
/// untested.
#[test]
fn the_table_covers_every_fault_on_both_services() {
    let only_on = |kind: &str| match kind {
        "deliver_late" | "redeliver" => vocabulary::rule::DELIVERY_SERVICES,
        kind if vocabulary::rule::WEBHOOK_FAULT_KINDS.contains(&kind) => vocabulary::rule::WEBHOOK_SERVICES,
        _ => &[P, W, F, C, M],
    };
    for service in [P, W, F, C, M] {
        for kind in vocabulary::rule::FAULT_KINDS.iter().filter(|k| only_on(k).contains(&service)) {
            let covered = cases().iter().any(|c| c.service == service && c.rules.to_string().contains(kind));
            assert!(covered, "no case injects {kind} on {service}");
        }
    }
}
