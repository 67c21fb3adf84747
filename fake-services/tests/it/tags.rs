//! The caller's own marks on a write (Stripe's `metadata`, S3's `x-amz-meta-*`, Resend's
//! `headers` and `tags`): each write fake takes them as its real API does, shows them on its
//! reads, and keeps them in its effect's `params` (`metadata`; `headers` and `tags`), where a
//! careful caller's read-back key and the checker both find them.

use fake_services::{Disposition, Fake, FakeRequest, Fakes};
use serde_json::{Value, json};
use vocabulary::Effect;

use crate::client::manual_fakes;

async fn answer(fake: &Fake, req: FakeRequest) -> (u16, Value) {
    match fake.handle(req).await {
        Disposition::Respond(r) => (r.status, r.body_json().unwrap_or(Value::Null)),
        other => panic!("no answer: {other:?}"),
    }
}

fn only_effect(fake: &Fake, kind: &str) -> Effect {
    let ledger = fake.ledger();
    let matching: Vec<&Effect> = ledger.iter().filter(|e| e.kind == kind).collect();
    assert_eq!(matching.len(), 1, "one {kind}: {ledger:#?}");
    matching[0].clone()
}

fn fake(fakes: &Fakes, service: &str) -> Fake {
    fakes.get(service).expect("a known service")
}

#[tokio::test]
async fn a_refunds_metadata_is_echoed_listed_and_kept_in_its_effect() {
    let (fakes, _clock) = manual_fakes(3);
    let payments = fake(&fakes, "payments");
    let refund = FakeRequest::new("POST", "/v1/refunds")
        .header("Authorization", "Bearer sk_test_x")
        .body("payment_intent=pi_1&amount=100&metadata[twice_intent]=r1&metadata[order]=A%2042");
    let (status, created) = answer(&payments, refund).await;
    assert_eq!(status, 200, "{created}");
    let tagged = json!({"twice_intent": "r1", "order": "A 42"});
    assert_eq!(created["metadata"], tagged, "{created}");
    let list = FakeRequest::new("GET", "/v1/refunds?payment_intent=pi_1")
        .header("Authorization", "Bearer sk_test_x");
    let (_, listed) = answer(&payments, list).await;
    assert_eq!(listed["data"][0]["metadata"], tagged, "{listed}");
    assert_eq!(only_effect(&payments, "refund.created").params["metadata"], tagged);
    // Untagged, the effect still says so: `{}`, as the refund does.
    let plain = FakeRequest::new("POST", "/v1/refunds")
        .header("Authorization", "Bearer sk_test_x")
        .body("payment_intent=pi_1&amount=100");
    let (_, created) = answer(&payments, plain).await;
    assert_eq!(created["metadata"], json!({}));
    let ledger = payments.ledger();
    assert_eq!(ledger.last().map(|e| e.params["metadata"].clone()), Some(json!({})));
}

fn workspace(body: Value) -> FakeRequest {
    FakeRequest::new("POST", "/v1/workspaces")
        .header("Content-Type", "application/json")
        .body(body.to_string())
}

#[tokio::test]
async fn a_workspaces_metadata_is_echoed_on_every_read_and_kept_in_its_effect() {
    let (fakes, _clock) = manual_fakes(3);
    let workspaces = fake(&fakes, "workspaces");
    let tagged = json!({"twice_intent": "ws-1", "plan": "team"});
    let (status, created) =
        answer(&workspaces, workspace(json!({"external_id": "org-1", "name": "Org 1", "metadata": tagged})))
            .await;
    assert_eq!(status, 200, "{created}");
    assert_eq!(created["metadata"], tagged, "{created}");
    let id = created["id"].as_str().expect("an id").to_string();
    let (_, retrieved) = answer(&workspaces, FakeRequest::new("GET", &format!("/v1/workspaces/{id}"))).await;
    assert_eq!(retrieved["metadata"], tagged, "{retrieved}");
    let (_, listed) = answer(&workspaces, FakeRequest::new("GET", "/v1/workspaces?external_id=org-1")).await;
    assert_eq!(listed["data"][0]["metadata"], tagged, "{listed}");
    let effect = only_effect(&workspaces, "workspace.created");
    assert_eq!(effect.params, json!({"external_id": "org-1", "name": "Org 1", "metadata": tagged}));

    // None given (or null): `{}` on the workspace and in the effect, never absent.
    for (n, body) in [
        json!({"external_id": "org-2", "name": "Org 2"}),
        json!({"external_id": "org-3", "name": "Org 3", "metadata": null}),
    ]
    .into_iter()
    .enumerate()
    {
        let (status, created) = answer(&workspaces, workspace(body)).await;
        assert_eq!((status, &created["metadata"]), (200, &json!({})), "{created}");
        assert_eq!(workspaces.ledger()[n + 1].params["metadata"], json!({}));
    }
    // The same key with other metadata is another request.
    let keyed = |metadata: Value| {
        workspace(json!({"external_id": "org-4", "name": "Org 4", "metadata": metadata}))
            .header("Idempotency-Key", "k-4")
    };
    assert_eq!(answer(&workspaces, keyed(json!({"a": "1"}))).await.0, 200);
    let (status, refused) = answer(&workspaces, keyed(json!({"a": "2"}))).await;
    assert_eq!(status, 400, "{refused}");
}

fn put(key: &str, body: &str) -> FakeRequest {
    FakeRequest::new("PUT", &format!("/reports/{key}"))
        .header("Content-Length", &body.len().to_string())
        .body(body.to_string())
}

