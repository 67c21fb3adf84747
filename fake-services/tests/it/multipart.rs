//! S3 multipart uploads on the files fake over loopback HTTP: the round trip and its ETag,
//! S3's errors for bad part lists, conditional completes, aborts, ListParts, the faults of
//! the shared pipeline on each new request, and the one ledger effect a Complete makes.

use std::net::SocketAddr;

use fake_services::Fake;
use md5::{Digest, Md5};
use serde_json::json;
use vocabulary::FaultRule;
use vocabulary::FaultSpec;

use crate::client::{self, Req, Running, Seen};

const WAIT_MS: u64 = 20_000;
/// S3's smallest part but the last.
const MIB_5: usize = 5 * 1024 * 1024;
const KEY: &str = "big.bin";

async fn start(seed: u64) -> (Running, SocketAddr, Fake) {
    let running = Running::start(seed).await;
    running.fakes.files.seed_bucket("reports").unwrap();
    let addr = running.addr("files");
    let fake = running.fake("files");
    (running, addr, fake)
}

async fn send(addr: SocketAddr, req: Req) -> Seen {
    client::send(addr, &req, WAIT_MS).await
}

fn body_of(seen: &Seen) -> &str {
    match seen {
        Seen::Answer { body, .. } => body,
        _ => "",
    }
}

fn element<'a>(xml: &'a str, name: &str) -> Option<&'a str> {
    let open = format!("<{name}>");
    let start = xml.find(&open)? + open.len();
    let end = xml[start..].find(&format!("</{name}>"))? + start;
    Some(&xml[start..end])
}

/// The `<ETag>` of a result document, unescaped (S3 writes the quotes as `&quot;`).
fn etag_in(xml: &str) -> Option<String> {
    element(xml, "ETag").map(|e| e.replace("&quot;", "\""))
}

fn code(seen: &Seen) -> Option<&str> {
    element(body_of(seen), "Code")
}

/// Deterministic bytes that differ from part to part.
fn bytes(len: usize, salt: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(salt) ^ (i >> 10) as u8).collect()
}

fn md5(data: &[u8]) -> [u8; 16] {
    Md5::digest(data).into()
}

fn hex(data: &[u8]) -> String {
    data.iter().map(|b| format!("{b:02x}")).collect()
}

/// S3's multipart ETag, computed here from the parts, independently of the fake.
fn multipart_etag(parts: &[&[u8]]) -> String {
    let md5s: Vec<u8> = parts.iter().flat_map(|p| md5(p)).collect();
    format!("\"{}-{}\"", hex(&md5(&md5s)), parts.len())
}

async fn create(addr: SocketAddr, key: &str) -> String {
    let seen =
        send(addr, Req::new("POST", format!("/reports/{key}?uploads")).header("Content-Type", "text/csv"))
            .await;
    assert_eq!(seen.status(), Some(200), "{seen:?}");
    element(body_of(&seen), "UploadId").expect("an UploadId").to_string()
}

fn part(key: &str, upload: &str, n: u32, body: &[u8]) -> Req {
    Req::new("PUT", format!("/reports/{key}?partNumber={n}&uploadId={upload}")).body(body.to_vec())
}

/// A CompleteMultipartUpload listing `(part number, quoted ETag)`.
fn complete(key: &str, upload: &str, parts: &[(u32, String)]) -> Req {
    let listed: String = parts
        .iter()
        .map(|(n, etag)| format!("<Part><PartNumber>{n}</PartNumber><ETag>{etag}</ETag></Part>"))
        .collect();
    Req::new("POST", format!("/reports/{key}?uploadId={upload}"))
        .body(format!("<CompleteMultipartUpload>{listed}</CompleteMultipartUpload>"))
}

fn etag(seen: &Seen) -> String {
    seen.header("etag").unwrap_or_default().to_string()
}

