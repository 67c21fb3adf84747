//! Every kind of mistake in a scenario file, and the exact error it gets.

use scenarios::parse_scenario;

/// The smallest valid scenario; each case appends to it (its last line is line 6).
const BASE: &str = r#"name = "t"

[[intents]]
id = "r1"
action = "payments.refund"
params = { payment_intent = "pi_1", amount = 100 }
"#;

/// The error `parse_scenario` gives for BASE followed by `tail`, rendered.
fn error_of(tail: &str) -> String {
    match parse_scenario(&format!("{BASE}{tail}"), "s.toml") {
        Ok(s) => format!("accepted: {s:?}"),
        Err(e) => e.to_string(),
    }
}

/// Renders `tail`'s error; the two cases that are about the base itself replace it.
pub fn rendered(name: &str, tail: &str) -> String {
    let text = match name {
        "name not a slug" => BASE.replace("name = \"t\"", "name = \"Lost Reply\""),
        "no intents" => "name = \"t\"\n".to_string(),
        _ => return error_of(tail),
    };
    match parse_scenario(&text, "s.toml") {
        Ok(s) => format!("accepted: {s:?}"),
        Err(e) => e.to_string(),
    }
}

/// Each mistake: a name, what is appended to BASE, and the error it must get.
pub const CASES: &[(&str, &str, &str)] = &[
    ("toml syntax", "description = \"unterminated\n", "s.toml:7:28: invalid basic string, expected `\"`"),
    (
        "unknown top-level key",
        "[[intent]]\nid = \"r2\"\n",
        "s.toml:7:3: unknown key `intent` in the scenario (did you mean \"intents\"?)",
    ),
    (
        "misspelt rule key",
        "[[faults]]\nservice = \"payments\"\nnht = 1\nfault = \"refuse\"\n",
        "s.toml:9:1: unknown key `nht` in a [[faults]] table (did you mean \"nth\"?)",
    ),
    (
        "unknown fault name",
        "[[faults]]\nservice = \"payments\"\nfault = \"drop_after_comit\"\n",
        "s.toml:9:9: unknown fault \"drop_after_comit\" (did you mean \"drop_after_commit\"?)",
    ),
    (
        "unknown fault kind in a table",
        "[[faults]]\nservice = \"payments\"\nfault = { kind = \"silent_nop\" }\n",
        "s.toml:9:18: unknown fault \"silent_nop\" (did you mean \"silent_noop\"?)",
    ),
    (
        "misspelt fault parameter",
        "[[faults]]\nservice = \"payments\"\nfault = { kind = \"timeout_after_commit\", hold = 5000 }\n",
        "s.toml:9:42: `hold` is not a parameter of timeout_after_commit (timeout_after_commit takes hold_ms)",
    ),
    (
        "parameter of a fault that takes none",
        "[[faults]]\nservice = \"payments\"\nfault = { kind = \"refuse\", status = 500 }\n",
        "s.toml:9:28: `status` is not a parameter of refuse (refuse takes no parameters)",
    ),
    (
        "fault table without kind",
        "[[faults]]\nservice = \"payments\"\nfault = { status = 503 }\n",
        "s.toml:9:9: a fault table needs `kind` (e.g. kind = \"reject\")",
    ),
    (
        "fault that needs parameters",
        "[[faults]]\nservice = \"payments\"\nfault = \"reject\"\n",
        "s.toml:9:9: fault \"reject\" needs a status: {kind = \"reject\", status = 503}",
    ),
    (
        "fault of the wrong type",
        "[[faults]]\nservice = \"payments\"\nfault = 3\n",
        "s.toml:9:9: `fault` must be a name or a table, found an integer (e.g. fault = \"drop_after_commit\" or fault = { kind = \"reject\", status = 503 })",
    ),
    (
        "rule without fault",
        "[[faults]]\nservice = \"payments\"\nnth = 1\n",
        "s.toml:7:1: a [[faults]] table needs `fault`",
    ),
    (
        "rule without service",
        "[[faults]]\nfault = \"refuse\"\n",
        "s.toml:7:1: a [[faults]] table needs `service`",
    ),
    (
        "unknown service in a rule",
        "[[faults]]\nservice = \"payment\"\nfault = \"refuse\"\n",
        "s.toml:8:11: unknown service \"payment\" (did you mean \"payments\"?)",
    ),
    (
        "nth zero",
        "[[faults]]\nservice = \"payments\"\nnth = 0\nfault = \"refuse\"\n",
        "s.toml:9:7: nth is 1-based: the first matching request is nth = 1",
    ),
    (
        "nth as a string",
        "[[faults]]\nservice = \"payments\"\nnth = \"1\"\nfault = \"refuse\"\n",
        "s.toml:9:7: `nth` must be an integer, found a string",
    ),
    (
        "times zero",
        "[[faults]]\nservice = \"payments\"\ntimes = 0\nfault = \"refuse\"\n",
        "s.toml:9:9: times = 0 never fires (remove the rule instead)",
    ),
    (
        "probability out of range",
        "[[faults]]\nservice = \"payments\"\nprobability = 1.5\nfault = \"refuse\"\n",
        "s.toml:9:15: probability is 1.5; it must be between 0 and 1",
    ),
    (
        "method not a word",
        "[[faults]]\nservice = \"payments\"\nmethod = \"PO ST\"\nfault = \"refuse\"\n",
        "s.toml:9:10: method \"PO ST\" is not an HTTP method",
    ),
    (
        "path without slash",
        "[[faults]]\nservice = \"payments\"\npath = \"v1/refunds\"\nfault = \"refuse\"\n",
        "s.toml:9:8: path \"v1/refunds\" must start with '/' (e.g. \"/v1/refunds\", or \"/v1/*\" for a prefix)",
    ),
    (
        "where with a number",
        "[[faults]]\nservice = \"payments\"\nwhere = { amount = 100 }\nfault = \"refuse\"\n",
        "s.toml:9:20: `where` compares request fields as text, so `amount` must be a string (write it in quotes: amount = \"100\")",
    ),
    (
        "status outside 400..599",
        "[[faults]]\nservice = \"payments\"\nfault = { kind = \"reject\", status = 200 }\n",
        "s.toml:9:9: reject.status is 200; a fault's status must be an error, 400 to 599",
    ),
    (
        "hold above the bound",
        "[[faults]]\nservice = \"payments\"\nfault = { kind = \"timeout_after_commit\", hold_ms = 999999999 }\n",
        "s.toml:9:9: timeout_after_commit.hold_ms is 999999999, above the limit of 600000 ms",
    ),
    (
        "duplicate rule id",
        "[[faults]]\nservice = \"payments\"\nid = \"a\"\nfault = \"refuse\"\n\n[[faults]]\nservice = \"payments\"\nid = \"a\"\nfault = \"refuse\"\n",
        "s.toml:14:6: rule id \"a\" is already used on payments",
    ),
    (
        "unfair silent no-op",
        "[[faults]]\nservice = \"payments\"\nfault = \"silent_noop\"\n",
        "s.toml:9:9: unfair fault on payments: silent_noop breaks a contract whose acks are reliable (announce it: acks = \"may_lie\" under [services.payments])",
    ),
    (
        "unfair ignore_keys",
        "[[faults]]\nservice = \"payments\"\nfault = \"ignore_keys\"\n",
        "s.toml:9:9: unfair fault on payments: ignore_keys breaks a contract whose idempotency_keys are honored (announce it: idempotency_keys = \"ignored\" under [services.payments])",
    ),
    (
        "unfair stale read",
        "[services.payments]\nreads = \"eventual\"\nread_lag_ms_max = 100\n\n[[faults]]\nservice = \"payments\"\nfault = { kind = \"stale_read\", lag_ms = 500 }\n",
        "s.toml:13:9: unfair fault on payments: stale_read lag_ms 500 exceeds the contract's read_lag_ms_max 100 (announce it: reads = \"eventual\" and read_lag_ms_max = 500 (or more) under [services.payments])",
    ),
    (
        "unfair late commit",
        "[services.payments]\nsettle_ms_max = 500\n\n[[faults]]\nservice = \"payments\"\nfault = { kind = \"commit_after_timeout\", delay_ms = 800 }\n",
        "s.toml:12:9: unfair fault on payments: commit_after_timeout delay_ms 800 exceeds the contract's settle_ms_max 500 (announce settle_ms_max = 800 (or more) under [services.payments], or shorten delay_ms)",
    ),
    (
        "unfair forget_keys",
        "[services.payments]\nkey_retention_ms = 2000\n\n[[faults]]\nservice = \"payments\"\nfault = { kind = \"forget_keys\", older_than_ms = 1000 }\n",
        "s.toml:12:9: unfair fault on payments: forget_keys older_than_ms 1000 forgets keys inside the contract's key_retention_ms 2000 (set older_than_ms to at least key_retention_ms (2000), or shorten key_retention_ms under [services.payments])",
    ),
    (
        "unknown service table",
        "[services.paymnts]\nsettle_ms_max = 500\n",
        "s.toml:7:11: unknown service \"paymnts\" (did you mean \"payments\"?)",
    ),
    (
        "misspelt contract term",
        "[services.payments]\nsettle_ms = 500\n",
        "s.toml:8:1: unknown key `settle_ms` in [services.payments] (did you mean \"settle_ms_max\"?)",
    ),
    (
        "unknown contract value",
        "[services.payments]\nacks = \"maylie\"\n",
        "s.toml:8:8: unknown acks \"maylie\" (did you mean \"may_lie\"?)",
    ),
    (
        "contract value of the wrong type",
        "[services.payments]\nfencing = \"yes\"\n",
        "s.toml:8:11: `fencing` must be true or false, found a string",
    ),
    (
        "negative milliseconds",
        "[services.payments]\nsettle_ms_max = -5\n",
        "s.toml:8:17: `settle_ms_max` must not be negative, found -5",
    ),
    (
        "unknown limit",
        "[limits]\nrequest_timeout = 500\n",
        "s.toml:8:1: unknown key `request_timeout` in [limits] (did you mean \"request_timeout_ms\"?)",
    ),
    (
        "lease out of range",
        "[limits]\nlease_ms = 5\n",
        "s.toml:8:12: lease_ms is 5; it must be 100 to 600000",
    ),
    (
        "unknown action",
        "\n[[intents]]\nid = \"r2\"\naction = \"payments.refnd\"\nparams = { payment_intent = \"pi_2\", amount = 1 }\n",
        "s.toml:10:10: unknown action \"payments.refnd\" (did you mean \"payments.refund\"?)",
    ),
    (
        "misspelt intent key",
        "\n[[intents]]\nid = \"r2\"\naction = \"payments.refund\"\nparam = { payment_intent = \"pi_2\", amount = 1 }\n",
        "s.toml:11:1: unknown key `param` in a [[intents]] table (did you mean \"params\"?)",
    ),
    (
        "missing parameter",
        "\n[[intents]]\nid = \"r2\"\naction = \"payments.refund\"\nparams = { payment_intent = \"pi_2\" }\n",
        "s.toml:11:10: payments.refund needs parameter \"amount\" (it takes payment_intent, amount)",
    ),
    (
        "unknown parameter",
        "\n[[intents]]\nid = \"r2\"\naction = \"payments.refund\"\nparams = { payment_intent = \"pi_2\", amount = 1, reason = \"x\" }\n",
        "s.toml:11:49: payments.refund has no parameter \"reason\" (expected one of: payment_intent, amount)",
    ),
    (
        "zero amount",
        "\n[[intents]]\nid = \"r2\"\naction = \"payments.refund\"\nparams = { payment_intent = \"pi_2\", amount = 0 }\n",
        "s.toml:11:46: amount must be an integer from 1 to 1000000000000, found 0",
    ),
    (
        "params not a table",
        "\n[[intents]]\nid = \"r2\"\naction = \"payments.refund\"\nparams = \"pi_2\"\n",
        "s.toml:11:10: `params` must be a table, found a string",
    ),
    (
        "duplicate intent id",
        "\n[[intents]]\nid = \"r1\"\naction = \"payments.refund\"\nparams = { payment_intent = \"pi_2\", amount = 1 }\n",
        "s.toml:9:6: intent id \"r1\" is already used by intents[0] (intent ids are unique within a scenario)",
    ),
    (
        "intent id with a space",
        "\n[[intents]]\nid = \"r 2\"\naction = \"payments.refund\"\nparams = { payment_intent = \"pi_2\", amount = 1 }\n",
        "s.toml:9:6: an intent id must not contain spaces or control characters",
    ),
    (
        "replaces an unknown intent",
        "\n[[intents]]\nid = \"r2\"\naction = \"payments.refund\"\nparams = { payment_intent = \"pi_1\", amount = 50 }\nreplaces = \"r3\"\n",
        "s.toml:12:12: unknown intent \"r3\" (did you mean \"r1\"?)",
    ),
    (
        "replaces a later intent",
        "\n[[intents]]\nid = \"r2\"\naction = \"payments.refund\"\nparams = { payment_intent = \"pi_1\", amount = 50 }\nreplaces = \"r3\"\n\n[[intents]]\nid = \"r3\"\naction = \"payments.refund\"\nparams = { payment_intent = \"pi_9\", amount = 50 }\n",
        "s.toml:12:12: intent r2 replaces r3, which comes later (a replacement must follow the intent it replaces)",
    ),
    (
        "replaces another action",
        "\n[[intents]]\nid = \"w1\"\naction = \"workspaces.create\"\nparams = { external_id = \"e\", name = \"n\" }\nreplaces = \"r1\"\n",
        "s.toml:12:12: intent w1 (workspaces.create) cannot replace r1 (payments.refund): a replacement is the same action",
    ),
    (
        "replaced twice",
        "\n[[intents]]\nid = \"r2\"\naction = \"payments.refund\"\nparams = { payment_intent = \"pi_1\", amount = 50 }\nreplaces = \"r1\"\n\n[[intents]]\nid = \"r3\"\naction = \"payments.refund\"\nparams = { payment_intent = \"pi_1\", amount = 40 }\nreplaces = \"r1\"\n",
        "s.toml:18:12: intent r1 is already replaced by r2 (a lineage is a chain: replace r2 instead)",
    ),
    (
        "lineage changes payment intent",
        "\n[[intents]]\nid = \"r2\"\naction = \"payments.refund\"\nparams = { payment_intent = \"pi_2\", amount = 50 }\nreplaces = \"r1\"\n",
        "s.toml:11:29: a replacement acts on the same payment_intent as its lineage: r1 has pi_1, this one pi_2",
    ),
    (
        "external id shared across lineages",
        "\n[[intents]]\nid = \"w1\"\naction = \"workspaces.create\"\nparams = { external_id = \"acme\", name = \"Acme\" }\n\n[[intents]]\nid = \"w2\"\naction = \"workspaces.create\"\nparams = { external_id = \"acme\", name = \"Acme 2\" }\n",
        "s.toml:16:26: external_id acme is already used by intent w1 of another lineage; workspaces.create acts on one external_id per lineage, so each lineage needs its own (use another external_id, or set replaces = \"w1\" if this intent replaces it)",
    ),
    (
        "unknown event",
        "[[events]]\nat = { after_phase = \"act\" }\ndo = \"crsh\"\n",
        "s.toml:9:6: unknown event \"crsh\" (did you mean \"crash\"?)",
    ),
    (
        "key of another event",
        "[[events]]\nat = { after_phase = \"act\" }\ndo = \"crash\"\nfor_ms = 10\n",
        "s.toml:10:1: `for_ms` does not apply to crash (it is a key of pause)",
    ),
    (
        "unknown event key",
        "[[events]]\nat = { after_phase = \"act\" }\ndo = \"pause\"\nfor_mss = 10\n",
        "s.toml:10:1: unknown key `for_mss` in a [[events]] table (did you mean \"for_ms\"?)",
    ),
    ("event without at", "[[events]]\ndo = \"heal\"\n", "s.toml:7:1: a [[events]] table needs `at`"),
    (
        "point without a kind",
        "[[events]]\nat = { nth = 2 }\ndo = \"heal\"\n",
        "s.toml:8:6: a point needs `service` (a request), `after_propose` or `after_phase` (e.g. at = { service = \"payments\", method = \"POST\", nth = 1 })",
    ),
    (
        "point mixing kinds",
        "[[events]]\nat = { after_propose = \"r1\", nth = 2 }\ndo = \"heal\"\n",
        "s.toml:8:30: `nth` does not go with `after_propose` (a point is a request (service, method, path, nth), after_propose or after_phase)",
    ),
    (
        "misspelt point key",
        "[[events]]\nat = { after_propos = \"r1\" }\ndo = \"heal\"\n",
        "s.toml:8:8: unknown key `after_propos` in `at` (did you mean \"after_propose\"?)",
    ),
    (
        "unknown phase",
        "[[events]]\nat = { after_phase = \"drian\" }\ndo = \"heal\"\n",
        "s.toml:8:22: unknown phase \"drian\" (did you mean \"drain\"?)",
    ),
    (
        "point at an unknown intent",
        "[[events]]\nat = { after_propose = \"r9\" }\ndo = \"heal\"\n",
        "s.toml:8:24: unknown intent \"r9\" (did you mean \"r1\"?)",
    ),
    (
        "point at an unknown service",
        "[[events]]\nat = { service = \"workspace\" }\ndo = \"heal\"\n",
        "s.toml:8:18: unknown service \"workspace\" (did you mean \"workspaces\"?)",
    ),
    (
        "worker not started",
        "[[events]]\nat = { after_phase = \"act\" }\ndo = \"crash\"\nworker = \"w2\"\n",
        "s.toml:10:10: worker \"w2\" is not running here (only w1 runs from the start; a start_worker event listed earlier starts another; did you mean \"w1\"?)",
    ),
    (
        "worker started twice",
        "[[events]]\nat = { after_phase = \"act\" }\ndo = \"start_worker\"\nworker = \"w1\"\n",
        "s.toml:10:10: worker \"w1\" is already running (give the new worker another id, e.g. \"w2\")",
    ),
    (
        "start_worker without a worker",
        "[[events]]\nat = { after_phase = \"act\" }\ndo = \"start_worker\"\n",
        "s.toml:7:1: a [[events]] table needs `worker`",
    ),
    (
        "pause too long",
        "[[events]]\nat = { after_phase = \"act\" }\ndo = \"pause\"\nfor_ms = 70000\n",
        "s.toml:10:10: a pause of 70000 ms; a pause lasts 1 to 60000 ms",
    ),
    (
        "pause without for_ms",
        "[[events]]\nat = { after_phase = \"act\" }\ndo = \"pause\"\n",
        "s.toml:7:1: a [[events]] table needs `for_ms`",
    ),
    (
        "negative pause",
        "[[events]]\nat = { after_phase = \"act\" }\ndo = \"pause\"\nfor_ms = -1\n",
        "s.toml:10:10: `for_ms` must not be negative, found -1",
    ),
    (
        "unfair clock jump",
        "[[events]]\nat = { after_phase = \"act\" }\ndo = \"clock_jump\"\nservice = \"payments\"\nby_ms = 90000000\n",
        "s.toml:11:9: unfair: clock jumps on payments add up to 90000000 ms, not under the request timeout (2000 ms); payments honours idempotency keys, and a jump ages them on its clock only (to expire keys, announce a short key_retention_ms and let real time pass; or jump a service whose idempotency_keys are \"ignored\")",
    ),
    (
        "unknown state",
        "[expect]\nr1 = \"confimed\"\n",
        "s.toml:8:6: unknown state \"confimed\" (did you mean \"confirmed\"?)",
    ),
    (
        "unknown state among honest ones",
        "[expect]\nr1 = [\"escalated\", \"faild\"]\n",
        "s.toml:8:20: unknown state \"faild\" (did you mean \"failed\"?)",
    ),
    (
        "a state listed twice",
        "[expect]\nr1 = [\"failed\", \"failed\"]\n",
        "s.toml:8:17: `failed` is listed twice",
    ),
    (
        "an expectation that is no state",
        "[expect]\nr1 = 5\n",
        "s.toml:8:6: `r1` must be a state or a non-empty array of states, found an integer (write r1 = \"confirmed\", or r1 = [\"escalated\", \"failed\"] where each is honest)",
    ),
    (
        "an empty list of states",
        "[expect]\nr1 = []\n",
        "s.toml:8:6: `r1` must be a state or a non-empty array of states, found an array (write r1 = \"confirmed\", or r1 = [\"escalated\", \"failed\"] where each is honest)",
    ),
    (
        "expectation for an unknown intent",
        "[expect]\nr2 = \"confirmed\"\n",
        "s.toml:8:1: unknown intent \"r2\" (did you mean \"r1\"?)",
    ),
    (
        "name not a slug",
        "",
        "s.toml:1:8: name \"Lost Reply\" is not a slug (use 1 to 64 lowercase letters, digits, '_' and '-', starting with a letter or digit)",
    ),
    (
        "no intents",
        "",
        "s.toml:1:1: a scenario needs at least one intent (add an [[intents]] table with id, action and params)",
    ),
    (
        "date value",
        "\n[[intents]]\nid = \"r2\"\naction = \"workspaces.create\"\nparams = { external_id = 1979-05-27, name = \"n\" }\n",
        "s.toml:11:26: `external_id` is a date, which scenarios do not use (write it as a string)",
    ),
    (
        "wei as an integer",
        "\n[[intents]]\nid = \"t1\"\naction = \"chain.transfer\"\nparams = { to = \"0x00000000000000000000000000000000000000b1\", value = 1000 }\n",
        "s.toml:11:71: value must be 1 to 1000000000000000000000 wei, found 1000 (write wei as a decimal string, e.g. \"1000000000000000000\" for one ether: it outgrows TOML's integers)",
    ),
    (
        "an address in mixed case",
        "\n[[intents]]\nid = \"t1\"\naction = \"chain.transfer\"\nparams = { to = \"0x00000000000000000000000000000000000000B1\", value = \"1000\" }\n",
        "s.toml:11:17: to \"0x00000000000000000000000000000000000000B1\" is not a lowercase 0x address (write it in lowercase: the chain's ledger does, and effects are matched by it as text)",
    ),
    (
        "transfers beyond the balance",
        "\n[[intents]]\nid = \"t1\"\naction = \"chain.transfer\"\nparams = { to = \"0x00000000000000000000000000000000000000b1\", value = \"1000000000000000000000\" }\n",
        "s.toml:11:71: the transfers add up to 1000000000000000000000 wei, more than the 999000000000000000000 wei the chain account can send (it holds 1000000000000000000000 wei and keeps 1000000000000000000 for gas) (such a transfer can only be refused for insufficient funds; send less)",
    ),
    (
        "a bucket name with capitals",
        "\n[[intents]]\nid = \"f1\"\naction = \"files.put\"\nparams = { bucket = \"Reports\", key = \"q3.csv\", body = \"v2\" }\n",
        "s.toml:11:21: bucket \"Reports\" is not a bucket name (use 3 to 63 lowercase letters, digits, '.' and '-', starting and ending with a letter or digit)",
    ),
    (
        "misspelt object key",
        "\n[[objects]]\nbucket = \"reports\"\nkee = \"q3.csv\"\nbody = \"v1\"\n",
        "s.toml:10:1: unknown key `kee` in a [[objects]] table (did you mean \"key\"?)",
    ),
    (
        "an object seeded twice",
        "\n[[objects]]\nbucket = \"reports\"\nkey = \"q3.csv\"\nbody = \"v1\"\n\n[[objects]]\nbucket = \"reports\"\nkey = \"q3.csv\"\nbody = \"v2\"\n",
        "s.toml:15:7: reports/q3.csv is already seeded by objects[0] (an object is seeded once; its body is what the service holds before the run)",
    ),
    (
        "a put of the seeded body",
        "\n[[objects]]\nbucket = \"reports\"\nkey = \"q3.csv\"\nbody = \"v1\"\n\n[[intents]]\nid = \"f1\"\naction = \"files.put\"\nparams = { bucket = \"reports\", key = \"q3.csv\", body = \"v1\" }\n",
        "s.toml:16:55: reports/q3.csv is seeded with this very body (a put that changes nothing leaves no trace a read could find; write another body)",
    ),
    (
        "after names an unknown intent",
        "[[intents]]\nid = \"r2\"\naction = \"payments.refund\"\nafter = [\"r9\"]\nparams = { payment_intent = \"pi_2\", amount = 100 }\n",
        "s.toml:10:10: unknown intent \"r9\" (did you mean \"r1\"?)",
    ),
    (
        "after names a later intent",
        "[[intents]]\nid = \"r2\"\naction = \"payments.refund\"\nafter = [\"r3\"]\nparams = { payment_intent = \"pi_2\", amount = 100 }\n\n[[intents]]\nid = \"r3\"\naction = \"payments.refund\"\nparams = { payment_intent = \"pi_3\", amount = 100 }\n",
        "s.toml:10:10: intent r2 comes after r3, which comes later (list a step after the intents it comes after)",
    ),
    (
        "after is not a list",
        "[[intents]]\nid = \"r2\"\naction = \"payments.refund\"\nafter = \"r1\"\nparams = { payment_intent = \"pi_2\", amount = 100 }\n",
        "s.toml:10:9: `after` must be an array of strings, found a string (write after = [\"an-id\", \"another-id\"])",
    ),
    (
        "a reference to an intent not in after",
        "[[intents]]\nid = \"p1\"\naction = \"files.put\"\nparams = { bucket = \"docs\", key = \"a.md\", body = { from = \"r1\", field = \"id\" } }\n",
        "s.toml:10:50: parameter \"body\" reads from \"r1\", which must also be listed in \"after\" (add after = [\"r1\"])",
    ),
    (
        "a reference in the business key",
        "[[intents]]\nid = \"p1\"\naction = \"files.put\"\nafter = [\"r1\"]\nparams = { bucket = \"docs\", key = { from = \"r1\", field = \"id\" }, body = \"x\" }\n",
        "s.toml:11:35: key of files.put cannot take its value from another intent (only text parameters and object keys other than the business key (key) can)",
    ),
    (
        "a reference to a result field the action has not",
        "[[intents]]\nid = \"p1\"\naction = \"files.put\"\nafter = [\"r1\"]\nparams = { bucket = \"docs\", key = \"a.md\", body = { from = \"r1\", field = \"etag\" } }\n",
        "s.toml:11:50: parameter \"body\": payments.refund has no result field \"etag\"; it has: id (a reference reads a result field of an earlier intent listed in after)",
    ),
    (
        "a reference format without its placeholder",
        "[[intents]]\nid = \"p1\"\naction = \"files.put\"\nafter = [\"r1\"]\nparams = { bucket = \"docs\", key = \"a.md\", body = { from = \"r1\", field = \"id\", format = \"no value\" } }\n",
        "s.toml:11:50: \"format\" must hold \"{}\" exactly once, where the value goes (a reference is { from = \"<earlier intent id>\", field = \"<result field>\" }, with an optional format = \"text with {}\")",
    ),
];

