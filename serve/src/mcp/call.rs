//! One tool call, made against the fakes over loopback HTTP as the service's own client
//! library would make it, and its answer put as a real MCP server puts it: a success's body
//! as structured content, a refusal with the service's own code and message, and a request
//! that got no answer as the transport error a client library raises (`isError`), in words
//! that say what the caller saw and nothing of what the service did.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use super::tools::Tool;
use crate::client::{self, Answer, ClientError};
use vocabulary::protocol::{CHAIN_PRIVATE_KEY, MESSAGES_API_KEY, PAYMENTS_API_KEY};

/// Who sends `send_message`'s emails.
pub const SENDER: &str = "twice agent <agent@twice.invalid>";

/// Gas a plain transfer takes.
const TRANSFER_GAS: u64 = 21_000;

/// What a tool call came to.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The call failed: the tool's result is an error the agent sees (`isError`).
    pub error: bool,
    /// The result's text: the answer's JSON, or the error's words.
    pub text: String,
    /// The answer, for a success.
    pub structured: Option<Value>,
}

impl Outcome {
    fn ok(value: Value) -> Outcome {
        Outcome { error: false, text: value.to_string(), structured: Some(value) }
    }

    fn failed(text: String) -> Outcome {
        Outcome { error: true, text, structured: None }
    }
}

/// What a call needs besides its arguments.
pub struct Target<'a> {
    /// Base URL per service.
    pub urls: &'a BTreeMap<String, String>,
    /// Each HTTP exchange's bound.
    pub timeout_ms: u64,
}

/// Calls `tool` with `args` (already checked against its schema).
pub async fn call(tool: &Tool, args: &Map<String, Value>, target: &Target<'_>) -> Outcome {
    let Some(base) = target.urls.get(tool.service) else {
        return Outcome::failed(format!("the {} API is not available here", tool.service));
    };
    let call = Call { tool, args, base, timeout_ms: target.timeout_ms };
    match tool.name {
        "refund_payment" => call.refund_payment().await,
        "list_refunds" => call.list_refunds().await,
        "create_workspace" => call.create_workspace().await,
        "find_workspace" => call.find_workspace().await,
        "put_file" => call.put_file().await,
        "get_file" => call.get_file().await,
        "transfer" => call.transfer().await,
        "get_transaction_receipt" => call.get_transaction_receipt().await,
        "get_account" => call.get_account().await,
        "send_message" => call.send_message().await,
        "list_mailbox" => call.list_mailbox().await,
        other => Outcome::failed(format!("tool {other} has no call")),
    }
}

/// One tool call in the making: the tool, its arguments and where its service answers. Each
/// tool is one method, written as that service's own client library would send it.
struct Call<'a> {
    tool: &'a Tool,
    args: &'a Map<String, Value>,
    base: &'a str,
    timeout_ms: u64,
}

