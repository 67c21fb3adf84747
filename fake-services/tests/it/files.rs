//! The files fake (S3, path style) over real loopback HTTP: objects, conditional writes and
//! their races, checksums and `aws-chunked` bodies, `Expect: 100-continue`, S3's XML errors
//! and headers, DeleteObjects, listings, the seed API, what the ledger records, and
//! thousands of random requests that never make it panic or answer 5xx.

use std::net::SocketAddr;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use fake_services::{Disposition, Fake, FakeRequest};
use md5::{Digest, Md5};
use proptest::prelude::*;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use vocabulary::Effect;
use vocabulary::FaultRule;
use vocabulary::FaultSpec;

use crate::client::{self, Req, Running, Seen, manual_fakes};

const WAIT_MS: u64 = 10_000;

/// The fakes with bucket `reports` on the files fake.
async fn start() -> (Running, SocketAddr) {
    let running = Running::start(11).await;
    running.fakes.files.seed_bucket("reports").unwrap();
    let addr = running.addr("files");
    (running, addr)
}

fn files(running: &Running) -> Fake {
    running.fake("files")
}

fn put(key: &str, body: &str) -> Req {
    Req::new("PUT", format!("/reports/{key}")).body(body.as_bytes().to_vec())
}

fn get(key: &str) -> Req {
    Req::new("GET", format!("/reports/{key}"))
}

/// The quoted MD5 of a body, as S3 writes an ETag.
fn etag_of(body: &[u8]) -> String {
    let digest: [u8; 16] = Md5::digest(body).into();
    format!("\"{}\"", digest.iter().map(|b| format!("{b:02x}")).collect::<String>())
}

fn crc32_of(body: &[u8]) -> String {
    BASE64.encode(crc32fast::hash(body).to_be_bytes())
}

fn body_of(seen: &Seen) -> &str {
    match seen {
        Seen::Answer { body, .. } => body,
        _ => "",
    }
}

/// The text of the first `<name>` element of an XML body.
fn element<'a>(xml: &'a str, name: &str) -> Option<&'a str> {
    let open = format!("<{name}>");
    let start = xml.find(&open)? + open.len();
    let end = xml[start..].find(&format!("</{name}>"))? + start;
    Some(&xml[start..end])
}

/// Checks an S3 error answer: status, `Code`, the XML shape, and that the `RequestId` in the
/// body is the `x-amz-request-id` header. Returns the body.
fn assert_s3_error<'a>(seen: &'a Seen, status: u16, code: &str) -> &'a str {
    assert_eq!(seen.status(), Some(status), "{seen:?}");
    let body = body_of(seen);
    assert!(body.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>"), "{seen:?}");
    assert_eq!(element(body, "Code"), Some(code), "{seen:?}");
    assert!(element(body, "Message").is_some_and(|m| !m.is_empty()), "{seen:?}");
    assert_eq!(seen.header("content-type"), Some("application/xml"), "{seen:?}");
    assert_request_ids(seen);
    assert_eq!(element(body, "RequestId"), seen.header("x-amz-request-id"), "{seen:?}");
    assert_eq!(element(body, "HostId"), seen.header("x-amz-id-2"), "{seen:?}");
    body
}

fn assert_request_ids(seen: &Seen) {
    let id = seen.header("x-amz-request-id").unwrap_or_default();
    let host = seen.header("x-amz-id-2").unwrap_or_default();
    assert!(!id.is_empty() && !host.is_empty(), "no request ids: {seen:?}");
}

fn effects(fake: &Fake) -> Vec<Effect> {
    fake.ledger()
}

