//! What one incoming MCP message is, read the same way for both transports: a message the
//! SDK can take, or JSON-RPC's error for it, answered before the SDK sees it.
//!
//! The SDK (`rmcp`) drops or misnames what it cannot parse: a request whose `id` is an object
//! parses as nothing and goes unanswered; a `tools/call` whose `arguments` are not an object
//! falls through to its catch-all variant and is answered `-32601` (method not found) as
//! though the method did not exist. JSON-RPC 2.0 and MCP say otherwise: no JSON is `-32700`
//! (Parse error) with a null id; a message that is no request object, or whose `id` is not a
//! string or an integer, is `-32600` (Invalid Request) with a null id, since its id cannot be
//! trusted; a known method with malformed `params` is `-32602` (Invalid params) with the
//! request's id; an unknown one `-32601`, which the SDK says itself.

use rmcp::RoleServer;
#[allow(deprecated)]
use rmcp::model::{
    CallToolRequest, CancelTaskRequest, ClientJsonRpcMessage, ClientRequest, CompleteRequest, ConstString,
    DiscoverRequest, GetPromptRequest, GetSkillRequest, GetTaskRequest, InitializeRequest,
    ListPromptsRequest, ListResourceTemplatesRequest, ListResourcesRequest, ListSkillsRequest,
    ListToolsRequest, PingRequest, ReadResourceDirectoryRequest, ReadResourceRequest, RequestId,
    SetLevelRequest, SubscribeRequest, SubscriptionsListenRequest, UnsubscribeRequest, UpdateTaskRequest,
};
use rmcp::service::RxJsonRpcMessage;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// JSON-RPC's codes for what is refused here.
pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;

/// What one incoming message is.
#[derive(Debug)]
pub enum Read {
    /// A message for the SDK.
    Message(Box<RxJsonRpcMessage<RoleServer>>),
    /// Answer this JSON-RPC error, and go on.
    Refuse(Value),
    /// Nothing to answer: a notification nobody knows (a notification is never answered).
    Skip,
}

/// Reads one message (a stdio line without its newline, or an HTTP body).
pub fn read(bytes: &[u8]) -> Read {
    let value: Value = match serde_json::from_slice(bytes) {
        Ok(value) => value,
        Err(e) => return Read::Refuse(error(Value::Null, PARSE_ERROR, format!("Parse error: {e}"))),
    };
    let Some(object) = value.as_object() else {
        return Read::Refuse(error(
            Value::Null,
            INVALID_REQUEST,
            "Invalid Request: a message is one JSON object (MCP has no batches)".into(),
        ));
    };
    let method = object.get("method").and_then(Value::as_str);
    // A request's id is checked before anything else: an answer must carry it, and one the
    // client could not match would be no answer at all. (A response's id is the SDK's to read.)
    let id = match object.get("id") {
        None => None,
        Some(id) if valid_id(id) => Some(id.clone()),
        Some(id) if method.is_some() => {
            return Read::Refuse(error(
                Value::Null,
                INVALID_REQUEST,
                format!("Invalid Request: an id is a string or an integer, found {id}"),
            ));
        }
        Some(_) => None,
    };
    match serde_json::from_value::<RxJsonRpcMessage<RoleServer>>(value.clone()) {
        Ok(ClientJsonRpcMessage::Request(request)) => match &request.request {
            ClientRequest::CustomRequest(custom) => match params_problem(custom.method.as_str(), &value) {
                Some(problem) => Read::Refuse(error(request.id.into_json_value(), INVALID_PARAMS, problem)),
                None => Read::Message(Box::new(ClientJsonRpcMessage::Request(request))),
            },
            _ => Read::Message(Box::new(ClientJsonRpcMessage::Request(request))),
        },
        Ok(message) => Read::Message(Box::new(message)),
        Err(e) => match (id, method) {
            (None, Some(_)) => Read::Skip,
            (Some(id), Some(method)) if object.get("jsonrpc") == Some(&json!("2.0")) => {
                match params_problem(method, &value) {
                    Some(problem) => Read::Refuse(error(id, INVALID_PARAMS, problem)),
                    None => {
                        Read::Refuse(error(id, METHOD_NOT_FOUND, format!("Method not found: {method} ({e})")))
                    }
                }
            }
            (id, _) => Read::Refuse(error(
                id.unwrap_or(Value::Null),
                INVALID_REQUEST,
                format!("Invalid Request: {e}"),
            )),
        },
    }
}