impl Call<'_> {
    /// A string argument, empty when absent.
    fn text(&self, name: &str) -> String {
        self.args.get(name).and_then(Value::as_str).unwrap_or_default().to_string()
    }

    fn number(&self, name: &str) -> Option<u64> {
        self.args.get(name).and_then(Value::as_u64)
    }

    /// `headers` with the call's `idempotency_key`, when it has one.
    fn keyed(&self, mut headers: Vec<(String, String)>) -> Vec<(String, String)> {
        if let Some(key) = self.args.get("idempotency_key").and_then(Value::as_str) {
            headers.push(("idempotency-key".into(), key.to_string()));
        }
        headers
    }

    /// One HTTP exchange with the tool's service, within the call's bound.
    async fn exchange(
        &self,
        method: &'static str,
        path: String,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    ) -> Result<Answer, ClientError> {
        let url = format!("{}{path}", self.base);
        client::exchange(client::Request { method, url, headers, body, timeout_ms: self.timeout_ms }).await
    }

    async fn refund_payment(&self) -> Outcome {
        let mut pairs = vec![
            ("payment_intent".to_string(), self.text("payment_intent")),
            ("amount".into(), self.number("amount").unwrap_or(0).to_string()),
        ];
        // Stripe's bracketed form: `metadata[KEY]=VALUE`, as stripe-python sends `metadata=`.
        pairs.extend(strings(self.args, "metadata").map(|(k, v)| (format!("metadata[{k}]"), v)));
        let body = form(&pairs);
        let headers = self.keyed(vec![bearer(PAYMENTS_API_KEY), form_type()]);
        json_answer(self.tool, self.exchange("POST", "/v1/refunds".into(), headers, body).await)
    }

    async fn list_refunds(&self) -> Outcome {
        let query = form(&[
            ("payment_intent", self.text("payment_intent")),
            ("limit", self.number("limit").unwrap_or(10).to_string()),
        ]);
        let path = format!("/v1/refunds?{}", String::from_utf8_lossy(&query));
        json_answer(self.tool, self.exchange("GET", path, vec![bearer(PAYMENTS_API_KEY)], vec![]).await)
    }

    async fn create_workspace(&self) -> Outcome {
        let mut body = json!({"external_id": self.text("external_id"), "name": self.text("name")});
        if let Some(metadata) = self.args.get("metadata").filter(|m| m.is_object()) {
            body["metadata"] = metadata.clone();
        }
        let body = body.to_string().into_bytes();
        let headers = self.keyed(vec![json_type()]);
        json_answer(self.tool, self.exchange("POST", "/v1/workspaces".into(), headers, body).await)
    }

    async fn find_workspace(&self) -> Outcome {
        let external_id = self.text("external_id");
        let query = form(&[("external_id", external_id.clone())]);
        let path = format!("/v1/workspaces?{}", String::from_utf8_lossy(&query));
        let listed = json_answer(self.tool, self.exchange("GET", path, vec![], vec![]).await);
        found_in_list(listed, |w| w["external_id"] == external_id.as_str(), "workspace")
    }

    async fn put_file(&self) -> Outcome {
        let mut headers = vec![("content-type".to_string(), "text/plain".to_string())];
        if let Some(tag) = self.args.get("if_none_match").and_then(Value::as_str) {
            headers.push(("if-none-match".into(), tag.to_string()));
        }
        if let Some(tag) = self.args.get("if_match").and_then(Value::as_str) {
            headers.push(("if-match".into(), tag.to_string()));
        }
        // S3's user metadata, as boto3 sends `Metadata=`: one header per pair.
        headers.extend(
            strings(self.args, "metadata")
                .map(|(k, v)| (format!("x-amz-meta-{}", k.to_ascii_lowercase()), v)),
        );
        let path = format!("/{}/{}", self.text("bucket"), self.text("key"));
        match self.exchange("PUT", path, headers, self.text("body").into_bytes()).await {
            Ok(answer) if (200..300).contains(&answer.status) => Outcome::ok(json!({
                "bucket": self.text("bucket"),
                "key": self.text("key"),
                "etag": answer.header("etag"),
                "version_id": answer.header("x-amz-version-id"),
            })),
            other => failure(self.tool, other),
        }
    }

    async fn get_file(&self) -> Outcome {
        let path = format!("/{}/{}", self.text("bucket"), self.text("key"));
        match self.exchange("GET", path, vec![], vec![]).await {
            Ok(answer) if (200..300).contains(&answer.status) => Outcome::ok(json!({
                "found": true,
                "body": String::from_utf8_lossy(&answer.body),
                "etag": answer.header("etag"),
                "metadata": user_metadata(&answer),
            })),
            Ok(answer)
                if answer.status == 404
                    && xml_field(&answer.body, "Code").as_deref() == Some("NoSuchKey") =>
            {
                Outcome::ok(json!({"found": false}))
            }
            other => failure(self.tool, other),
        }
    }

    async fn get_transaction_receipt(&self) -> Outcome {
        match self.rpc("eth_getTransactionReceipt", json!([self.text("hash")])).await {
            Ok(Value::Null) => Outcome::ok(json!({"found": false})),
            Ok(receipt) => Outcome::ok(json!({"found": true, "receipt": receipt})),
            Err(failed) => failed,
        }
    }

    async fn get_account(&self) -> Outcome {
        let from = runner::setup::chain_account();
        let nonce = match self.rpc("eth_getTransactionCount", json!([from, "pending"])).await {
            Ok(nonce) => nonce,
            Err(failed) => return failed,
        };
        match self.rpc("eth_getBalance", json!([from, "latest"])).await {
            Ok(balance) => Outcome::ok(json!({
                "address": from,
                "nonce": quantity(&nonce),
                "balance_wei": quantity(&balance).map(|b| b.to_string()),
            })),
            Err(failed) => failed,
        }
    }

    async fn send_message(&self) -> Outcome {
        let mut body = json!({
            "from": SENDER,
            "to": [self.text("to")],
            "subject": self.text("subject"),
            "text": self.text("body"),
        });
        for mark in ["headers", "tags"] {
            if let Some(value) = self.args.get(mark).filter(|v| !v.is_null()) {
                body[mark] = value.clone();
            }
        }
        let headers = self.keyed(vec![bearer(MESSAGES_API_KEY), json_type()]);
        json_answer(
            self.tool,
            self.exchange("POST", "/emails".into(), headers, body.to_string().into_bytes()).await,
        )
    }

    async fn list_mailbox(&self) -> Outcome {
        let path = format!(
            "/mailboxes/{}/messages?limit={}",
            self.text("address"),
            self.number("limit").unwrap_or(100)
        );
        json_answer(self.tool, self.exchange("GET", path, vec![], vec![]).await)
    }

    /// `transfer`: the chain id and the next nonce (unless given) read as a wallet reads them,
    /// the transfer signed with the scenario's account key, and one broadcast.
    async fn transfer(&self) -> Outcome {
        let to = self.text("to");
        let Some(value_wei) =
            self.args.get("value").and_then(Value::as_str).and_then(|v| v.parse::<u128>().ok())
        else {
            return Outcome::failed("value must be a decimal string of wei".into());
        };
        let from = runner::setup::chain_account();
        let chain_id = match self.rpc("eth_chainId", json!([])).await.map(|v| quantity(&v)) {
            Ok(Some(id)) => id as u64,
            Ok(None) => return Outcome::failed("eth_chainId answered no quantity".into()),
            Err(failed) => return failed,
        };
        let nonce = match self.number("nonce") {
            Some(nonce) => nonce,
            None => match self
                .rpc("eth_getTransactionCount", json!([from, "pending"]))
                .await
                .map(|v| quantity(&v))
            {
                Ok(Some(n)) => n as u64,
                Ok(None) => return Outcome::failed("eth_getTransactionCount answered no quantity".into()),
                Err(failed) => return failed,
            },
        };
        let priority_fee = fake_services::chain::PRIORITY_FEE_WEI;
        let max_fee = 2 * u128::from(fake_services::chain::BASE_FEE_WEI) + priority_fee;
        let signed = fake_services::chain::sign_transfer(
            CHAIN_PRIVATE_KEY,
            chain_id,
            nonce,
            &to,
            value_wei,
            max_fee,
            priority_fee,
            TRANSFER_GAS,
        );
        let (raw, hash) = match signed {
            Ok(signed) => signed,
            Err(e) => return Outcome::failed(format!("cannot sign the transfer: {e}")),
        };
        let raw_hex = format!("0x{}", raw.iter().map(|b| format!("{b:02x}")).collect::<String>());
        match self.rpc("eth_sendRawTransaction", json!([raw_hex])).await {
            Ok(sent) => {
                Outcome::ok(json!({"hash": sent.as_str().unwrap_or(&hash), "from": from, "nonce": nonce}))
            }
            Err(failed) => failed,
        }
    }

    /// One JSON-RPC call: its `result`, or the tool's error (the node's `error`, or the
    /// exchange's).
    async fn rpc(&self, method: &str, params: Value) -> Result<Value, Outcome> {
        let body =
            json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string().into_bytes();
        match self.exchange("POST", "/".into(), vec![json_type()], body).await {
            Ok(answer) if answer.status == 200 => {
                let value: Value = serde_json::from_slice(&answer.body)
                    .map_err(|_| Outcome::failed(format!("{method}: the node answered no JSON")))?;
                if let Some(error) = value.get("error") {
                    let code = error["code"].as_i64().unwrap_or(0);
                    let message = error["message"].as_str().unwrap_or("no message");
                    return Err(Outcome::failed(format!(
                        "{method} failed: {message} (JSON-RPC error {code})"
                    )));
                }
                Ok(value.get("result").cloned().unwrap_or(Value::Null))
            }
            other => Err(failure(self.tool, other)),
        }
    }
}