#[tokio::test]
async fn an_objects_user_metadata_is_kept_in_its_effect_by_name_without_its_prefix() {
    let (fakes, _clock) = manual_fakes(3);
    fakes.files.seed_bucket("reports").expect("a bucket");
    let files = fake(&fakes, "files");
    let tagged =
        put("q3.csv", "a,b").header("x-amz-meta-twice-intent", "f1").header("X-Amz-Meta-Owner", "Ops");
    assert_eq!(answer(&files, tagged).await.0, 200);
    let effect = only_effect(&files, "object.put");
    assert_eq!(
        effect.params["metadata"],
        json!({"twice-intent": "f1", "owner": "Ops"}),
        "{:?}",
        effect.params
    );
    // As S3 echoes it on a read.
    let Disposition::Respond(head) = files.handle(FakeRequest::new("HEAD", "/reports/q3.csv")).await else {
        panic!("no answer to HEAD")
    };
    assert_eq!(head.header("x-amz-meta-twice-intent"), Some("f1"));
    // No user metadata: `{}`.
    assert_eq!(answer(&files, put("plain.csv", "c")).await.0, 200);
    assert_eq!(files.ledger()[1].params["metadata"], json!({}));

    // A multipart upload's metadata is its Create's, and lands with the Complete's effect.
    let create = FakeRequest::new("POST", "/reports/big.csv?uploads").header("x-amz-meta-twice-intent", "f2");
    let Disposition::Respond(created) = files.handle(create).await else { panic!("no answer to the Create") };
    let xml = String::from_utf8_lossy(&created.body).to_string();
    let upload = xml
        .split("<UploadId>")
        .nth(1)
        .and_then(|rest| rest.split("</UploadId>").next())
        .expect("an UploadId");
    let part = FakeRequest::new("PUT", &format!("/reports/big.csv?partNumber=1&uploadId={upload}"))
        .header("Content-Length", "4")
        .body("part");
    let Disposition::Respond(uploaded) = files.handle(part).await else { panic!("no answer to the part") };
    let etag = uploaded.header("etag").expect("the part's ETag").to_string();
    let complete = FakeRequest::new("POST", &format!("/reports/big.csv?uploadId={upload}")).body(format!(
        "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>{etag}</ETag></Part></CompleteMultipartUpload>"
    ));
    let Disposition::Respond(completed) = files.handle(complete).await else {
        panic!("no answer to the Complete")
    };
    assert_eq!(completed.status, 200, "{}", String::from_utf8_lossy(&completed.body));
    let ledger = files.ledger();
    assert_eq!(
        ledger.last().map(|e| e.params["metadata"].clone()),
        Some(json!({"twice-intent": "f2"})),
        "{ledger:#?}"
    );
}

fn email(extra: Value) -> FakeRequest {
    let mut body = json!({"from": "Acme <billing@acme.example>", "to": "ada@example.com", "subject": "Invoice", "text": "Yours."});
    if let (Some(body), Value::Object(extra)) = (body.as_object_mut(), extra) {
        body.extend(extra);
    }
    FakeRequest::new("POST", "/emails")
        .header("Authorization", "Bearer re_test_x")
        .header("Content-Type", "application/json")
        .body(body.to_string())
}

#[tokio::test]
async fn an_emails_headers_and_tags_reach_the_inbox_the_email_and_every_delivery_effect() {
    let (fakes, _clock) = manual_fakes(3);
    let messages = fake(&fakes, "messages");
    let headers = json!({"X-Twice-Intent": "m1"});
    let tags = json!([{"name": "intent", "value": "m1"}, {"name": "kind", "value": "invoice"}]);
    let (status, sent) =
        answer(&messages, email(json!({"headers": headers, "tags": tags, "cc": "grace@example.com"}))).await;
    assert_eq!(status, 200, "{sent}");
    let id = sent["id"].as_str().expect("an id").to_string();
    let ledger = messages.ledger();
    assert_eq!(ledger.len(), 2, "one delivery per recipient: {ledger:#?}");
    for effect in &ledger {
        assert_eq!(
            (&effect.params["headers"], &effect.params["tags"]),
            (&headers, &tags),
            "{:?}",
            effect.params
        );
    }
    let get = FakeRequest::new("GET", &format!("/emails/{id}")).header("Authorization", "Bearer re_test_x");
    let (_, stored) = answer(&messages, get).await;
    assert_eq!(stored["tags"], tags, "Resend shows an email's tags: {stored}");
    let (_, inbox) = answer(&messages, FakeRequest::new("GET", "/mailboxes/ada@example.com/messages")).await;
    assert_eq!((&inbox["data"][0]["headers"], &inbox["data"][0]["tags"]), (&headers, &tags), "{inbox}");

    // Neither given: neither in the effect, none on the email, empty in the inbox.
    let (_, plain) = answer(&messages, email(json!({"to": "alan@example.com"}))).await;
    let effect = messages.ledger().last().cloned().expect("a delivery");
    assert!(
        effect.params.get("headers").is_none() && effect.params.get("tags").is_none(),
        "{:?}",
        effect.params
    );
    let get = FakeRequest::new("GET", &format!("/emails/{}", plain["id"].as_str().unwrap_or_default()))
        .header("Authorization", "Bearer re_test_x");
    assert!(answer(&messages, get).await.1.get("tags").is_none());
    let (_, inbox) = answer(&messages, FakeRequest::new("GET", "/mailboxes/alan@example.com/messages")).await;
    assert_eq!(
        (&inbox["data"][0]["headers"], &inbox["data"][0]["tags"]),
        (&json!({}), &json!([])),
        "{inbox}"
    );
}