/// A message past the size bound, refused unread.
pub fn too_long(bytes_max: usize) -> Value {
    error(Value::Null, INVALID_REQUEST, format!("Invalid Request: a message of more than {bytes_max} bytes"))
}

/// A JSON-RPC error response.
pub fn error(id: Value, code: i64, message: String) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// An id MCP takes: a string, or an integer the SDK can hold (JSON Schema's `integer`, so
/// `7.0` is 7); never null, a fraction, a bool, an array or an object.
fn valid_id(id: &Value) -> bool {
    !id.is_null() && serde_json::from_value::<RequestId>(id.clone()).is_ok()
}

/// A typed request's parse of a message: why it fails, if it does.
type Parse = fn(&Value) -> Option<String>;

/// The methods the SDK parses into a typed request (the deprecated ones too: the SDK still
/// parses them), each with the parse of that type: a
/// message for one of them that the SDK took for an unknown method has `params` its type
/// refuses.
#[allow(deprecated)]
const KNOWN: &[(&str, Parse)] = &[
    (rmcp::model::InitializeResultMethod::VALUE, problem::<InitializeRequest>),
    (rmcp::model::PingRequestMethod::VALUE, problem::<PingRequest>),
    (rmcp::model::DiscoverRequestMethod::VALUE, problem::<DiscoverRequest>),
    (rmcp::model::CompleteRequestMethod::VALUE, problem::<CompleteRequest>),
    (rmcp::model::SetLevelRequestMethod::VALUE, problem::<SetLevelRequest>),
    (rmcp::model::GetPromptRequestMethod::VALUE, problem::<GetPromptRequest>),
    (rmcp::model::ListPromptsRequestMethod::VALUE, problem::<ListPromptsRequest>),
    (rmcp::model::ListResourcesRequestMethod::VALUE, problem::<ListResourcesRequest>),
    (rmcp::model::ListResourceTemplatesRequestMethod::VALUE, problem::<ListResourceTemplatesRequest>),
    (rmcp::model::ReadResourceRequestMethod::VALUE, problem::<ReadResourceRequest>),
    (rmcp::model::SubscriptionsListenRequestMethod::VALUE, problem::<SubscriptionsListenRequest>),
    (rmcp::model::SubscribeRequestMethod::VALUE, problem::<SubscribeRequest>),
    (rmcp::model::UnsubscribeRequestMethod::VALUE, problem::<UnsubscribeRequest>),
    (rmcp::model::CallToolRequestMethod::VALUE, problem::<CallToolRequest>),
    (rmcp::model::ListToolsRequestMethod::VALUE, problem::<ListToolsRequest>),
    (rmcp::model::GetTaskMethod::VALUE, problem::<GetTaskRequest>),
    (rmcp::model::UpdateTaskMethod::VALUE, problem::<UpdateTaskRequest>),
    (rmcp::model::CancelTaskMethod::VALUE, problem::<CancelTaskRequest>),
    (rmcp::model::ListSkillsRequestMethod::VALUE, problem::<ListSkillsRequest>),
    (rmcp::model::GetSkillRequestMethod::VALUE, problem::<GetSkillRequest>),
    (rmcp::model::ReadResourceDirectoryRequestMethod::VALUE, problem::<ReadResourceDirectoryRequest>),
];

/// Why `message`'s `params` do not make a `method` request, when `method` is one the SDK
/// knows and they do not.
fn params_problem(method: &str, message: &Value) -> Option<String> {
    let (_, parse) = KNOWN.iter().find(|(known, _)| *known == method)?;
    parse(message).map(|why| format!("Invalid params for {method}: {why}"))
}