async fn send(addr: SocketAddr, req: Req) -> Seen {
    client::send(addr, &req, WAIT_MS).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_round_trip_with_s3_headers_and_ledger_effects() {
    let (running, addr) = start().await;
    let fake = files(&running);
    // A key with a space, a slash, a non-ASCII letter and a plus, percent-encoded as boto3 does.
    let path_key = "a%20b/%C3%BC%2Bc.txt";
    let key = "a b/ü+c.txt";
    let body = "hello";
    let stored = send(
        addr,
        put(path_key, body).header("Content-Type", "text/plain").header("x-amz-meta-owner", "ops"),
    )
    .await;
    assert_eq!(stored.status(), Some(200), "{stored:?}");
    assert_eq!(stored.header("etag"), Some(etag_of(body.as_bytes()).as_str()));
    assert_eq!(stored.header("etag"), Some("\"5d41402abc4b2a76b9719d911017c592\""));
    assert_request_ids(&stored);
    assert_eq!(body_of(&stored), "");

    let got = send(addr, get(path_key)).await;
    assert_eq!((got.status(), body_of(&got)), (Some(200), body), "{got:?}");
    assert_eq!(got.header("etag"), stored.header("etag"));
    assert_eq!(got.header("content-type"), Some("text/plain"));
    assert_eq!(got.header("x-amz-meta-owner"), Some("ops"));
    assert_eq!(got.header("content-length"), Some("5"));
    assert_eq!(got.header("accept-ranges"), Some("bytes"));
    assert!(got.header("last-modified").is_some_and(|d| d.ends_with(" GMT")), "{got:?}");
    assert!(got.header("x-amz-checksum-crc32").is_none(), "checksums only when asked: {got:?}");
    assert_request_ids(&got);
    assert_ne!(got.header("x-amz-request-id"), stored.header("x-amz-request-id"));

    let head = send(addr, Req::new("HEAD", format!("/reports/{path_key}"))).await;
    assert_eq!((head.status(), body_of(&head)), (Some(200), ""), "{head:?}");
    assert_eq!(head.header("content-length"), Some("5"), "HEAD tells the size: {head:?}");
    assert_eq!(head.header("etag"), stored.header("etag"));
    for answer in [&got, &head] {
        let Seen::Answer { headers, .. } = answer else { unreachable!() };
        let lengths = headers.iter().filter(|(n, _)| n == "content-length").count();
        assert_eq!(lengths, 1, "one Content-Length, not the fake's and hyper's: {answer:?}");
    }

    // Overwrite, then delete.
    let again = send(addr, put(path_key, "hello again")).await;
    assert_eq!(again.status(), Some(200));
    let deleted = send(addr, Req::new("DELETE", format!("/reports/{path_key}"))).await;
    assert_eq!((deleted.status(), body_of(&deleted)), (Some(204), ""), "{deleted:?}");
    assert_request_ids(&deleted);
    let gone = send(addr, Req::new("DELETE", format!("/reports/{path_key}"))).await;
    assert_eq!(gone.status(), Some(204), "deleting nothing is a success: {gone:?}");

    let missing = send(addr, get(path_key)).await;
    let xml = assert_s3_error(&missing, 404, "NoSuchKey");
    assert_eq!(element(xml, "Key"), Some(key));
    let head_missing = send(addr, Req::new("HEAD", format!("/reports/{path_key}"))).await;
    assert_eq!((head_missing.status(), body_of(&head_missing)), (Some(404), ""), "{head_missing:?}");
    assert_request_ids(&head_missing);

    let ledger = effects(&fake);
    let kinds: Vec<&str> = ledger.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, ["object.put", "object.put", "object.deleted"]);
    assert!(ledger.iter().all(|e| e.object_id == format!("reports/{key}")));
    assert_eq!(
        ledger[0].params,
        json!({"bucket": "reports", "key": key, "body": "hello", "etag": etag_of(b"hello"), "size": 5,
               "if_match": null, "if_none_match": false, "replaced": null, "metadata": {"owner": "ops"}})
    );
    assert_eq!(ledger[1].params["replaced"], etag_of(b"hello"));
    assert_eq!(ledger[1].params["body"], "hello again");
    assert_eq!(
        ledger[2].params,
        json!({"bucket": "reports", "key": key, "replaced": etag_of(b"hello again"), "if_match": null})
    );
    assert_eq!(Some(ledger[0].request_id.as_str()), stored.header("x-amz-request-id"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditional_writes_answer_412_and_404_as_s3_does() {
    let (running, addr) = start().await;
    let fake = files(&running);
    let v1 = etag_of(b"v1");
    let v2 = etag_of(b"v2");

    let created = send(addr, put("q3.csv", "v1").header("If-None-Match", "*")).await;
    assert_eq!(created.status(), Some(200), "{created:?}");
    let exists = send(addr, put("q3.csv", "v1").header("If-None-Match", "*")).await;
    let xml = assert_s3_error(&exists, 412, "PreconditionFailed");
    assert_eq!(element(xml, "Condition"), Some("If-None-Match"));
    assert_eq!(
        element(xml, "Message"),
        Some("At least one of the pre-conditions you specified did not hold")
    );

    let swapped = send(addr, put("q3.csv", "v2").header("If-Match", &v1)).await;
    assert_eq!((swapped.status(), swapped.header("etag")), (Some(200), Some(v2.as_str())), "{swapped:?}");
    let stale = send(addr, put("q3.csv", "v3").header("If-Match", &v1)).await;
    let xml = assert_s3_error(&stale, 412, "PreconditionFailed");
    assert_eq!(element(xml, "Condition"), Some("If-Match"));
    let nothing = send(addr, put("nothing.csv", "v1").header("If-Match", &v1)).await;
    assert_s3_error(&nothing, 404, "NoSuchKey");

    // DELETE takes If-Match too.
    let wrong = send(addr, Req::new("DELETE", "/reports/q3.csv").header("If-Match", &v1)).await;
    assert_s3_error(&wrong, 412, "PreconditionFailed");
    let right = send(addr, Req::new("DELETE", "/reports/q3.csv").header("If-Match", &v2)).await;
    assert_eq!(right.status(), Some(204), "{right:?}");

    // Reads: If-None-Match gives 304, If-Match 412, a range 206.
    send(addr, put("r.txt", "0123456789")).await;
    let tag = etag_of(b"0123456789");
    let cached = send(addr, get("r.txt").header("If-None-Match", &tag)).await;
    assert_eq!((cached.status(), body_of(&cached)), (Some(304), ""), "{cached:?}");
    assert_eq!(cached.header("etag"), Some(tag.as_str()));
    let changed = send(addr, get("r.txt").header("If-Match", &v1)).await;
    assert_s3_error(&changed, 412, "PreconditionFailed");
    let since = send(addr, get("r.txt").header("If-Modified-Since", "Sat, 01 Jan 2000 00:00:00 GMT")).await;
    assert_eq!(since.status(), Some(200));
    let unmodified =
        send(addr, get("r.txt").header("If-Unmodified-Since", "Sat, 01 Jan 2000 00:00:00 GMT")).await;
    assert_s3_error(&unmodified, 412, "PreconditionFailed");
    // The obsolete date forms RFC 9110 asks a recipient to read mean the same (an old
    // client's RFC 850 date, a C library's asctime).
    for old_form in ["Saturday, 01-Jan-00 00:00:00 GMT", "Sat Jan  1 00:00:00 2000"] {
        let unmodified = send(addr, get("r.txt").header("If-Unmodified-Since", old_form)).await;
        assert_s3_error(&unmodified, 412, "PreconditionFailed");
    }
    let part = send(addr, get("r.txt").header("Range", "bytes=2-4")).await;
    assert_eq!((part.status(), body_of(&part)), (Some(206), "234"), "{part:?}");
    assert_eq!(part.header("content-range"), Some("bytes 2-4/10"));
    let beyond = send(addr, get("r.txt").header("Range", "bytes=10-")).await;
    assert_s3_error(&beyond, 416, "InvalidRange");

    let ledger = effects(&fake);
    let rows: Vec<(&str, &Value, &Value, &Value)> = ledger
        .iter()
        .map(|e| (e.kind.as_str(), &e.params["if_match"], &e.params["if_none_match"], &e.params["replaced"]))
        .collect();
    assert_eq!(
        rows,
        [
            ("object.put", &Value::Null, &json!(true), &Value::Null),
            ("object.put", &json!(v1), &json!(false), &json!(v1)),
            ("object.deleted", &json!(v2), &Value::Null, &json!(v2)),
            ("object.put", &Value::Null, &json!(false), &Value::Null),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_conditional_writes_in_the_contract_conditions_are_ignored() {
    // S3 before August 2024: If-None-Match on a PUT was accepted and ignored.
    let (running, addr) = start().await;
    let fake = files(&running);
    fake.patch_contract(vocabulary::ContractPatch { conditional_writes: Some(false), ..Default::default() });
    send(addr, put("k", "v1")).await;
    let blind = send(addr, put("k", "v2").header("If-None-Match", "*")).await;
    assert_eq!(blind.status(), Some(200), "{blind:?}");
    let stale = send(addr, put("k", "v3").header("If-Match", &etag_of(b"v1"))).await;
    assert_eq!(stale.status(), Some(200), "{stale:?}");
    let ledger = effects(&fake);
    assert_eq!(ledger.len(), 3);
    // The ledger keeps what was asked, so a checker sees an If-Match that was not honoured.
    assert_eq!(ledger[2].params["if_match"], etag_of(b"v1"));
    assert_eq!(ledger[2].params["replaced"], etag_of(b"v2"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_conditional_writes_get_409_while_one_is_in_flight() {
    let (running, addr) = start().await;
    let fake = files(&running);
    // The first PUT waits 1.5 s between its arrival and its commit.
    fake.add_rule(
        FaultRule::always(FaultSpec::Latency { before_ms: 1_500, after_ms: 0 }).method("PUT").nth(1),
    )
    .unwrap();
    let first =
        tokio::spawn(async move { send(addr, put("race", "first").header("If-None-Match", "*")).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = send(addr, put("race", "second").header("If-None-Match", "*")).await;
    let xml = assert_s3_error(&second, 409, "ConditionalRequestConflict");
    assert!(element(xml, "Message").is_some_and(|m| m.contains("conflicting operation")), "{xml}");
    let other_key = send(addr, put("other", "x").header("If-None-Match", "*")).await;
    assert_eq!(other_key.status(), Some(200), "another key is not in conflict: {other_key:?}");
    let first = first.await.unwrap();
    assert_eq!(first.status(), Some(200), "{first:?}");
    // Once the first has committed, the key exists: 412, no longer 409.
    let after = send(addr, put("race", "third").header("If-None-Match", "*")).await;
    assert_s3_error(&after, 412, "PreconditionFailed");
    let puts: Vec<String> =
        effects(&fake).iter().map(|e| e.params["body"].as_str().unwrap().to_string()).collect();
    assert_eq!(puts, ["x", "first"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conditional_write_whose_caller_left_before_its_commit_frees_the_key() {
    let (running, addr) = start().await;
    let fake = files(&running);
    fake.add_rule(
        FaultRule::always(FaultSpec::Latency { before_ms: 3_000, after_ms: 0 }).method("PUT").nth(1),
    )
    .unwrap();
    // The caller gives up 300 ms after the request arrived, which cancels it before its commit.
    let left = client::send_hasty(addr, &put("k", "left").header("If-None-Match", "*"), &fake, 300).await;
    assert_eq!(left, Seen::Timeout);
    let deadline = tokio::time::Instant::now() + Duration::from_millis(WAIT_MS);
    while fake.journal().first().is_some_and(|e| e.outcome == "pending")
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(fake.journal()[0].outcome, "abandoned", "{:?}", fake.journal());
    let next = send(addr, put("k", "next").header("If-None-Match", "*")).await;
    assert_eq!(next.status(), Some(200), "{next:?}");
    let ledger = effects(&fake);
    assert_eq!((ledger.len(), &ledger[0].params["body"]), (1, &json!("next")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checksums_and_digests_are_verified() {
    let (running, addr) = start().await;
    let fake = files(&running);
    let body = b"checksummed body";
    let crc = crc32_of(body);
    let md5 = BASE64.encode(Md5::digest(body));

    let good = send(
        addr,
        put("c", "checksummed body")
            .header("x-amz-checksum-crc32", &crc)
            .header("x-amz-sdk-checksum-algorithm", "CRC32"),
    )
    .await;
    assert_eq!(good.status(), Some(200), "{good:?}");
    assert_eq!(good.header("x-amz-checksum-crc32"), Some(crc.as_str()), "echoed as S3 does");
    let wrong =
        send(addr, put("c", "checksummed body").header("x-amz-checksum-crc32", &crc32_of(b"other"))).await;
    let xml = assert_s3_error(&wrong, 400, "BadDigest");
    assert_eq!(
        element(xml, "Message"),
        Some("The CRC32 you specified did not match the calculated checksum.")
    );
    // The other algorithms S3 takes are checked too: the catalogue's check values of
    // "123456789" (CRC-32C, CRC-64/NVME) and its SHA-1.
    let sha1: [u8; 20] = [
        0xf7, 0xc3, 0xbc, 0x1d, 0x80, 0x8e, 0x04, 0x73, 0x2a, 0xdf, 0x67, 0x99, 0x65, 0xcc, 0xc3, 0x4c, 0xa7,
        0xae, 0x34, 0x41,
    ];
    let others = [
        ("crc32c", BASE64.encode(0xE306_9283_u32.to_be_bytes()), "AAAAAA=="),
        ("crc64nvme", BASE64.encode(0xAE8B_1486_0A79_9888_u64.to_be_bytes()), "AAAAAAAAAAA="),
        ("sha1", BASE64.encode(sha1), "AAAAAAAAAAAAAAAAAAAAAAAAAAA="),
    ];
    for (algorithm, right, wrong) in others {
        let header = format!("x-amz-checksum-{algorithm}");
        let good = send(addr, put(&format!("o-{algorithm}"), "123456789").header(&header, &right)).await;
        assert_eq!((good.status(), good.header(&header)), (Some(200), Some(right.as_str())), "{good:?}");
        let bad = send(addr, put(&format!("o-{algorithm}"), "123456789").header(&header, wrong)).await;
        let xml = assert_s3_error(&bad, 400, "BadDigest");
        let message =
            format!("The {} you specified did not match the calculated checksum.", algorithm.to_uppercase());
        assert_eq!(element(xml, "Message"), Some(message.as_str()));
    }
    let garbled = send(addr, put("c", "x").header("x-amz-checksum-crc32", "not-base64")).await;
    assert_s3_error(&garbled, 400, "InvalidRequest");
    let two = send(
        addr,
        put("c", "x")
            .header("x-amz-checksum-crc32", &crc32_of(b"x"))
            .header("x-amz-checksum-sha1", "AAAAAAAAAAAAAAAAAAAAAAAAAAA="),
    )
    .await;
    assert_s3_error(&two, 400, "InvalidRequest");
    let announced = send(addr, put("c", "x").header("x-amz-sdk-checksum-algorithm", "CRC32")).await;
    assert_s3_error(&announced, 400, "InvalidRequest");

    let md5_ok = send(addr, put("m", "checksummed body").header("Content-MD5", &md5)).await;
    assert_eq!(md5_ok.status(), Some(200), "{md5_ok:?}");
    let md5_bad = send(addr, put("m", "another body").header("Content-MD5", &md5)).await;
    assert_s3_error(&md5_bad, 400, "BadDigest");
    let md5_invalid = send(addr, put("m", "x").header("Content-MD5", "short")).await;
    assert_s3_error(&md5_invalid, 400, "InvalidDigest");
    let sha_bad = send(addr, put("m", "x").header("x-amz-content-sha256", &"0".repeat(64))).await;
    assert_s3_error(&sha_bad, 400, "XAmzContentSHA256Mismatch");

    // A GET asked for checksums gets the CRC32 of the whole object, and only then.
    let checked = send(addr, get("c").header("x-amz-checksum-mode", "ENABLED")).await;
    assert_eq!(checked.header("x-amz-checksum-crc32"), Some(crc.as_str()), "{checked:?}");
    let seeded = running.fakes.files.seed_object("reports", "seeded", b"seeded body").unwrap();
    assert_eq!(seeded, etag_of(b"seeded body"));
    let seeded = send(addr, get("seeded").header("x-amz-checksum-mode", "ENABLED")).await;
    assert_eq!(seeded.header("x-amz-checksum-crc32"), Some(crc32_of(b"seeded body").as_str()), "{seeded:?}");
    let ranged =
        send(addr, get("c").header("x-amz-checksum-mode", "ENABLED").header("Range", "bytes=0-3")).await;
    assert_eq!((ranged.status(), ranged.header("x-amz-checksum-crc32")), (Some(206), None), "{ranged:?}");

    assert_eq!(effects(&fake).len(), 5, "only the good PUTs stored: {:#?}", effects(&fake));
}

/// An `aws-chunked` body as botocore and the AWS SDKs frame it: signed chunks, a zero
/// chunk, a checksum trailer and a final empty line.
fn chunked(chunks: &[&[u8]], trailer: Option<&str>) -> Vec<u8> {
    let mut raw = Vec::new();
    for chunk in chunks {
        raw.extend_from_slice(format!("{:x};chunk-signature={}\r\n", chunk.len(), "0".repeat(64)).as_bytes());
        raw.extend_from_slice(chunk);
        raw.extend_from_slice(b"\r\n");
    }
    raw.extend_from_slice(format!("0;chunk-signature={}\r\n", "0".repeat(64)).as_bytes());
    if let Some(trailer) = trailer {
        raw.extend_from_slice(format!("{trailer}\r\n").as_bytes());
    }
    raw.extend_from_slice(b"\r\n");
    raw
}

fn chunked_put(key: &str, raw: Vec<u8>, decoded_len: usize) -> Req {
    Req::new("PUT", format!("/reports/{key}"))
        .header("Content-Encoding", "aws-chunked")
        .header("x-amz-content-sha256", "STREAMING-UNSIGNED-PAYLOAD-TRAILER")
        .header("x-amz-decoded-content-length", &decoded_len.to_string())
        .header("x-amz-trailer", "x-amz-checksum-crc32")
        .header("x-amz-sdk-checksum-algorithm", "CRC32")
        .body(raw)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aws_chunked_bodies_are_decoded_and_their_trailers_checked() {
    let (running, addr) = start().await;
    let fake = files(&running);
    let payload = b"hello chunked world";
    let trailer = format!("x-amz-checksum-crc32:{}", crc32_of(payload));
    let raw = chunked(&[&payload[..6], &payload[6..]], Some(&trailer));
    let stored = send(addr, chunked_put("chunked", raw.clone(), payload.len())).await;
    assert_eq!(stored.status(), Some(200), "{stored:?}");
    assert_eq!(stored.header("etag"), Some(etag_of(payload).as_str()), "the ETag is of the decoded body");
    assert_eq!(stored.header("x-amz-checksum-crc32"), Some(crc32_of(payload).as_str()));
    let got = send(addr, get("chunked")).await;
    assert_eq!(body_of(&got), "hello chunked world");
    assert_eq!(got.header("content-encoding"), None, "aws-chunked is framing, not the object's encoding");

    let bad_trailer = chunked(&[payload], Some(&format!("x-amz-checksum-crc32:{}", crc32_of(b"nope"))));
    assert_s3_error(&send(addr, chunked_put("bad", bad_trailer, payload.len())).await, 400, "BadDigest");
    let no_trailer = chunked(&[payload], None);
    assert_s3_error(
        &send(addr, chunked_put("bad", no_trailer, payload.len())).await,
        400,
        "MalformedTrailerError",
    );
    let mut cut = raw.clone();
    cut.truncate(20);
    assert_s3_error(&send(addr, chunked_put("bad", cut, payload.len())).await, 400, "IncompleteBody");
    let short = chunked(&[payload], Some(&trailer));
    assert_s3_error(&send(addr, chunked_put("bad", short, payload.len() + 5)).await, 400, "IncompleteBody");
    assert_s3_error(
        &send(addr, chunked_put("bad", b"zz\r\nhello\r\n0\r\n\r\n".to_vec(), 5)).await,
        400,
        "InvalidRequest",
    );
    let broken_trailer = chunked(&[payload], Some("no colon here"));
    assert_s3_error(
        &send(addr, chunked_put("bad", broken_trailer, payload.len())).await,
        400,
        "MalformedTrailerError",
    );

    let ledger = effects(&fake);
    assert_eq!(ledger.len(), 1, "{ledger:#?}");
    assert_eq!(
        (&ledger[0].params["body"], &ledger[0].params["size"]),
        (&json!("hello chunked world"), &json!(19))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expect_100_continue_gets_a_continue_before_the_body() {
    let (running, addr) = start().await;
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "PUT /reports/continued HTTP/1.1\r\nHost: {addr}\r\nExpect: 100-continue\r\nContent-Length: 5\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    // Nothing of the body is sent until the server says to go on.
    let mut interim = Vec::new();
    let mut byte = [0u8; 1];
    while !interim.ends_with(b"\r\n\r\n") {
        let read = tokio::time::timeout(Duration::from_millis(WAIT_MS), stream.read(&mut byte)).await;
        assert!(matches!(read, Ok(Ok(1))), "no interim answer: {:?}", String::from_utf8_lossy(&interim));
        interim.push(byte[0]);
    }
    assert!(interim.starts_with(b"HTTP/1.1 100 Continue\r\n"), "{}", String::from_utf8_lossy(&interim));
    stream.write_all(b"hello").await.unwrap();
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_millis(WAIT_MS), stream.read_to_end(&mut rest))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&rest);
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(text.to_ascii_lowercase().contains(&format!("etag: {}", etag_of(b"hello"))), "{text}");
    assert_eq!(running.fakes.files.core().lock().ledger.effects().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_objects_removes_each_key_with_an_effect_each() {
    let (running, addr) = start().await;
    let fake = files(&running);
    for key in ["a", "b&c", "d"] {
        running.fakes.files.seed_object("reports", key, key.as_bytes()).unwrap();
    }
    let xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Delete xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Object><Key>a</Key></Object><Object><Key>b&amp;c</Key></Object><Object><Key>never</Key></Object></Delete>";
    let req = Req::new("POST", "/reports?delete")
        .header("x-amz-checksum-crc32", &crc32_of(xml.as_bytes()))
        .body(xml);
    let done = send(addr, req).await;
    assert_eq!(done.status(), Some(200), "{done:?}");
    let result = body_of(&done);
    assert!(result.contains("<DeleteResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"), "{result}");
    for key in ["<Key>a</Key>", "<Key>b&amp;c</Key>", "<Key>never</Key>"] {
        assert!(result.contains(&format!("<Deleted>{key}</Deleted>")), "{result}");
    }
    let ledger = effects(&fake);
    let deleted: Vec<(&str, &str)> = ledger.iter().map(|e| (e.kind.as_str(), e.object_id.as_str())).collect();
    assert_eq!(deleted, [("object.deleted", "reports/a"), ("object.deleted", "reports/b&c")]);
    assert_eq!(ledger[1].params["replaced"], etag_of(b"b&c"));
    assert_eq!(send(addr, get("d")).await.status(), Some(200));

    let quiet = "<Delete><Quiet>true</Quiet><Object><Key>d</Key></Object></Delete>";
    let req = Req::new("POST", "/reports?delete")
        .header("Content-MD5", &BASE64.encode(Md5::digest(quiet)))
        .body(quiet);
    let done = send(addr, req).await;
    assert_eq!(done.status(), Some(200));
    assert!(!body_of(&done).contains("<Deleted>"), "quiet mode lists no successes: {done:?}");
    assert_eq!(effects(&fake).len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buckets_listings_and_the_seed_api() {
    let (running, addr) = start().await;
    let fake = files(&running);
    let seeded = send(
        addr,
        Req::new("POST", "/__twice/seed").body(
            json!({"buckets": ["archive"], "objects": [{"bucket": "reports", "key": "q3.csv", "body": "text"},
                   {"bucket": "reports", "key": "dir/a", "body": "1"}, {"bucket": "reports", "key": "dir/b", "body": "2"}]})
            .to_string(),
        ),
    )
    .await;
    assert_eq!(seeded.status(), Some(201), "{seeded:?}");
    assert_eq!(seeded.json()["objects"][0]["etag"], etag_of(b"text"));
    let refused = send(addr, Req::new("POST", "/__twice/seed").body(r#"{"buckets": ["Bad_Name"]}"#)).await;
    assert_eq!(refused.status(), Some(400), "{refused:?}");
    assert_eq!(body_of(&send(addr, get("q3.csv")).await), "text");

    let created = send(addr, Req::new("PUT", "/fresh")).await;
    assert_eq!((created.status(), created.header("location")), (Some(200), Some("/fresh")), "{created:?}");
    assert_eq!(send(addr, Req::new("HEAD", "/fresh")).await.status(), Some(200));
    assert_eq!(send(addr, Req::new("HEAD", "/nobucket")).await.status(), Some(404));
    let buckets = send(addr, Req::new("GET", "/")).await;
    for name in ["archive", "fresh", "reports"] {
        assert!(body_of(&buckets).contains(&format!("<Name>{name}</Name>")), "{buckets:?}");
    }

    let listed = send(addr, Req::new("GET", "/reports?list-type=2&delimiter=/")).await;
    let xml = body_of(&listed);
    assert_eq!(element(xml, "KeyCount"), Some("2"), "{xml}");
    assert!(
        xml.contains("<Contents><Key>q3.csv</Key>") && xml.contains("<CommonPrefixes><Prefix>dir/</Prefix>"),
        "{xml}"
    );
    let page = send(addr, Req::new("GET", "/reports?list-type=2&max-keys=1&prefix=dir/")).await;
    let xml = body_of(&page);
    assert_eq!((element(xml, "IsTruncated"), element(xml, "Key")), (Some("true"), Some("dir/a")), "{xml}");
    let token = element(xml, "NextContinuationToken").unwrap().to_string();
    let next = send(
        addr,
        Req::new("GET", format!("/reports?list-type=2&max-keys=1&prefix=dir/&continuation-token={token}")),
    )
    .await;
    let xml = body_of(&next);
    assert_eq!((element(xml, "IsTruncated"), element(xml, "Key")), (Some("false"), Some("dir/b")), "{xml}");

    let full = send(addr, Req::new("DELETE", "/reports")).await;
    assert_s3_error(&full, 409, "BucketNotEmpty");
    assert_eq!(send(addr, Req::new("DELETE", "/fresh")).await.status(), Some(204));
    let gone = send(addr, put("x", "y").target_bucket("fresh")).await;
    let xml = assert_s3_error(&gone, 404, "NoSuchBucket");
    assert_eq!(element(xml, "BucketName"), Some("fresh"));
    assert!(effects(&fake).is_empty(), "buckets and seeds are not effects: {:#?}", effects(&fake));
}

trait Retarget {
    fn target_bucket(self, bucket: &str) -> Self;
}

impl Retarget for Req {
    fn target_bucket(mut self, bucket: &str) -> Self {
        self.target = self.target.replacen("/reports/", &format!("/{bucket}/"), 1);
        self
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_get_s3s_error_codes() {
    let (running, addr) = start().await;
    let long_key = "k".repeat(1025);
    let not_xml = "<Delete><Object><Key>a</Key></Object>";
    let cases: Vec<(Req, u16, &str)> = vec![
        (put("k", "x").target_bucket("Bad_Bucket"), 400, "InvalidBucketName"),
        (put("k", "x").target_bucket("ab"), 400, "InvalidBucketName"),
        (put("k", "x").target_bucket("a..b"), 400, "InvalidBucketName"),
        (get("k").target_bucket("192.168.0.1"), 400, "InvalidBucketName"),
        (put(&long_key, "x"), 400, "KeyTooLongError"),
        (get("%zz"), 400, "InvalidURI"),
        (get("%ff"), 400, "InvalidURI"),
        (put("k", "x").target_bucket("missing-bucket"), 404, "NoSuchBucket"),
        (get("k").target_bucket("missing-bucket"), 404, "NoSuchBucket"),
        (chunked_put("k", b"5\r\nhel".to_vec(), 5), 400, "IncompleteBody"),
        (chunked_put("k", b"nothex\r\n".to_vec(), 5), 400, "InvalidRequest"),
        (chunked_put("k", b"3\r\nhello\r\n0\r\n\r\n".to_vec(), 3), 400, "InvalidRequest"),
        (put("k", "x").header("Content-MD5", "!!!"), 400, "InvalidDigest"),
        (put("k", "x").header("Content-MD5", &BASE64.encode([0u8; 16])), 400, "BadDigest"),
        (put("k", "x").header("x-amz-checksum-crc32", &crc32_of(b"y")), 400, "BadDigest"),
        (put("k", "x").header("If-None-Match", "\"abc\""), 400, "NotImplemented"),
        (put("k", "x").header("x-amz-copy-source", "/reports/other"), 400, "NotImplemented"),
        (put("k", "x").header("x-amz-content-sha256", "sha-please"), 400, "InvalidArgument"),
        (put("k", "x").header(&format!("x-amz-meta-{}", "m".repeat(2100)), "v"), 400, "MetadataTooLarge"),
        (
            Req::new("POST", "/reports?delete")
                .header("Content-MD5", &BASE64.encode(Md5::digest(not_xml)))
                .body(not_xml),
            400,
            "MalformedXML",
        ),
        (
            Req::new("POST", "/reports?delete").body("<Delete><Object><Key>a</Key></Object></Delete>"),
            400,
            "InvalidRequest",
        ),
        (
            Req::new("POST", "/reports?delete")
                .header("x-amz-checksum-crc32", &crc32_of(b"<Other/>"))
                .body("<Other/>"),
            400,
            "MalformedXML",
        ),
        (Req::new("PUT", "/newbucket").body("<CreateBucketConfiguration>"), 400, "MalformedXML"),
        (Req::new("PATCH", "/reports/k"), 405, "MethodNotAllowed"),
        (Req::new("POST", "/reports/k"), 405, "MethodNotAllowed"),
        (Req::new("POST", "/reports"), 405, "MethodNotAllowed"),
        (Req::new("DELETE", "/"), 405, "MethodNotAllowed"),
        (Req::new("PUT", "/reports/k?tagging").body("<Tagging/>"), 400, "NotImplemented"),
        (Req::new("GET", "/reports/k?partNumber=1"), 400, "NotImplemented"),
        (Req::new("GET", "/reports?uploads"), 400, "NotImplemented"),
        (Req::new("PUT", "/reports/k?partNumber=0&uploadId=u").body("x"), 400, "InvalidArgument"),
        (Req::new("PUT", "/reports/k?partNumber=10001&uploadId=u").body("x"), 400, "InvalidArgument"),
        (Req::new("PUT", "/reports/k?partNumber=1&uploadId=nope").body("x"), 404, "NoSuchUpload"),
        (Req::new("DELETE", "/reports/k?uploadId=nope"), 404, "NoSuchUpload"),
        (Req::new("GET", "/reports/k?uploadId=nope"), 404, "NoSuchUpload"),
        (get("k?versionId=3HL4kqtJlcpXroDTDmJ"), 400, "InvalidArgument"),
        (Req::new("GET", "/reports?max-keys=lots"), 400, "InvalidArgument"),
        (put("k", "x").body(vec![b'a'; 17 * 1024 * 1024]), 413, "EntityTooLarge"),
    ];
    let mut failures = Vec::new();
    for (req, status, code) in cases {
        let seen = send(addr, req.clone()).await;
        let body = body_of(&seen);
        let fine = seen.status() == Some(status)
            && element(body, "Code") == Some(code)
            && body.starts_with("<?xml")
            && element(body, "RequestId").is_some()
            && seen.header("x-amz-request-id").is_some()
            && seen.header("x-amz-id-2").is_some();
        if !fine {
            failures.push(format!(
                "{} {}: expected {status} {code}, saw {seen:?}",
                req.method,
                &req.target[..req.target.len().min(80)]
            ));
        }
    }
    assert!(files(&running).ledger().is_empty(), "nothing malformed took effect");
    let ok = send(addr, put("k", "x")).await;
    assert_eq!(ok.status(), Some(200), "{ok:?}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// --- Random requests -------------------------------------------------------------------

fn method() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => prop::sample::select(vec!["GET", "PUT", "HEAD", "DELETE", "POST"]).prop_map(String::from),
        1 => prop::sample::select(vec!["PATCH", "OPTIONS", "TRACE"]).prop_map(String::from),
        1 => "[A-Z]{1,8}",
    ]
}

fn path() -> impl Strategy<Value = String> {
    let bucket = prop_oneof![
        4 => Just("reports".to_string()),
        1 => Just("other-bucket".to_string()),
        1 => "[a-zA-Z0-9._%-]{0,12}",
    ];
    let key = prop_oneof![
        3 => prop::sample::select(vec!["q3.csv", "a", "dir/a", "dir/b", "a%20b", "%C3%BC", "x%2Fy"]).prop_map(String::from),
        2 => "[a-zA-Z0-9/._~%-]{0,20}",
        1 => Just("k".repeat(1030)),
        1 => Just(String::new()),
    ];
    prop_oneof![
        1 => Just("/".to_string()),
        1 => bucket.clone().prop_map(|b| format!("/{b}")),
        6 => (bucket, key).prop_map(|(b, k)| format!("/{b}/{k}")),
    ]
}

fn query() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => Just(String::new()),
        1 => prop::sample::select(vec!["delete", "delete=", "tagging", "uploads", "acl", "versionId=null", "versionId=x", "x-id=PutObject",
            "list-type=2", "list-type=2&max-keys=1&prefix=dir/", "list-type=2&delimiter=/", "marker=a&max-keys=2", "max-keys=-1",
            "continuation-token=%%%", "list-type=2&continuation-token=ZGlyL2E=", "encoding-type=url", "encoding-type=zip",
            "response-content-type=text/x", "list-type=3", "uploadId=x", "partNumber=1&uploadId=x", "partNumber=0&uploadId=x",
            "uploadId=x&max-parts=zz", "uploads&uploadId=x", "partNumber=2"]).prop_map(String::from),
        1 => "[ -~]{0,20}",
    ]
}

fn delete_xml() -> impl Strategy<Value = Vec<u8>> {
    let key = prop_oneof![Just("a".to_string()), Just("q3.csv".to_string()), "[ -~]{0,10}"];
    (prop::collection::vec(key, 0..4), any::<bool>(), any::<bool>()).prop_map(|(keys, quiet, broken)| {
        let objects: String = keys
            .iter()
            .map(|k| format!("<Object><Key>{}</Key></Object>", quick_xml::escape::escape(k.as_str())))
            .collect();
        let quiet = if quiet { "<Quiet>true</Quiet>" } else { "" };
        let xml = format!("<Delete>{quiet}{objects}</Delete>");
        if broken { xml.as_bytes()[..xml.len() / 2].to_vec() } else { xml.into_bytes() }
    })
}

fn chunked_body() -> impl Strategy<Value = Vec<u8>> {
    (prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 0..4), any::<bool>(), 0usize..200)
        .prop_map(|(chunks, trailer, cut)| {
            let whole: Vec<u8> = chunks.concat();
            let refs: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
            let trailer = trailer.then(|| format!("x-amz-checksum-crc32:{}", crc32_of(&whole)));
            let mut raw = chunked(&refs, trailer.as_deref());
            if cut > 0 && cut < raw.len() {
                raw.truncate(raw.len() - cut.min(raw.len()));
            }
            raw
        })
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        2 => Just(Vec::new()),
        2 => "[ -~]{0,40}".prop_map(String::into_bytes),
        2 => prop::collection::vec(any::<u8>(), 0..128),
        2 => delete_xml(),
        2 => chunked_body(),
        1 => Just(b"<CreateBucketConfiguration><LocationConstraint/></CreateBucketConfiguration>".to_vec()),
    ]
}

fn headers() -> impl Strategy<Value = Vec<(String, String)>> {
    let header = prop_oneof![
        (Just("If-None-Match"), prop_oneof![Just("*".to_string()), Just("\"x\"".to_string()), "[ -~]{0,10}"]),
        (Just("If-Match"), prop_oneof![Just("*".to_string()), Just(etag_of(b"v1")), Just(",".to_string()), "[ -~]{0,10}"]),
        (Just("If-Modified-Since"), prop_oneof![Just("Sat, 01 Jan 2000 00:00:00 GMT".to_string()), "[ -~]{0,30}"]),
        (Just("If-Unmodified-Since"), prop_oneof![Just("Sat, 01 Jan 2000 00:00:00 GMT".to_string()), "[ -~]{0,30}"]),
        (Just("Range"), prop_oneof![Just("bytes=0-1".to_string()), Just("bytes=-5".to_string()), Just("bytes=100-".to_string()), "[ -~]{0,15}"]),
        (Just("Content-MD5"), prop_oneof![Just(BASE64.encode([0u8; 16])), "[ -~]{0,24}"]),
        (Just("x-amz-checksum-crc32"), prop_oneof![Just("AAAAAA==".to_string()), "[ -~]{0,10}"]),
        (Just("x-amz-checksum-sha256"), "[A-Za-z0-9+/=]{0,44}"),
        (Just("x-amz-checksum-crc64nvme"), "[A-Za-z0-9+/=]{0,12}"),
        (Just("x-amz-sdk-checksum-algorithm"), prop_oneof![Just("CRC32".to_string()), "[ -~]{0,8}"]),
        (Just("x-amz-checksum-mode"), Just("ENABLED".to_string())),
        (Just("Content-Encoding"), prop_oneof![Just("aws-chunked".to_string()), Just("aws-chunked,gzip".to_string()), "[ -~]{0,10}"]),
        (Just("x-amz-content-sha256"), prop_oneof![Just("UNSIGNED-PAYLOAD".to_string()), Just("STREAMING-UNSIGNED-PAYLOAD-TRAILER".to_string()), "[0-9a-f]{64}", "[ -~]{0,10}"]),
        (Just("x-amz-decoded-content-length"), prop_oneof!["[0-9]{1,3}", "[ -~]{0,6}"]),
        (Just("x-amz-trailer"), prop_oneof![Just("x-amz-checksum-crc32".to_string()), "[ -~]{0,20}"]),
        (Just("x-amz-meta-note"), "[ -~]{0,20}"),
        (Just("Content-Type"), "[ -~]{0,20}"),
        (Just("x-amz-copy-source"), Just("/reports/a".to_string())),
        (Just("Transfer-Encoding"), Just("chunked".to_string())),
        (Just("Expect"), Just("100-continue".to_string())),
        (Just("Authorization"), Just("AWS4-HMAC-SHA256 Credential=x/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00".to_string())),
    ];
    prop::collection::vec(header.prop_map(|(n, v)| (n.to_string(), v)), 0..5)
}

fn request() -> impl Strategy<Value = FakeRequest> {
    (method(), path(), query(), headers(), body()).prop_map(|(method, path, query, headers, body)| {
        let target = if query.is_empty() { path } else { format!("{path}?{query}") };
        let mut req = FakeRequest::new(&method, &target).body(body);
        for (name, value) in headers {
            req = req.header(&name, &value);
        }
        req
    })
}

/// Requests a client that knows S3 would send, with valid digests, so that the random mix
/// also reaches commits, conditional writes and DeleteObjects.
fn plausible() -> impl Strategy<Value = FakeRequest> {
    let key = prop::sample::select(vec!["a", "q3.csv", "dir/a", "dir/b", "new"]);
    let condition = prop::sample::select(vec![
        None,
        Some(("If-None-Match", "*".to_string())),
        Some(("If-Match", etag_of(b"v1"))),
    ]);
    let put = (key.clone(), "[ -~]{0,30}", condition, 0u8..4).prop_map(|(key, text, condition, framing)| {
        let payload = text.into_bytes();
        let mut req = FakeRequest::new("PUT", &format!("/reports/{key}"));
        req = match framing {
            0 => req.body(payload.clone()),
            1 => req.header("x-amz-checksum-crc32", &crc32_of(&payload)).body(payload.clone()),
            2 => req.header("Content-MD5", &BASE64.encode(Md5::digest(&payload))).body(payload.clone()),
            _ => {
                let trailer = format!("x-amz-checksum-crc32:{}", crc32_of(&payload));
                req.header("Content-Encoding", "aws-chunked")
                    .header("x-amz-decoded-content-length", &payload.len().to_string())
                    .header("x-amz-trailer", "x-amz-checksum-crc32")
                    .body(chunked(&[&payload], Some(&trailer)))
            }
        };
        match condition {
            Some((name, value)) => req.header(name, &value),
            None => req,
        }
    });
    let delete_objects = delete_xml().prop_map(|xml| {
        FakeRequest::new("POST", "/reports?delete")
            .header("Content-MD5", &BASE64.encode(Md5::digest(&xml)))
            .body(xml)
    });
    let read = (prop::sample::select(vec!["GET", "HEAD", "DELETE"]), key, any::<bool>()).prop_map(
        |(method, key, conditional)| {
            let req = FakeRequest::new(method, &format!("/reports/{key}"));
            if conditional { req.header("If-Match", &etag_of(b"v1")) } else { req }
        },
    );
    prop_oneof![3 => put, 1 => delete_objects, 2 => read]
}

/// An answer in S3's shape: request ids always; an error document on every error with a body.
fn well_formed(disposition: &Disposition, method: &str) -> Result<u16, String> {
    let Disposition::Respond(response) = disposition else {
        return Err(format!("a request ended without an answer and no fault armed: {disposition:?}"));
    };
    for name in ["x-amz-request-id", "x-amz-id-2"] {
        if response.header(name).is_none() {
            return Err(format!("no {name}: {response:?}"));
        }
    }
    if response.status >= 400 && method != "HEAD" {
        let body = std::str::from_utf8(&response.body).map_err(|e| format!("error body not UTF-8: {e}"))?;
        let code = element(body, "Code").unwrap_or_default();
        if !body.starts_with("<?xml") || code.is_empty() || element(body, "RequestId").is_none() {
            return Err(format!("error {} not in S3's shape: {body}", response.status));
        }
        // The error document must be well-formed XML.
        let mut reader = quick_xml::Reader::from_str(body);
        loop {
            match reader.read_event() {
                Ok(quick_xml::events::Event::Eof) => break,
                Ok(_) => {}
                Err(e) => return Err(format!("error document is not XML ({e}): {body}")),
            }
        }
    }
    Ok(response.status)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3_000, ..ProptestConfig::default() })]

    #[test]
    fn random_requests_to_files_never_panic_nor_answer_5xx(
        requests in prop::collection::vec(prop_oneof![3 => request(), 2 => plausible()], 1..6),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        let (fakes, _clock) = manual_fakes(5);
        fakes.files.seed_bucket("reports").unwrap();
        fakes.files.seed_object("reports", "a", b"v1").unwrap();
        fakes.files.seed_object("reports", "dir/a", b"1").unwrap();
        for req in &requests {
            let disposition = runtime.block_on(fakes.files.handle(req.clone()));
            let status = well_formed(&disposition, &req.method).map_err(TestCaseError::fail)?;
            prop_assert!(status < 500, "answered {status} to {req:?}");
        }
        // Whatever happened, the ledger holds only the two kinds of effects, each well-formed.
        for effect in Fake::Files(fakes.files.clone()).ledger() {
            prop_assert!(["object.put", "object.deleted"].contains(&effect.kind.as_str()), "{effect:?}");
            prop_assert!(effect.params["bucket"].is_string() && effect.params["key"].is_string(), "{effect:?}");
        }
    }
}

/// A small body reaches the fake as a slice of the connection's read buffer; the stored
/// object keeps a copy of its bytes, not the whole buffer (8 KiB or more per object).
#[tokio::test]
async fn a_stored_object_does_not_keep_the_request_buffer_alive() {
    let (fakes, _clock) = manual_fakes(11);
    fakes.files.seed_bucket("reports").unwrap();
    let buffer = bytes::Bytes::from(vec![b'x'; 64 * 1024]);
    let mut req = FakeRequest::new("PUT", "/reports/small.txt");
    req.body = buffer.slice(100..120);
    let Disposition::Respond(response) = fakes.files.handle(req).await else { panic!("no answer") };
    assert_eq!(response.status, 200, "{:?}", String::from_utf8_lossy(&response.body));
    assert!(buffer.is_unique(), "the stored object still holds the request's buffer");
    let get = FakeRequest::new("GET", "/reports/small.txt");
    let Disposition::Respond(read) = fakes.files.handle(get).await else { panic!("no answer") };
    assert_eq!(&read.body[..], &[b'x'; 20][..]);
}