/// A JSON success as the tool's result; anything else as its error.
fn json_answer(tool: &Tool, answer: Result<Answer, ClientError>) -> Outcome {
    match answer {
        Ok(answer) if (200..300).contains(&answer.status) => {
            match serde_json::from_slice::<Value>(&answer.body) {
                Ok(value) => Outcome::ok(value),
                Err(_) => Outcome::failed(format!(
                    "the {} API answered {} with no JSON",
                    tool.service, answer.status
                )),
            }
        }
        other => failure(tool, other),
    }
}

/// The first item of a list answer that `is_it` picks, as `{found, <noun>}`.
fn found_in_list(listed: Outcome, is_it: impl Fn(&Value) -> bool, noun: &str) -> Outcome {
    if listed.error {
        return listed;
    }
    let items = listed.structured.as_ref().and_then(|v| v["data"].as_array()).cloned().unwrap_or_default();
    match items.into_iter().find(|item| is_it(item)) {
        Some(item) => Outcome::ok(json!({"found": true, noun: item})),
        None => Outcome::ok(json!({"found": false})),
    }
}

/// A failed exchange or a refusal, in the words the service's client library would use.
fn failure(tool: &Tool, answer: Result<Answer, ClientError>) -> Outcome {
    let api = format!("the {} API", tool.service);
    match answer {
        Err(ClientError::NotSent(why)) => Outcome::failed(format!("Could not connect to {api}: {why}")),
        Err(ClientError::Closed(why)) => {
            Outcome::failed(format!("An error occurred with the connection to {api}: {why}."))
        }
        Err(ClientError::TimedOut(ms)) => {
            Outcome::failed(format!("Request to {api} timed out after {ms} ms."))
        }
        Ok(answer) => Outcome::failed(refusal(tool.service, &answer)),
    }
}

