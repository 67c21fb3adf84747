//! `files.put` (S3, path style): the precondition read before the first send (`HEAD`, then
//! `If-None-Match: *` or `If-Match` of the version it saw), what a `PUT`'s answer means (412
//! and 409 are for a read-back), and the lookup by ETag, the quoted MD5 of the body.

use md5::{Digest, Md5};

use super::{Lookup, WriteOutcome, base, excerpt, lookup_request};
use crate::model::{Action, Intent, Precondition};
use crate::world::{HttpRequest, HttpResponse, Transport};
use vocabulary::protocol::Config;
use vocabulary::protocol::Service;

/// The header that puts the intent's id in an object's user metadata
/// (`vocabulary::INTENT_TAG`, as S3 names metadata after its header).
pub(super) const INTENT_METADATA_HEADER: &str = "x-amz-meta-twice-intent";

/// `files.put`: reads the object and says what every send of the intent must require of it:
/// that it still does not exist, or that it is still the version read now.
pub async fn read_precondition(
    action: &Action,
    config: &Config,
    service: &Service,
    transport: &dyn Transport,
) -> Result<Precondition, String> {
    let Action::PutObject { bucket, key, .. } = action else {
        return Err(format!("{} has no precondition", action.name()));
    };
    let request = HttpRequest {
        method: "HEAD",
        url: object_url(service, bucket, key),
        headers: vec![],
        body: vec![],
        timeout_ms: config.limits.request_timeout_ms,
    };
    let response = transport.send(request).await.map_err(|e| format!("HEAD {bucket}/{key}: {e}"))?;
    match response.status {
        200 => header(&response, "etag")
            .map(Precondition::IfMatch)
            .ok_or_else(|| format!("HEAD {bucket}/{key}: no ETag")),
        404 => Ok(Precondition::IfNoneMatch),
        _ => Err(format!("HEAD {bucket}/{key}: {}", describe_s3(&response))),
    }
}

/// The quoted MD5 of `body`, in lowercase hex: S3's ETag for a simple `PUT`.
pub fn quoted_md5(body: &[u8]) -> String {
    let digest = Md5::digest(body);
    format!("\"{}\"", digest.iter().map(|b| format!("{b:02x}")).collect::<String>())
}

/// A `PUT`'s answer. S3 answers a conditional write that lost with 412 (the condition did not
/// hold) or 409 (a concurrent conditional write won): neither executed, and either may be
/// our own earlier attempt's doing.
pub(super) fn classify_put(body: &str, response: &HttpResponse) -> WriteOutcome {
    let error = describe_s3(response);
    match response.status {
        200..=299 => match header(response, "etag") {
            Some(etag) if etag == quoted_md5(body.as_bytes()) => WriteOutcome::Done { external_id: etag },
            Some(etag) => WriteOutcome::Ambiguous {
                error: format!("a success with ETag {etag}, not the MD5 of the body that was sent"),
            },
            None => WriteOutcome::Ambiguous { error: "a success without an ETag".into() },
        },
        412 => WriteOutcome::Conflict { error, definite: true },
        409 => WriteOutcome::Conflict { error, definite: false },
        429 => WriteOutcome::NotExecuted { error },
        408 => WriteOutcome::Ambiguous { error },
        // S3 answers a body that stopped arriving with 400 `RequestTimeout`: nothing was
        // stored, and the same request may well go through (boto3 retries it).
        400 if s3_field(response, "Code").as_deref() == Some("RequestTimeout") => {
            WriteOutcome::NotExecuted { error }
        }
        status if vocabulary::needs_decision(status) => {
            let words = match (s3_field(response, "Code"), s3_field(response, "Message")) {
                (Some(code), Some(message)) => format!("{code}: {message}"),
                (Some(code), None) => code,
                _ => excerpt(&response.body),
            };
            WriteOutcome::NeedsDecision { status, error: words }
        }
        400..=499 => WriteOutcome::Rejected { error },
        _ => WriteOutcome::Ambiguous { error },
    }
}

/// `files.put`'s lookup: `HEAD`, and the ETag compared with the MD5 of the body.
pub(super) async fn lookup_object(
    action: &Action,
    intent: &Intent,
    config: &Config,
    service: &Service,
    transport: &dyn Transport,
) -> Lookup {
    let Action::PutObject { bucket, key, body } = action else { return Lookup::Absent };
    let request = lookup_request(action, intent, config, service, None);
    let response = match transport.send(request).await {
        Ok(r) => r,
        Err(e) => return Lookup::Failed { error: e.to_string() },
    };
    let before = intent.evidence.precondition.as_ref();
    match response.status {
        200 => {
            let Some(etag) = header(&response, "etag") else {
                return Lookup::Failed { error: format!("HEAD {bucket}/{key}: no ETag") };
            };
            if etag == quoted_md5(body.as_bytes()) {
                return Lookup::Found { external_id: etag, params_match: true };
            }
            match before {
                // Still the version read before the first send (or no condition to compare
                // with): ours has not landed, and still can.
                Some(Precondition::IfMatch(read)) if *read == etag => Lookup::Absent,
                None => Lookup::Absent,
                Some(_) => Lookup::Superseded {
                    what: format!(
                        "{bucket}/{key} holds version {etag}: neither ours nor the one read before the first send"
                    ),
                },
            }
        }
        404 => match before {
            Some(Precondition::IfMatch(read)) => Lookup::Superseded {
                what: format!("{bucket}/{key} was deleted since version {read} was read"),
            },
            _ => Lookup::Absent,
        },
        _ => Lookup::Failed { error: format!("HEAD {bucket}/{key}: {}", describe_s3(&response)) },
    }
}

/// `http://host/bucket/key`: path-style addressing, the key as it is (it holds only
/// characters that need no escaping; `Action::parse` makes sure).
pub(super) fn object_url(service: &Service, bucket: &str, key: &str) -> String {
    format!("{}/{bucket}/{key}", base(service))
}

fn header(response: &HttpResponse, name: &str) -> Option<String> {
    response.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.trim().to_string())
}

/// One element of S3's XML error body (`Code`, `Message`).
fn s3_field(response: &HttpResponse, name: &str) -> Option<String> {
    let text = String::from_utf8_lossy(&response.body);
    let open = format!("<{name}>");
    let start = text.find(&open)? + open.len();
    let end = text[start..].find(&format!("</{name}>"))? + start;
    Some(text[start..end].to_string())
}

/// `HTTP 412: PreconditionFailed: At least one of ...`, from S3's XML error body.
fn describe_s3(response: &HttpResponse) -> String {
    let field = |name: &str| s3_field(response, name);
    match (field("Code"), field("Message")) {
        (Some(code), Some(message)) => format!("HTTP {}: {code}: {message}", response.status),
        (Some(code), None) => format!("HTTP {}: {code}", response.status),
        _ => format!("HTTP {}: {}", response.status, excerpt(&response.body)),
    }
}
