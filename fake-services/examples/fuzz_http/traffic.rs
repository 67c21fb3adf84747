//! The requests: generated per service from a seeded RNG, then (some of them) mutated at the
//! byte level. `request(seed, service, index)` is a pure function, so a seed and an index
//! reproduce a request exactly.

use base64::Engine as _;
use md5::{Digest as _, Md5};
use rand::{Rng as _, RngExt as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};

/// The path every generated control-API rule is pinned to: no fuzzed request asks for it, so
/// a rule the fuzz arms through the control API never fires on the fuzz's own traffic.
pub const NEVER_PATH: &str = "/__fuzz_never__";

/// One request on the wire.
#[derive(Clone, Debug)]
pub struct WireRequest {
    pub bytes: Vec<u8>,
    /// A HEAD: the answer has no body whatever its `Content-Length`.
    pub head: bool,
    /// Byte-level mutated: it may be refused by the HTTP parser or end without an answer
    /// (a truncated body), so it is sent alone on a fresh, half-closed connection.
    pub mutated: bool,
    /// A control-API request (`/__twice/...`): never journaled.
    pub control: bool,
}

/// A request before serialisation.
struct Parts {
    method: String,
    target: String,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
    control: bool,
}

impl Parts {
    fn new(method: &str, target: impl Into<String>) -> Self {
        Parts {
            method: method.into(),
            target: target.into(),
            headers: Vec::new(),
            body: Vec::new(),
            control: false,
        }
    }

    fn header(mut self, name: &str, value: impl Into<Vec<u8>>) -> Self {
        self.headers.push((name.to_string(), value.into()));
        self
    }

    fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    fn wire(self) -> WireRequest {
        let mut bytes = Vec::with_capacity(self.body.len() + 256);
        bytes.extend_from_slice(self.method.as_bytes());
        bytes.push(b' ');
        bytes.extend_from_slice(self.target.as_bytes());
        bytes.extend_from_slice(b" HTTP/1.1\r\nHost: 127.0.0.1\r\n");
        for (name, value) in &self.headers {
            bytes.extend_from_slice(name.as_bytes());
            bytes.extend_from_slice(b": ");
            bytes.extend_from_slice(value);
            bytes.extend_from_slice(b"\r\n");
        }
        bytes.extend_from_slice(format!("Content-Length: {}\r\n\r\n", self.body.len()).as_bytes());
        bytes.extend_from_slice(&self.body);
        WireRequest { bytes, head: self.method == "HEAD", mutated: false, control: self.control }
    }
}

/// Signed raw transactions the chain requests draw from (signing each request would cost
/// more than serving it).
pub struct Pool {
    raw_txs: Vec<String>,
}

/// The chain's funded account: the key the fake's own tests use.
pub const CHAIN_KEY: &str = "0x4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318";
const CHAIN_TO: &str = "0x00000000000000000000000000000000000000aa";

impl Pool {
    pub fn new() -> Result<Pool, String> {
        let mut raw_txs = Vec::new();
        for nonce in 0..48u64 {
            for (chain_id, gas) in [(31_337u64, 21_000u64), (1, 21_000), (31_337, 20_000)] {
                let (raw, _) = fake_services::chain::sign_transfer(
                    CHAIN_KEY,
                    chain_id,
                    nonce,
                    CHAIN_TO,
                    u128::from(nonce) * 1_000,
                    2_000_000_000,
                    1_000_000_000,
                    gas,
                )?;
                raw_txs.push(hex(&raw));
            }
        }
        Ok(Pool { raw_txs })
    }
}

fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(2 + bytes.len() * 2);
    s.push_str("0x");
    for b in bytes {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// The services, in a fixed order: the RNG stream of a request depends on the position.
pub const SERVICES: [&str; 5] = ["payments", "workspaces", "files", "chain", "messages"];

/// The request `index` of `service` under `seed`.
pub fn request(seed: u64, service: &str, index: u64, pool: &Pool, allow_rules: bool) -> WireRequest {
    let position = SERVICES.iter().position(|s| *s == service).unwrap_or(0) as u64;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream((position << 48) | index);
    let parts = if rng.random_ratio(1, 30) {
        control(&mut rng, service, allow_rules)
    } else {
        match service {
            "payments" => payments(&mut rng),
            "workspaces" => workspaces(&mut rng),
            "files" => files(&mut rng),
            "chain" => chain(&mut rng, pool),
            _ => messages(&mut rng),
        }
    };
    let no_mutation = parts.control && parts.target.starts_with("/__twice/rules");
    let mut wire = parts.wire();
    if !no_mutation && rng.random_ratio(1, 7) {
        mutate(&mut rng, &mut wire.bytes);
        wire.mutated = true;
    }
    wire
}

fn pick<'a, T: ?Sized>(rng: &mut ChaCha8Rng, items: &[&'a T]) -> &'a T {
    items[rng.random_range(0..items.len())]
}