/// The parse of a message's `method` and `params` as `T`, when it fails.
fn problem<T: DeserializeOwned>(message: &Value) -> Option<String> {
    let mut request = serde_json::Map::new();
    for field in ["method", "params"] {
        if let Some(value) = message.get(field) {
            request.insert(field.into(), value.clone());
        }
    }
    serde_json::from_value::<T>(Value::Object(request)).err().map(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(text: &str) -> Value {
        match read(text.as_bytes()) {
            Read::Refuse(reply) => reply,
            other => panic!("{text}: {other:?}"),
        }
    }

    /// Each line, the id and code of its refusal.
    #[test]
    fn each_kind_of_bad_message_gets_json_rpcs_error_with_the_id_it_can_trust() {
        let cases: &[(&str, Value, i64)] = &[
            ("{not json", Value::Null, PARSE_ERROR),
            ("", Value::Null, PARSE_ERROR),
            (r#"{"id":7,"method":"tools/list"}"#, json!(7), INVALID_REQUEST),
            ("[1, 2]", Value::Null, INVALID_REQUEST),
            ("42", Value::Null, INVALID_REQUEST),
            (r#"{"jsonrpc":"2.0","id":{"a":1},"method":"tools/list"}"#, Value::Null, INVALID_REQUEST),
            (r#"{"jsonrpc":"2.0","id":[1],"method":"tools/list"}"#, Value::Null, INVALID_REQUEST),
            (r#"{"jsonrpc":"2.0","id":true,"method":"tools/list"}"#, Value::Null, INVALID_REQUEST),
            (r#"{"jsonrpc":"2.0","id":1.5,"method":"tools/list"}"#, Value::Null, INVALID_REQUEST),
            (r#"{"jsonrpc":"2.0","id":null,"method":"tools/list"}"#, Value::Null, INVALID_REQUEST),
            (r#"{"jsonrpc":"2.0","id":{"a":1},"result":{}}"#, Value::Null, INVALID_REQUEST),
            (
                r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"list_refunds","arguments":[1,2]}}"#,
                json!(3),
                INVALID_PARAMS,
            ),
            (
                r#"{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"list_refunds","arguments":"x"}}"#,
                json!("a"),
                INVALID_PARAMS,
            ),
            (r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":[1]}"#, json!(4), INVALID_PARAMS),
            (
                r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":5}}"#,
                json!(5),
                INVALID_PARAMS,
            ),
            (r#"{"jsonrpc":"2.0","id":6,"method":"tools/frob","params":[1]}"#, json!(6), METHOD_NOT_FOUND),
        ];
        for (text, id, code) in cases {
            let reply = refused(text);
            assert_eq!((&reply["id"], &reply["error"]["code"]), (id, &json!(code)), "{text}: {reply}");
            assert_eq!(reply["jsonrpc"], "2.0", "{text}: {reply}");
        }
        let arguments = refused(
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"list_refunds","arguments":[1,2]}}"#,
        );
        let message = arguments["error"]["message"].as_str().unwrap_or_default();
        assert!(message.starts_with("Invalid params for tools/call: "), "{arguments}");
    }

    #[test]
    fn what_the_sdk_can_take_goes_to_it_and_an_unknown_notification_to_nobody() {
        let taken = [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"name":"list_refunds","arguments":{}}}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"list_refunds","arguments":null}}"#,
            r#"{"jsonrpc":"2.0","id":7.0,"method":"tools/list"}"#,
            // A well-formed request for a method nobody knows is the SDK's to answer (-32601).
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/frobnicate"}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/frobnicated"}"#,
        ];
        for text in taken {
            assert!(matches!(read(text.as_bytes()), Read::Message(_)), "{text}");
        }
        assert!(matches!(read(br#"{"method":"notifications/frobnicated"}"#), Read::Skip));
    }
}