/// A non-2xx answer in the service's own terms: its code and message, and when to retry.
fn refusal(service: &str, answer: &Answer) -> String {
    let json: Option<Value> = serde_json::from_slice(&answer.body).ok();
    let (code, message) = match (service, &json) {
        ("files", _) => (xml_field(&answer.body, "Code"), xml_field(&answer.body, "Message")),
        (_, Some(value)) if value.get("error").is_some_and(Value::is_object) => (
            value["error"]["code"].as_str().or(value["error"]["type"].as_str()).map(str::to_string),
            value["error"]["message"].as_str().map(str::to_string),
        ),
        (_, Some(value)) => (
            value["name"].as_str().map(str::to_string),
            value["message"].as_str().or(value["error"].as_str()).map(str::to_string),
        ),
        (_, None) => (None, None),
    };
    let mut text = format!("The {service} API refused the request: HTTP {}", answer.status);
    if let Some(code) = code {
        text.push_str(&format!(" ({code})"));
    }
    match message {
        Some(message) => text.push_str(&format!(": {message}")),
        None => text.push_str(&format!(
            ": {}",
            String::from_utf8_lossy(&answer.body).chars().take(200).collect::<String>()
        )),
    }
    if let Some(after) = answer.header("retry-after") {
        text.push_str(&format!(" Retry after {after} s."));
    }
    text
}