/// Printable ASCII, `0..max` characters.
fn ascii(rng: &mut ChaCha8Rng, max: usize) -> String {
    let n = rng.random_range(0..=max);
    (0..n).map(|_| char::from(rng.random_range(0x20u8..0x7f))).collect()
}

fn bytes(rng: &mut ChaCha8Rng, max: usize) -> Vec<u8> {
    let mut b = vec![0u8; rng.random_range(0..=max)];
    rng.fill_bytes(&mut b);
    b
}

/// A value as a fuzzer would send it: plausible, empty, huge, badly encoded, not UTF-8.
fn value(rng: &mut ChaCha8Rng, plausible: &[&str]) -> String {
    match rng.random_range(0..20) {
        0..=8 if !plausible.is_empty() => pick(rng, plausible).to_string(),
        0..=10 => rng.random_range(-5i64..100_000).to_string(),
        11 => String::new(),
        12 => "9".repeat(rng.random_range(10..40)),
        13 => "x".repeat(rng.random_range(1_000..20_000)),
        14 => "-1.5e308".into(),
        15 => "%".into(),
        16 => "\u{fffd}\u{0}\u{7f}é漢".into(),
        _ => ascii(rng, 24),
    }
}

/// A form body: names from `names`, values fuzzed, some missing, some twice; the encoding
/// sometimes broken (`%zz`, a lone `%`, raw non-UTF-8 bytes).
fn form(rng: &mut ChaCha8Rng, names: &[&str], plausible: &[&str]) -> Vec<u8> {
    let mut s = form_urlencoded::Serializer::new(String::new());
    for _ in 0..rng.random_range(0..7) {
        let name = if rng.random_ratio(1, 10) { ascii(rng, 8) } else { pick(rng, names).to_string() };
        let v = value(rng, plausible);
        s.append_pair(&name, &v);
    }
    let mut body = s.finish().into_bytes();
    match rng.random_range(0..12) {
        0 => body.extend_from_slice(b"&amount=%zz&x=%"),
        1 => body.extend_from_slice(&[b'&', b'a', b'=', 0xff, 0xfe, 0x80]),
        2 => body.extend_from_slice(b"&&=&==&a[b][c][d]=1&metadata[=2"),
        _ => {}
    }
    body
}

fn auth(rng: &mut ChaCha8Rng, parts: Parts, keys: &[&str]) -> Parts {
    match rng.random_range(0..12) {
        0 => parts,
        1 => {
            let a = ascii(rng, 30);
            parts.header("Authorization", a)
        }
        _ => {
            let key = pick(rng, keys);
            parts.header("Authorization", format!("Bearer {key}"))
        }
    }
}

fn idempotency(rng: &mut ChaCha8Rng, parts: Parts) -> Parts {
    match rng.random_range(0..8) {
        0..=2 => parts,
        3 => {
            let k = "k".repeat(rng.random_range(200..400));
            parts.header("Idempotency-Key", k)
        }
        4 => {
            let k = ascii(rng, 20);
            parts.header("Idempotency-Key", k)
        }
        // A small pool of keys: replays, mismatches and keys in flight.
        _ => {
            let k = format!("key-{}", rng.random_range(0..32));
            parts.header("Idempotency-Key", k)
        }
    }
}