#[test]
fn every_mistake_gets_a_precise_error() {
    let cases = CASES;
    let mut wrong = Vec::new();
    for (name, tail, want) in cases {
        let got = rendered(name, tail);
        if got != *want {
            wrong.push(format!("{name}:\n  want {want}\n  got  {got}"));
        }
    }
    assert!(wrong.is_empty(), "{} of {} cases differ:\n{}", wrong.len(), cases.len(), wrong.join("\n"));
}

/// The error for an unknown fault reads as the fakes' own wording.
#[test]
fn unknown_fault_reads_like_the_fakes() {
    let got = error_of("[[faults]]\nservice = \"payments\"\nfault = \"drop_after_comit\"\n");
    assert!(got.ends_with(&vocabulary::rule::unknown_fault("drop_after_comit")), "{got}");
}

/// Columns count characters, not bytes; CRLF files get the same lines as LF ones.
#[test]
fn positions_are_lines_and_characters() {
    let tail = "\n[[intents]]\nid = \"r2\"\naction = \"workspaces.create\"\nparams = { name = \"é中\", external_id = \"\" }\n";
    assert_eq!(error_of(tail), "s.toml:11:39: external_id must be a string of 1 to 200 characters");
    let crlf = format!("{BASE}{tail}").replace('\n', "\r\n");
    assert_eq!(
        parse_scenario(&crlf, "s.toml").unwrap_err().to_string(),
        "s.toml:11:39: external_id must be a string of 1 to 200 characters"
    );
    assert_eq!(
        parse_scenario("", "empty.toml").unwrap_err().to_string(),
        "empty.toml:1:1: the scenario needs `name`"
    );
}