/// The text of the first `<name>` element of an S3 XML body.
fn xml_field(body: &[u8], name: &str) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?;
    let start = text.find(&format!("<{name}>"))? + name.len() + 2;
    let end = text[start..].find(&format!("</{name}>"))? + start;
    Some(text[start..end].to_string())
}

/// A JSON-RPC quantity (`"0x7a69"`).
fn quantity(value: &Value) -> Option<u128> {
    u128::from_str_radix(value.as_str()?.strip_prefix("0x")?, 16).ok()
}

/// An object argument's string pairs, in the object's order (none when it is absent).
fn strings<'a>(args: &'a Map<String, Value>, name: &str) -> impl Iterator<Item = (String, String)> + 'a {
    args.get(name)
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
}

/// An object's user metadata as S3 answers it: each `x-amz-meta-NAME` header as `NAME`.
fn user_metadata(answer: &Answer) -> Value {
    let metadata: Map<String, Value> = answer
        .headers
        .iter()
        .filter_map(|(name, value)| {
            name.strip_prefix("x-amz-meta-").map(|n| (n.to_string(), Value::from(value.as_str())))
        })
        .collect();
    Value::Object(metadata)
}

/// A form body or query string of `pairs`, in order.
fn form<N: AsRef<str>>(pairs: &[(N, String)]) -> Vec<u8> {
    let mut out = form_urlencoded::Serializer::new(String::new());
    for (name, value) in pairs {
        out.append_pair(name.as_ref(), value);
    }
    out.finish().into_bytes()
}

fn bearer(key: &str) -> (String, String) {
    ("authorization".into(), format!("Bearer {key}"))
}

fn form_type() -> (String, String) {
    ("content-type".into(), "application/x-www-form-urlencoded".into())
}

fn json_type() -> (String, String) {
    ("content-type".into(), "application/json".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, headers: &[(&str, &str)], body: &str) -> Answer {
        Answer {
            status,
            headers: headers.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect(),
            body: bytes::Bytes::from(body.to_string()),
        }
    }

    #[test]
    fn refusals_are_said_in_each_services_own_terms() {
        let stripe = answer(
            429,
            &[("retry-after", "2")],
            r#"{"error":{"type":"invalid_request_error","code":"rate_limit","message":"Too many requests."}}"#,
        );
        assert_eq!(
            refusal("payments", &stripe),
            "The payments API refused the request: HTTP 429 (rate_limit): Too many requests. Retry after 2 s."
        );
        let s3 = answer(
            412,
            &[],
            "<Error><Code>PreconditionFailed</Code><Message>At least one of the pre-conditions you specified did not hold</Message></Error>",
        );
        assert!(
            refusal("files", &s3)
                .starts_with("The files API refused the request: HTTP 412 (PreconditionFailed): At least")
        );
        let resend = answer(
            409,
            &[],
            r#"{"statusCode":409,"name":"invalid_idempotent_request","message":"Same key, other body."}"#,
        );
        assert_eq!(
            refusal("messages", &resend),
            "The messages API refused the request: HTTP 409 (invalid_idempotent_request): Same key, other body."
        );
    }

    #[test]
    fn a_lost_reply_and_a_timeout_read_as_a_client_library_says_them() {
        let tool = super::super::tools::find("refund_payment").expect("the tool");
        let closed = failure(
            tool,
            Err(ClientError::Closed("the connection was closed before a response was received".into())),
        );
        assert!(closed.error);
        assert_eq!(
            closed.text,
            "An error occurred with the connection to the payments API: the connection was closed before a response was received."
        );
        assert_eq!(
            failure(tool, Err(ClientError::TimedOut(1_000))).text,
            "Request to the payments API timed out after 1000 ms."
        );
        assert_eq!(quantity(&json!("0x7a69")), Some(31_337));
    }
}