fn payments(rng: &mut ChaCha8Rng) -> Parts {
    let path = pick(
        rng,
        &[
            "/v1/refunds",
            "/v1/refunds",
            "/v1/refunds",
            "/v1/refunds/re_x",
            "/v1/payment_intents",
            "/v1/payment_intents",
            "/v1/payment_intents/pi_1",
            "/v1/payment_intents/pi_1/confirm",
            "/v1/payment_intents/pi_2/cancel",
            "/v1/payment_intents/pi_x/confirm",
            "/v1/refunds/re_x/extra",
            "/",
            "/v1/%zz",
        ],
    );
    let method = if rng.random_ratio(3, 4) {
        if rng.random_ratio(2, 3) { "POST" } else { "GET" }
    } else {
        pick(rng, &["PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "BREW"])
    };
    let names = [
        "payment_intent",
        "charge",
        "amount",
        "reason",
        "currency",
        "metadata[k]",
        "metadata[]",
        "metadata",
        "expand[]",
        "expand[0]",
        "instructions_email",
        "confirm",
        "payment_method",
        "cancellation_reason",
        "capture_method",
        "payment_method_types[]",
        "description",
        "receipt_email",
        "limit",
        "starting_after",
        "ending_before",
    ];
    let plausible = [
        "pi_1",
        "pi_2",
        "ch_1",
        "1000",
        "50",
        "5000",
        "usd",
        "eur",
        "true",
        "false",
        "pm_card_visa",
        "duplicate",
        "fraudulent",
        "requested_by_customer",
        "automatic",
        "card",
    ];
    if rng.random_ratio(2, 5) {
        return plausible_payment(rng);
    }
    let mut parts = if method == "GET" && rng.random_bool(0.7) {
        let q = String::from_utf8_lossy(&form(rng, &names, &plausible)).into_owned();
        Parts::new(method, if q.is_empty() { path.to_string() } else { format!("{path}?{q}") })
    } else {
        let body = form(rng, &names, &plausible);
        Parts::new(method, path).body(body)
    };
    parts = match rng.random_range(0..10) {
        0 => parts,
        1 => parts.header("Content-Type", "application/json"),
        _ => parts.header("Content-Type", "application/x-www-form-urlencoded"),
    };
    parts = auth(rng, parts, &["sk_test_x", "rk_test_fuzzlimited", "sk_live_y"]);
    idempotency(rng, parts)
}

/// A request Stripe would accept, or nearly: a refund, an intent created (and confirmed), a
/// confirm, a cancel or a list, with a key from a small pool and one field sometimes off.
fn plausible_payment(rng: &mut ChaCha8Rng) -> Parts {
    let amount = rng.random_range(1u64..3_000).to_string();
    let (path, mut fields): (&str, Vec<(&str, String)>) = match rng.random_range(0..6) {
        0 | 1 => ("/v1/refunds", vec![("payment_intent", "pi_1".into()), ("amount", amount)]),
        2 => (
            "/v1/payment_intents",
            vec![
                ("amount", amount),
                ("currency", "usd".into()),
                ("confirm", "true".into()),
                ("payment_method", "pm_card_visa".into()),
            ],
        ),
        3 => ("/v1/payment_intents", vec![("amount", amount), ("currency", "usd".into())]),
        4 => ("/v1/payment_intents/pi_2/cancel", vec![("cancellation_reason", "duplicate".into())]),
        _ => ("/v1/refunds?payment_intent=pi_1&limit=3", vec![]),
    };
    if rng.random_ratio(1, 3) {
        fields.push(("metadata[order]", ascii(rng, 12)));
    }
    if rng.random_ratio(1, 4) && !fields.is_empty() {
        let i = rng.random_range(0..fields.len());
        fields[i].1 = value(rng, &[]);
    }
    let mut s = form_urlencoded::Serializer::new(String::new());
    for (n, v) in &fields {
        s.append_pair(n, v);
    }
    let method = if fields.is_empty() { "GET" } else { "POST" };
    let parts = Parts::new(method, path)
        .body(s.finish())
        .header("Content-Type", "application/x-www-form-urlencoded")
        .header("Authorization", "Bearer sk_test_x");
    idempotency(rng, parts)
}

/// A random JSON value, depth-bounded, with keys from `keys`.
fn json_value(rng: &mut ChaCha8Rng, keys: &[&str], depth: u32) -> Value {
    let kinds = if depth == 0 { 6 } else { 8 };
    match rng.random_range(0..kinds) {
        0 => Value::Null,
        1 => Value::Bool(rng.random()),
        2 => Value::from(rng.random::<i64>()),
        3 => Value::from(rng.random_range(-1e18f64..1e18)),
        4 => Value::from(value(rng, &[])),
        5 => Value::from(ascii(rng, 12)),
        6 => Value::Array((0..rng.random_range(0..4)).map(|_| json_value(rng, keys, depth - 1)).collect()),
        _ => {
            let mut m = serde_json::Map::new();
            for _ in 0..rng.random_range(0..5) {
                let k = if rng.random_ratio(1, 8) { ascii(rng, 6) } else { pick(rng, keys).to_string() };
                m.insert(k, json_value(rng, keys, depth - 1));
            }
            Value::Object(m)
        }
    }
}

/// A JSON object with fields from `fields`, each plausible or random; some JSON bodies are
/// broken (truncated, not JSON, deeply nested).
fn json_body(rng: &mut ChaCha8Rng, fields: &[(&str, &[&str])]) -> Vec<u8> {
    let keys: Vec<&str> = fields.iter().map(|(k, _)| *k).collect();
    let mut m = serde_json::Map::new();
    for (name, plausible) in fields {
        match rng.random_range(0..10) {
            0 => {}
            1..=2 => {
                m.insert(name.to_string(), json_value(rng, &keys, 2));
            }
            _ => {
                m.insert(name.to_string(), Value::from(value(rng, plausible)));
            }
        }
    }
    if rng.random_ratio(1, 10) {
        m.insert(ascii(rng, 8), json_value(rng, &keys, 2));
    }
    let text = Value::Object(m).to_string().into_bytes();
    match rng.random_range(0..25) {
        0 => {
            let cut = rng.random_range(0..=text.len());
            text[..cut].to_vec()
        }
        1 => bytes(rng, 64),
        2 => format!("{}1{}", "[".repeat(3_000), "]".repeat(3_000)).into_bytes(),
        3 => b"[1,2,3]".to_vec(),
        4 => b"\"a string\"".to_vec(),
        _ => text,
    }
}

fn workspaces(rng: &mut ChaCha8Rng) -> Parts {
    let path =
        pick(rng, &["/v1/workspaces", "/v1/workspaces", "/v1/workspaces/ws_x", "/v1/workspaces/", "/v2/x"]);
    let method = if rng.random_ratio(3, 4) {
        if rng.random_ratio(2, 3) { "POST" } else { "GET" }
    } else {
        pick(rng, &["PUT", "DELETE", "PATCH", "HEAD"])
    };
    let mut parts = if method == "GET" {
        let q = match rng.random_range(0..4) {
            0 => String::new(),
            1 => {
                format!("external_id={}&limit={}", value(rng, &["ext-1", "ext-2"]), value(rng, &["1", "10"]))
            }
            2 => ascii(rng, 20).replace([' ', '#'], "+"),
            _ => format!("external_id=ext-{}", rng.random_range(0..8)),
        };
        Parts::new(method, if q.is_empty() { path.to_string() } else { format!("{path}?{q}") })
    } else {
        let body = json_body(
            rng,
            &[
                ("external_id", &["ext-1", "ext-2", "ext-3", "ext-4"]),
                ("name", &["Acme", "Acme & Co.", "a", "Ünïcode", "x\ny", " lead"]),
                ("plan", &["free", "pro"]),
            ],
        );
        Parts::new(method, path).body(body).header("Content-Type", "application/json")
    };
    parts = auth(rng, parts, &["sk_test_x"]);
    parts = idempotency(rng, parts);
    if rng.random_ratio(1, 3) {
        let token = value(rng, &["1", "2", "3", "0", "18446744073709551616"]);
        parts = parts.header("Fencing-Token", token);
    }
    parts
}

fn http_date(rng: &mut ChaCha8Rng) -> String {
    match rng.random_range(0..5) {
        0 => "Tue, 01 Dec 2026 23:00:00 GMT".into(),
        1 => "Sunday, 06-Nov-94 08:49:37 GMT".into(),
        2 => "Sun Nov  6 08:49:37 1994".into(),
        3 => "Fri, 31 Dec 9999 23:59:59 GMT".into(),
        _ => ascii(rng, 30),
    }
}

/// An S3 request boto3 would send: a put (with its Content-MD5 or CRC32 sometimes), a get
/// (a range sometimes), a head, a delete or a list, on the seeded bucket.
fn plausible_file(rng: &mut ChaCha8Rng) -> Parts {
    let key = format!("/fuzz/obj-{}", rng.random_range(0..16));
    match rng.random_range(0..6) {
        0 | 1 => {
            let body = bytes(rng, 300);
            let mut parts = Parts::new("PUT", key).header("Content-Type", "text/plain");
            if rng.random_ratio(1, 2) {
                parts = parts.header(
                    "Content-MD5",
                    base64::engine::general_purpose::STANDARD.encode(Md5::digest(&body)),
                );
            }
            if rng.random_ratio(1, 3) {
                let crc =
                    base64::engine::general_purpose::STANDARD.encode(crc32fast::hash(&body).to_be_bytes());
                parts = parts.header("x-amz-checksum-crc32", crc);
            }
            if rng.random_ratio(1, 5) {
                parts = parts.header("If-None-Match", "*");
            }
            parts.body(body)
        }
        2 => {
            let parts = Parts::new("GET", key);
            if rng.random_ratio(1, 2) {
                let (a, b) = (rng.random_range(0..200), rng.random_range(0..400));
                parts.header("Range", format!("bytes={a}-{b}"))
            } else {
                parts.header("x-amz-checksum-mode", "ENABLED")
            }
        }
        3 => Parts::new("HEAD", key),
        4 => Parts::new("DELETE", key),
        _ => Parts::new("GET", "/fuzz?list-type=2&prefix=obj-&max-keys=5"),
    }
}

fn files(rng: &mut ChaCha8Rng) -> Parts {
    if rng.random_ratio(2, 5) {
        return plausible_file(rng);
    }
    let bucket = pick(rng, &["fuzz", "fuzz", "fuzz", "audit", "nope", "A_B", "xn--a", "a", ""]);
    let key = match rng.random_range(0..8) {
        0 => String::new(),
        1 => "k/".repeat(rng.random_range(300..700)),
        2 => "%zz%ff%2F..%2F".into(),
        3 => ascii(rng, 16).replace([' ', '#', '?'], "%20"),
        _ => format!("obj-{}", rng.random_range(0..16)),
    };
    let path = if key.is_empty() && rng.random_ratio(1, 2) {
        format!("/{bucket}")
    } else {
        format!("/{bucket}/{key}")
    };
    let method = pick(rng, &["PUT", "PUT", "PUT", "GET", "GET", "HEAD", "DELETE", "POST", "POST", "PATCH"]);
    let query = match rng.random_range(0..14) {
        0 => "uploads".to_string(),
        1 => format!("uploadId={}&partNumber={}", value(rng, &["u1"]), value(rng, &["1", "2", "10001", "0"])),
        2 => format!("uploadId={}", value(rng, &["u1"])),
        3 => "delete".into(),
        4 => format!(
            "list-type=2&prefix={}&max-keys={}&delimiter=/&continuation-token={}&encoding-type=url",
            ascii(rng, 4).replace([' ', '#', '&'], ""),
            value(rng, &["1", "1000", "1001"]),
            value(rng, &["", "abc"])
        ),
        5 => "response-content-type=text/plain&response-cache-control=no-cache".into(),
        6 => format!("max-parts={}&part-number-marker={}", value(rng, &["1"]), value(rng, &["1"])),
        _ => String::new(),
    };
    let target = if query.is_empty() { path } else { format!("{path}?{query}") };
    let body: Vec<u8> = match rng.random_range(0..12) {
        0 => format!(
            "<Delete><Quiet>{}</Quiet>{}</Delete>",
            value(rng, &["true", "false"]),
            (0..rng.random_range(0..4)).map(|i| format!("<Object><Key>obj-{i}</Key></Object>")).collect::<String>()
        )
        .into_bytes(),
        1 => format!(
            "<CompleteMultipartUpload>{}</CompleteMultipartUpload>",
            (0..rng.random_range(0..4))
                .map(|i| format!("<Part><PartNumber>{}</PartNumber><ETag>{}</ETag></Part>", i + 1, value(rng, &["\"x\""])))
                .collect::<String>()
        )
        .into_bytes(),
        2 => b"<CreateBucketConfiguration><LocationConstraint>eu-west-1</LocationConstraint></CreateBucketConfiguration>"
            .to_vec(),
        3 => b"<?xml version=\"1.0\"?><!DOCTYPE x [<!ENTITY a \"aaaa\">]><Delete>&a;</Delete>".to_vec(),
        4 => vec![b'z'; rng.random_range(60_000..70_000)],
        _ => bytes(rng, 200),
    };
    let mut parts = Parts::new(method, target);
    let md5 = base64::engine::general_purpose::STANDARD.encode(Md5::digest(&body));
    let crc = base64::engine::general_purpose::STANDARD.encode(crc32fast::hash(&body).to_be_bytes());
    for _ in 0..rng.random_range(0..6) {
        parts = match rng.random_range(0..22) {
            0 => parts.header("Content-MD5", md5.clone()),
            1 => {
                let v = value(rng, &["AAAA", "1B2M2Y8AsgTpgAmY7PhCfg=="]);
                parts.header("Content-MD5", v)
            }
            2 => parts.header("x-amz-checksum-crc32", crc.clone()),
            3 => {
                let name = pick(
                    rng,
                    &[
                        "x-amz-checksum-crc32",
                        "x-amz-checksum-crc32c",
                        "x-amz-checksum-crc64nvme",
                        "x-amz-checksum-sha1",
                        "x-amz-checksum-sha256",
                    ],
                );
                let v = value(rng, &["AAAAAA==", "////", "=", "AAAAAAAAAAA="]);
                parts.header(name, v)
            }
            4 => {
                let v = value(rng, &["CRC32", "CRC32C", "SHA256", "MD5"]);
                parts.header("x-amz-checksum-algorithm", v)
            }
            5 => {
                let v = value(rng, &["*", "\"x\"", "\"d41d8cd98f00b204e9800998ecf8427e\""]);
                parts.header("If-None-Match", v)
            }
            6 => {
                let v = value(rng, &["*", "\"x\"", "\"d41d8cd98f00b204e9800998ecf8427e\""]);
                parts.header("If-Match", v)
            }
            7 => {
                let d = http_date(rng);
                parts.header("If-Modified-Since", d)
            }
            8 => {
                let d = http_date(rng);
                parts.header("If-Unmodified-Since", d)
            }
            9 => {
                let r = match rng.random_range(0..6) {
                    0 => format!("bytes={}-{}", rng.random_range(0..300), rng.random_range(0..300)),
                    1 => format!("bytes=-{}", rng.random_range(0..300)),
                    2 => format!("bytes={}-", rng.random_range(0..300)),
                    3 => "bytes=0-1,5-9".into(),
                    4 => "bytes=18446744073709551615-18446744073709551616".into(),
                    _ => ascii(rng, 16),
                };
                parts.header("Range", r)
            }
            10 => {
                let d = http_date(rng);
                parts.header("x-amz-date", d)
            }
            11 => parts.header("x-amz-checksum-mode", "ENABLED"),
            12 => {
                let v = value(rng, &["text/plain", "application/xml"]);
                parts.header("Content-Type", v)
            }
            13 => {
                let (n, v) =
                    (ascii(rng, 8).replace([' ', ':', '(', ')', '"', '/', '@'], "-"), ascii(rng, 20));
                parts.header(&format!("x-amz-meta-{n}"), v)
            }
            14 => {
                let n = pick(
                    rng,
                    &[
                        "Cache-Control",
                        "Content-Disposition",
                        "Content-Encoding",
                        "Content-Language",
                        "Expires",
                    ],
                );
                let v = ascii(rng, 20);
                parts.header(n, v)
            }
            15 => {
                let v = value(rng, &["STREAMING-UNSIGNED-PAYLOAD-TRAILER", "UNSIGNED-PAYLOAD"]);
                parts.header("x-amz-content-sha256", v)
            }
            16 => parts.header("x-amz-trailer", "x-amz-checksum-crc32"),
            17 => {
                let v = value(rng, &["100", "0"]);
                parts.header("x-amz-decoded-content-length", v)
            }
            18 => parts
                .header("Authorization", "AWS4-HMAC-SHA256 Credential=x/20261201/us-east-1/s3/aws4_request"),
            _ => {
                let v = value(rng, &["aws-chunked", "gzip"]);
                parts.header("Content-Encoding", v)
            }
        };
    }
    parts.body(body)
}

fn chain(rng: &mut ChaCha8Rng, pool: &Pool) -> Parts {
    let call = |rng: &mut ChaCha8Rng| -> Value {
        let method = pick(
            rng,
            &[
                "eth_chainId",
                "eth_blockNumber",
                "eth_getBalance",
                "eth_getTransactionCount",
                "eth_sendRawTransaction",
                "eth_sendRawTransaction",
                "eth_sendRawTransaction",
                "eth_getTransactionReceipt",
                "eth_getTransactionByHash",
                "eth_getBlockByNumber",
                "eth_getBlockByHash",
                "eth_call",
                "eth_estimateGas",
                "eth_gasPrice",
                "eth_maxPriorityFeePerGas",
                "eth_feeHistory",
                "net_version",
                "web3_clientVersion",
                "eth_sendTransaction",
                "eth_getCode",
            ],
        );
        let address = "0x2c7536e3605d9c16a7a3d7b1898e529396a65c23";
        let param = |rng: &mut ChaCha8Rng| -> Value {
            match rng.random_range(0..14) {
                0..=3 => {
                    let raw = &pool.raw_txs[rng.random_range(0..pool.raw_txs.len())];
                    match rng.random_range(0..4) {
                        0 => Value::from(&raw[..rng.random_range(0..raw.len())]),
                        1 => {
                            let mut b = raw.clone().into_bytes();
                            let i = rng.random_range(2..b.len());
                            b[i] = b"0123456789abcdef"[rng.random_range(0..16)];
                            Value::from(String::from_utf8_lossy(&b).into_owned())
                        }
                        _ => Value::from(raw.as_str()),
                    }
                }
                4 => Value::from(address),
                5 => Value::from(pick(rng, &["latest", "pending", "earliest", "safe", "finalized"])),
                6 => Value::from(format!("0x{:x}", rng.random_range(0u64..100))),
                7 => Value::from(pick(
                    rng,
                    &[
                        "0x",
                        "0xzz",
                        "0x0",
                        "00",
                        "0x00000000000000000000000000000000000000000000000000000000000000001",
                    ],
                )),
                8 => json!({"from": address, "to": CHAIN_TO, "value": "0x1", "gas": "0xzz"}),
                9 => Value::from(format!("0x{}", "ab".repeat(rng.random_range(0..40)))),
                10 => Value::Bool(rng.random()),
                _ => json_value(rng, &["from", "to", "value", "data", "gas"], 2),
            }
        };
        let params = match rng.random_range(0..8) {
            0 => Value::Null,
            1 => json_value(rng, &["a"], 1),
            _ => Value::Array((0..rng.random_range(0..4)).map(|_| param(rng)).collect()),
        };
        let id = match rng.random_range(0..6) {
            0 => Value::Null,
            1 => Value::from("id-x"),
            2 => json!({"a": 1}),
            3 => Value::from(1.5),
            _ => Value::from(rng.random_range(0u64..1_000_000)),
        };
        let mut call = json!({"jsonrpc": "2.0", "method": method, "params": params, "id": id});
        match rng.random_range(0..20) {
            0 => {
                call["jsonrpc"] = Value::from("1.0");
            }
            1 => {
                call = Value::Object(serde_json::Map::new());
            }
            2 => {
                call["method"] = json_value(rng, &["x"], 1);
            }
            _ => {}
        }
        call
    };
    let body = match rng.random_range(0..10) {
        0..=5 => call(rng).to_string().into_bytes(),
        6..=7 => {
            Value::Array((0..rng.random_range(0..6)).map(|_| call(rng)).collect()).to_string().into_bytes()
        }
        8 => {
            let text = call(rng).to_string().into_bytes();
            let cut = rng.random_range(0..=text.len());
            text[..cut].to_vec()
        }
        _ => bytes(rng, 64),
    };
    let method = if rng.random_ratio(9, 10) { "POST" } else { pick(rng, &["GET", "PUT", "HEAD", "OPTIONS"]) };
    let path = if rng.random_ratio(9, 10) { "/" } else { pick(rng, &["/rpc", "//", "/?x=1"]) };
    let mut parts = Parts::new(method, path).body(body);
    if rng.random_ratio(9, 10) {
        let ct = if rng.random_ratio(9, 10) {
            "application/json"
        } else {
            pick(rng, &["application/json; charset=utf-8", "text/plain", "application/x-www-form-urlencoded"])
        };
        parts = parts.header("Content-Type", ct);
    }
    parts
}

fn messages(rng: &mut ChaCha8Rng) -> Parts {
    let addresses: &[&str] =
        &["ada@example.com", "Ada <ada@example.com>", "grace@example.com", "not-an-email", "a@b", "<>"];
    let route = rng.random_range(0..10);
    let mut parts = match route {
        0..=6 => {
            let mut body: Value = serde_json::from_slice(&json_body(
                rng,
                &[
                    ("from", addresses),
                    ("to", addresses),
                    ("subject", &["hi", ""]),
                    ("text", &["body"]),
                    ("html", &["<p>x</p>"]),
                    ("cc", addresses),
                    ("bcc", addresses),
                    ("reply_to", addresses),
                    ("scheduled_at", &["in 1 min", "2026-12-01T00:00:00Z"]),
                    ("headers", &[]),
                    ("tags", &[]),
                ],
            ))
            .unwrap_or(Value::Null);
            if rng.random_ratio(1, 2) {
                body = json!({"from": "Acme <billing@acme.test>", "to": pick(rng, &["ada@example.com", "grace@example.com"]),
                              "subject": ascii(rng, 20), "text": ascii(rng, 40)});
            }
            if rng.random_ratio(1, 4) && body.is_object() {
                body["to"] = json!(["ada@example.com", "grace@example.com"]);
                body["tags"] = json!([{"name": "a", "value": "b"}]);
                body["headers"] = json!({"X-Entity-Ref-ID": "1"});
            }
            Parts::new("POST", "/emails").body(body.to_string()).header("Content-Type", "application/json")
        }
        7 => Parts::new(
            pick(rng, &["GET", "GET", "DELETE", "PATCH"]),
            format!("/emails/{}", value(rng, &["4ef9a417-02e9-4d39-ad75-9611e0fcc33c", "x/y"])),
        ),
        8 => Parts::new(
            "GET",
            format!(
                "/mailboxes/{}/messages",
                pick(rng, &["ada@example.com", "ada%40example.com", "%", "", "%ff"])
            ),
        ),
        _ => Parts::new(
            pick(rng, &["GET", "PUT", "POST"]),
            pick(rng, &["/", "/emails/", "/emails/batch", "/domains"]),
        )
        .body(bytes(rng, 32)),
    };
    parts = auth(rng, parts, &["re_test_x", "re_x"]);
    idempotency(rng, parts)
}

/// A control-API request: health, rules (random bodies, armed rules pinned to
/// [`NEVER_PATH`]), contract patches, seeds, clock jumps. `allow_rules` off keeps rule
/// bodies out (the phases that count every 5xx arm nothing).
fn control(rng: &mut ChaCha8Rng, service: &str, allow_rules: bool) -> Parts {
    let mut parts = match rng.random_range(0..10) {
        0 => Parts::new("GET", "/__twice/health"),
        1 => Parts::new(
            "GET",
            pick(
                rng,
                &["/__twice/rules", "/__twice/clock", "/__twice/contract", "/__twice/nope", "/__twice/"],
            ),
        ),
        2 if allow_rules => {
            let fault = match rng.random_range(0..6) {
                0 => Value::from(pick(
                    rng,
                    &["refuse", "drop_after_commit", "silent_noop", "ignore_keys", "drop_after_comit"],
                )),
                1 => json!({"kind": "reject", "status": json_value(rng, &[], 0)}),
                2 => json!({"kind": "latency", "before_ms": rng.random_range(0u64..700_000)}),
                3 => json!({"kind": "stale_read", "lag_ms": json_value(rng, &[], 0)}),
                4 => {
                    json!({"kind": pick(rng, &["deliver_late", "redeliver", "timeout_after_commit"]), "delay_ms": 1})
                }
                _ => json_value(rng, &["kind", "status", "hold_ms"], 2),
            };
            let mut rule = json!({"fault": fault, "path": NEVER_PATH});
            if rng.random_ratio(1, 2) {
                rule["where"] = json_value(rng, &["payment_intent", "rpc_method"], 1);
            }
            if rng.random_ratio(1, 2) {
                rule["nth"] = json_value(rng, &[], 0);
            }
            if rng.random_ratio(1, 2) {
                rule["probability"] = json_value(rng, &[], 0);
            }
            let body = if rng.random_ratio(1, 4) { Value::Array(vec![rule.clone(), rule]) } else { rule };
            Parts::new("POST", "/__twice/rules").body(body.to_string())
        }
        3 => {
            let terms = json!({
                "idempotency_keys": pick(rng, &["honored", "honored", "ignored", "x"]),
                "reads": pick(rng, &["strong", "eventual", "x"]),
                "settle_ms_max": json_value(rng, &[], 0),
            });
            let body = if rng.random_ratio(1, 2) {
                terms
            } else {
                json_value(rng, &["reads", "acks", "fencing"], 2)
            };
            Parts::new("PATCH", "/__twice/contract").body(body.to_string())
        }
        4 => {
            let body = match service {
                "payments" => {
                    json!({"payment_intents": [{"id": value(rng, &["pi_9", "pi_1"]), "amount": json_value(rng, &[], 0), "currency": "usd"}],
                                     "restricted_keys": [{"key": "rk_test_fuzzlimited", "permissions": [pick(rng, &["rak_refund_read", "rak_refund_write", "x"])]}]})
                }
                "files" => {
                    json!({"buckets": [value(rng, &["fuzz2", "Bad_Name"])], "objects": [{"bucket": "fuzz", "key": value(rng, &["obj-1"]), "body": ascii(rng, 20)}]})
                }
                "chain" => {
                    json!({"chain_id": json_value(rng, &[], 0), "block_time_ms": rng.random_range(0u64..3), "accounts": [{"address": value(rng, &["0x2c7536e3605d9c16a7a3d7b1898e529396a65c23"]), "balance": value(rng, &["1000", "0xff"])}]})
                }
                _ => json_value(rng, &["payment_intents", "buckets", "accounts"], 2),
            };
            Parts::new("POST", "/__twice/seed").body(body.to_string())
        }
        5 => {
            let by = json_value(rng, &["by_ms"], 1);
            let body =
                if rng.random_ratio(1, 2) { json!({"by_ms": rng.random_range(0u64..3_600_000)}) } else { by };
            Parts::new("POST", "/__twice/clock/jump").body(body.to_string())
        }
        6 => Parts::new(
            pick(rng, &["DELETE", "PUT"]),
            format!("/__twice/rules/{}", value(rng, &["rule-1", "%zz"])),
        ),
        _ => Parts::new(
            pick(rng, &["POST", "PATCH", "PUT"]),
            pick(rng, &["/__twice/seed", "/__twice/contract", "/__twice/clock/jump", "/__twice/health"]),
        )
        .body(bytes(rng, 48)),
    };
    parts.control = true;
    parts
}

/// Byte-level mutations of a well-formed request: bit flips, truncation, a header line
/// twice, inserted or deleted bytes, a wrong `Content-Length`, bare `\n` line ends.
fn mutate(rng: &mut ChaCha8Rng, bytes: &mut Vec<u8>) {
    for _ in 0..rng.random_range(1..4) {
        if bytes.is_empty() {
            return;
        }
        match rng.random_range(0..8) {
            0 | 1 => {
                let i = rng.random_range(0..bytes.len());
                bytes[i] ^= 1 << rng.random_range(0..8);
            }
            2 => {
                let cut = rng.random_range(0..bytes.len());
                bytes.truncate(cut);
            }
            3 => {
                // Duplicate a header line (the lines between the request line and the blank line).
                let head_end = find(bytes, b"\r\n\r\n").unwrap_or(bytes.len());
                let lines: Vec<(usize, usize)> = line_spans(&bytes[..head_end]);
                if lines.len() > 1 {
                    let (s, e) = lines[rng.random_range(1..lines.len())];
                    let mut dup = bytes[s..e].to_vec();
                    dup.extend_from_slice(b"\r\n");
                    let at = (e + 2).min(bytes.len());
                    bytes.splice(at..at, dup);
                }
            }
            4 => {
                let i = rng.random_range(0..=bytes.len());
                let extra = match rng.random_range(0..4) {
                    0 => b"\r\n".to_vec(),
                    1 => b"Transfer-Encoding: chunked\r\n".to_vec(),
                    2 => vec![0u8],
                    _ => {
                        let mut b = vec![0u8; rng.random_range(1..16)];
                        rng.fill_bytes(&mut b);
                        b
                    }
                };
                bytes.splice(i..i, extra);
            }
            5 => {
                let i = rng.random_range(0..bytes.len());
                let j = (i + rng.random_range(1..32)).min(bytes.len());
                bytes.drain(i..j);
            }
            6 => {
                if let Some(at) = find(bytes, b"Content-Length: ") {
                    let start = at + b"Content-Length: ".len();
                    let end = start + bytes[start..].iter().take_while(|b| b.is_ascii_digit()).count();
                    let n = match rng.random_range(0..4) {
                        0 => "0".to_string(),
                        1 => "18446744073709551616".to_string(),
                        2 => "-1".to_string(),
                        _ => rng.random_range(0u32..100).to_string(),
                    };
                    bytes.splice(start..end, n.into_bytes());
                }
            }
            _ => {
                let head_end = find(bytes, b"\r\n\r\n").unwrap_or(bytes.len());
                let mut head: Vec<u8> = Vec::with_capacity(head_end);
                let mut i = 0;
                while i < head_end {
                    if bytes[i..].starts_with(b"\r\n") {
                        head.push(b'\n');
                        i += 2;
                    } else {
                        head.push(bytes[i]);
                        i += 1;
                    }
                }
                bytes.splice(..head_end, head);
            }
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Start and end (exclusive, before `\r\n`) of each `\r\n`-ended line.
fn line_spans(head: &[u8]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut start = 0;
    while let Some(at) = find(&head[start..], b"\r\n") {
        spans.push((start, start + at));
        start += at + 2;
    }
    if start < head.len() {
        spans.push((start, head.len()));
    }
    spans
}