/// Files: read errors name the path; parse errors use the path as origin.
#[test]
fn loading_a_file_names_it() {
    let dir = std::env::temp_dir().join(format!("twice-scenarios-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("refund.toml");
    std::fs::write(&path, format!("{BASE}\n[expect]\nr1 = \"done\"\n")).unwrap();
    let err = scenarios::parse_file(&path).unwrap_err().to_string();
    assert_eq!(
        err,
        format!(
            "{}:9:6: unknown state \"done\" (expected one of: recorded, blocked, submitted, confirmed, failed, unknown, escalated)",
            path.display()
        )
    );
    let missing = dir.join("missing.toml");
    let err = scenarios::parse_file(&missing).unwrap_err().to_string();
    assert!(err.starts_with(&format!("{}: cannot read: ", missing.display())), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A scenario's name becomes part of file names (failure files, baseline traces, work
/// directories): the validator refuses every name that could reach outside a directory or
/// trouble a file system, with the slug error, before any file is named after it.
#[test]
fn names_that_would_make_unsafe_file_names_are_refused() {
    let long = "a".repeat(10_000);
    for name in [
        "../escape",
        "a/b",
        "a\\\\b",
        "nul\\u0000byte",
        "bell\\u0007",
        ".hidden",
        "what?<>:|*",
        "CON.txt",
        long.as_str(),
    ] {
        let text = BASE.replace("name = \"t\"", &format!("name = \"{name}\""));
        let error = match parse_scenario(&text, "s.toml") {
            Ok(_) => panic!("{name:?} accepted"),
            Err(e) => e.to_string(),
        };
        assert!(
            error.starts_with("s.toml:1:8: name \"")
                && error.contains("\" is not a slug (use 1 to 64 lowercase"),
            "{name:?}: {error}"
        );
    }
}