/// Creates an upload of `KEY` with two parts (5 MiB and 1 KiB); returns the upload id, the
/// parts' bodies and the listing a Complete needs.
async fn two_parts(addr: SocketAddr) -> (String, Vec<Vec<u8>>, Vec<(u32, String)>) {
    let upload = create(addr, KEY).await;
    let bodies = vec![bytes(MIB_5, 1), bytes(1024, 2)];
    let mut listed = Vec::new();
    for (i, body) in bodies.iter().enumerate() {
        let n = i as u32 + 1;
        let seen = send(addr, part(KEY, &upload, n, body)).await;
        assert_eq!(seen.status(), Some(200), "{seen:?}");
        assert_eq!(etag(&seen), format!("\"{}\"", hex(&md5(body))));
        listed.push((n, etag(&seen)));
    }
    (upload, bodies, listed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multipart_upload_round_trips_with_s3s_etag_and_one_effect() {
    let (_running, addr, fake) = start(31).await;
    let created = send(
        addr,
        Req::new("POST", format!("/reports/{KEY}?uploads")).header("x-amz-checksum-algorithm", "CRC32"),
    )
    .await;
    let doc = body_of(&created);
    assert!(
        doc.contains("<InitiateMultipartUploadResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"),
        "{doc}"
    );
    assert_eq!((element(doc, "Bucket"), element(doc, "Key")), (Some("reports"), Some(KEY)));
    assert_eq!(created.header("x-amz-checksum-algorithm"), Some("CRC32"));
    let upload = element(doc, "UploadId").unwrap().to_string();

    let bodies = [bytes(MIB_5, 1), bytes(MIB_5, 2), bytes(3, 3)];
    let mut listed = Vec::new();
    // Parts may arrive in any order, and a part sent again replaces the first.
    for (n, body) in [(3, &bodies[2]), (1, &bodies[1]), (2, &bodies[1]), (1, &bodies[0])] {
        let seen = send(addr, part(KEY, &upload, n, body)).await;
        assert_eq!(seen.status(), Some(200), "{seen:?}");
        assert!(seen.header("x-amz-request-id").is_some());
        listed.push((n, etag(&seen)));
    }
    assert!(fake.ledger().is_empty(), "parts are not effects");

    let parts = send(addr, Req::new("GET", format!("/reports/{KEY}?uploadId={upload}&max-parts=2"))).await;
    let doc = body_of(&parts);
    assert_eq!(parts.status(), Some(200), "{parts:?}");
    assert_eq!(
        (element(doc, "IsTruncated"), element(doc, "NextPartNumberMarker")),
        (Some("true"), Some("2"))
    );
    assert_eq!(doc.matches("<Part>").count(), 2, "{doc}");
    assert!(doc.contains(&format!("<Size>{MIB_5}</Size>")), "{doc}");

    let listing: Vec<(u32, String)> =
        (1..=3).map(|n| (n, format!("\"{}\"", hex(&md5(&bodies[n as usize - 1]))))).collect();
    let done = send(addr, complete(KEY, &upload, &listing)).await;
    let doc = body_of(&done);
    assert_eq!(done.status(), Some(200), "{done:?}");
    let want = multipart_etag(&[&bodies[0], &bodies[1], &bodies[2]]);
    assert_eq!(etag_in(doc), Some(want.clone()), "{doc}");
    assert_eq!(element(doc, "ChecksumType"), Some("COMPOSITE"), "{doc}");
    assert!(element(doc, "ChecksumCRC32").is_some_and(|c| c.ends_with("-3")), "{doc}");
    assert!(element(doc, "Location").is_some_and(|l| l.ends_with("/reports/big.bin")), "{doc}");

    let got = send(addr, Req::new("HEAD", format!("/reports/{KEY}"))).await;
    assert_eq!(got.header("etag"), Some(want.as_str()));
    assert_eq!(got.header("content-length"), Some((2 * MIB_5 + 3).to_string().as_str()));
    let range = send(
        addr,
        Req::new("GET", format!("/reports/{KEY}")).header("Range", &format!("bytes={}-", 2 * MIB_5)),
    )
    .await;
    assert_eq!((range.status(), body_of(&range).as_bytes()), (Some(206), &bodies[2][..]));

    // The upload is gone: a second Complete, a part or an abort meet NoSuchUpload.
    assert_eq!(code(&send(addr, complete(KEY, &upload, &listing)).await), Some("NoSuchUpload"));
    assert_eq!(code(&send(addr, part(KEY, &upload, 4, b"x")).await), Some("NoSuchUpload"));
    let abort = send(addr, Req::new("DELETE", format!("/reports/{KEY}?uploadId={upload}"))).await;
    assert_eq!((abort.status(), code(&abort)), (Some(404), Some("NoSuchUpload")));

    let ledger = fake.ledger();
    assert_eq!(ledger.len(), 1, "{:?}", ledger.iter().map(|e| &e.kind).collect::<Vec<_>>());
    let effect = &ledger[0];
    assert_eq!((effect.kind.as_str(), effect.object_id.as_str()), ("object.put", "reports/big.bin"));
    assert_eq!(
        (&effect.params["etag"], &effect.params["size"], &effect.params["multipart"]),
        (&json!(want), &json!(2 * MIB_5 + 3), &json!({"upload_id": upload, "parts": 3}))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_part_lists_get_s3s_errors_and_leave_the_upload_whole() {
    let (_running, addr, fake) = start(32).await;
    let (upload, bodies, listed) = two_parts(addr).await;
    let small = create(addr, "small.bin").await;
    let small_parts: Vec<(u32, String)> = {
        let mut v = Vec::new();
        for n in 1..=2 {
            let seen = send(addr, part("small.bin", &small, n, b"tiny")).await;
            v.push((n, etag(&seen)));
        }
        v
    };
    let wrong_tag = vec![listed[0].clone(), (2, "\"00000000000000000000000000000000\"".to_string())];
    let cases: Vec<(Req, u16, &str)> = vec![
        (complete(KEY, &upload, &[listed[1].clone(), listed[0].clone()]), 400, "InvalidPartOrder"),
        (complete(KEY, &upload, &[listed[0].clone(), listed[0].clone()]), 400, "InvalidPartOrder"),
        (complete(KEY, &upload, &wrong_tag), 400, "InvalidPart"),
        (complete(KEY, &upload, &[listed[0].clone(), (3, listed[1].1.clone())]), 400, "InvalidPart"),
        (complete("small.bin", &small, &small_parts), 400, "EntityTooSmall"),
        (complete(KEY, "no-such-upload", &listed), 404, "NoSuchUpload"),
        (complete("other.bin", &upload, &listed), 404, "NoSuchUpload"),
        (complete(KEY, &upload, &[]), 400, "MalformedXML"),
        (
            Req::new("POST", format!("/reports/{KEY}?uploadId={upload}")).body("<Complete"),
            400,
            "MalformedXML",
        ),
        (complete(KEY, &upload, &listed).header("If-None-Match", "\"abc\""), 400, "NotImplemented"),
        (part(KEY, &upload, 1, b"x").header("x-amz-copy-source", "/reports/a"), 400, "NotImplemented"),
        (part(KEY, &upload, 1, b"x").header("Content-MD5", "AAAAAAAAAAAAAAAAAAAAAA=="), 400, "BadDigest"),
        (
            Req::new("POST", format!("/reports/{KEY}?uploads")).header("x-amz-checksum-algorithm", "MD5"),
            400,
            "InvalidRequest",
        ),
        (Req::new("POST", format!("/missing-bucket/{KEY}?uploads")), 404, "NoSuchBucket"),
        (Req::new("GET", format!("/reports/{KEY}?uploadId={upload}&max-parts=many")), 400, "InvalidArgument"),
    ];
    let mut failures = Vec::new();
    for (req, status, want) in cases {
        let seen = send(addr, req.clone()).await;
        let body = body_of(&seen);
        let fine = seen.status() == Some(status)
            && code(&seen) == Some(want)
            && body.starts_with("<?xml")
            && element(body, "RequestId") == seen.header("x-amz-request-id");
        if !fine {
            failures.push(format!("{} {}: expected {status} {want}, saw {seen:?}", req.method, req.target));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(fake.ledger().is_empty(), "nothing refused took effect");

    // Every refusal left the upload as it was: the right list completes it.
    let done = send(addr, complete(KEY, &upload, &listed)).await;
    assert_eq!(done.status(), Some(200), "{done:?}");
    let want = multipart_etag(&[&bodies[0], &bodies[1]]);
    assert_eq!(etag_in(body_of(&done)), Some(want));
    assert_eq!(fake.ledger().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completes_honour_conditional_writes() {
    let (running, addr, fake) = start(33).await;
    let existing = running.fakes.files.seed_object("reports", KEY, b"v1").unwrap();
    let (upload, _bodies, listed) = two_parts(addr).await;
    let refused = send(addr, complete(KEY, &upload, &listed).header("If-None-Match", "*")).await;
    assert_eq!((refused.status(), code(&refused)), (Some(412), Some("PreconditionFailed")), "{refused:?}");
    let stale = send(addr, complete(KEY, &upload, &listed).header("If-Match", "\"0123\"")).await;
    assert_eq!((stale.status(), code(&stale)), (Some(412), Some("PreconditionFailed")), "{stale:?}");
    assert!(fake.ledger().is_empty());
    // The upload survived both: completing it on the ETag the caller saw replaces the object.
    let done = send(addr, complete(KEY, &upload, &listed).header("If-Match", &existing)).await;
    assert_eq!(done.status(), Some(200), "{done:?}");
    let ledger = fake.ledger();
    assert_eq!(ledger.len(), 1);
    assert_eq!(
        (&ledger[0].params["if_match"], &ledger[0].params["replaced"]),
        (&json!(existing), &json!(existing))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aborted_upload_is_gone_and_made_nothing() {
    let (_running, addr, fake) = start(34).await;
    let (upload, _bodies, listed) = two_parts(addr).await;
    let aborted = send(addr, Req::new("DELETE", format!("/reports/{KEY}?uploadId={upload}"))).await;
    assert_eq!(aborted.status(), Some(204), "{aborted:?}");
    assert_eq!(code(&send(addr, complete(KEY, &upload, &listed)).await), Some("NoSuchUpload"));
    assert_eq!(code(&send(addr, Req::new("GET", format!("/reports/{KEY}"))).await), Some("NoSuchKey"));
    assert!(fake.ledger().is_empty());
}

/// The shared pipeline's faults on the new requests, with a rule that picks the request by
/// S3's operation name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_land_on_multipart_requests_like_on_any_write() {
    let on =
        |operation: &str, fault: FaultSpec| FaultRule::always(fault).field("operation", operation).nth(1);

    // drop_after_commit on Complete: the object exists once, and the retry meets NoSuchUpload.
    let (_running, addr, fake) = start(35).await;
    fake.add_rule(on("CompleteMultipartUpload", FaultSpec::DropAfterCommit)).unwrap();
    let (upload, bodies, listed) = two_parts(addr).await;
    assert_eq!(send(addr, complete(KEY, &upload, &listed)).await, Seen::Closed);
    let retry = send(addr, complete(KEY, &upload, &listed)).await;
    assert_eq!((retry.status(), code(&retry)), (Some(404), Some("NoSuchUpload")), "{retry:?}");
    let head = send(addr, Req::new("HEAD", format!("/reports/{KEY}"))).await;
    assert_eq!(head.header("etag"), Some(multipart_etag(&[&bodies[0], &bodies[1]]).as_str()));
    assert_eq!(fake.ledger().len(), 1);

    // error_after_commit on UploadPart: the part is stored behind the 500; the retry replaces it.
    let (_running, addr, fake) = start(36).await;
    fake.add_rule(on("UploadPart", FaultSpec::ErrorAfterCommit { status: 500 })).unwrap();
    let upload = create(addr, KEY).await;
    let failed = send(addr, part(KEY, &upload, 1, b"only part")).await;
    assert_eq!((failed.status(), code(&failed)), (Some(500), Some("InternalError")));
    let listing = send(addr, Req::new("GET", format!("/reports/{KEY}?uploadId={upload}"))).await;
    assert_eq!(body_of(&listing).matches("<Part>").count(), 1, "{listing:?}");
    let again = send(addr, part(KEY, &upload, 1, b"only part")).await;
    assert_eq!(again.status(), Some(200));
    let done = send(addr, complete(KEY, &upload, &[(1, etag(&again))])).await;
    assert_eq!(done.status(), Some(200), "{done:?}");
    assert_eq!(fake.ledger().len(), 1);

    // silent_noop on Complete: 200 with the ETag, no object, and the upload still there.
    let (_running, addr, fake) = start(37).await;
    fake.add_rule(on("CompleteMultipartUpload", FaultSpec::SilentNoop)).unwrap();
    let (upload, _bodies, listed) = two_parts(addr).await;
    let lie = send(addr, complete(KEY, &upload, &listed)).await;
    assert_eq!(lie.status(), Some(200), "{lie:?}");
    assert_eq!(code(&send(addr, Req::new("GET", format!("/reports/{KEY}"))).await), Some("NoSuchKey"));
    assert!(fake.ledger().is_empty());
    assert_eq!(send(addr, complete(KEY, &upload, &listed)).await.status(), Some(200));
    assert_eq!(fake.ledger().len(), 1);

    // commit_after_timeout on a conditional Complete: the caller times out, a racing
    // conditional Complete gets 409 meanwhile, and the object appears later, once.
    let (_running, addr, fake) = start(38).await;
    fake.add_rule(on("CompleteMultipartUpload", FaultSpec::CommitAfterTimeout { delay_ms: Some(2_000) }))
        .unwrap();
    let (upload, _bodies, listed) = two_parts(addr).await;
    let conditional = complete(KEY, &upload, &listed).header("If-None-Match", "*");
    assert_eq!(client::send_hasty(addr, &conditional, &fake, 300).await, Seen::Timeout);
    let racing = send(addr, conditional.clone()).await;
    assert_eq!(
        (racing.status(), code(&racing)),
        (Some(409), Some("ConditionalRequestConflict")),
        "{racing:?}"
    );
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_millis(WAIT_MS);
    while fake.ledger().is_empty() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(fake.ledger().len(), 1);

    // reject on CreateMultipartUpload and refuse on UploadPart: nothing made.
    let (_running, addr, fake) = start(39).await;
    fake.add_rule(on("CreateMultipartUpload", FaultSpec::Reject { status: 503, body: None })).unwrap();
    let slow = send(addr, Req::new("POST", format!("/reports/{KEY}?uploads"))).await;
    assert_eq!((slow.status(), code(&slow)), (Some(503), Some("SlowDown")));
    fake.add_rule(on("UploadPart", FaultSpec::Refuse)).unwrap();
    let upload = create(addr, KEY).await;
    assert_eq!(send(addr, part(KEY, &upload, 1, b"x")).await, Seen::Reset);
    let listing = send(addr, Req::new("GET", format!("/reports/{KEY}?uploadId={upload}"))).await;
    assert_eq!(body_of(&listing).matches("<Part>").count(), 0, "{listing:?}");
    assert!(fake.ledger().is_empty());
    let journal = fake.journal();
    assert!(journal.iter().any(|e| e.faults.iter().any(|f| f.fault == "reject")), "{journal:#?}");
}
