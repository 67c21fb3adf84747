//! The request ids in flight in one MCP session, so that a second request under an id still in
//! flight is refused with an answer rather than lost.
//!
//! The SDK keys each request it is working on by its id: a second one under the same id takes
//! the first one's place, and whichever finishes second finds no place left and its answer is
//! dropped without a word (over HTTP, the first answer even goes down the second request's
//! stream). JSON-RPC asks for unique ids; a client that reuses one while it is in flight gets
//! `-32600` ("id N is already in flight") under that id, and its first request goes on and is
//! answered as usual. An id is in flight from the moment its request is read until its answer
//! is handed to the transport, or its cancellation is read (the SDK answers no cancelled
//! request).
//!
//! stdio claims an id in its reader ([`super::stdio`]); streamable HTTP in its session manager
//! ([`super::sessions`]); both release it through [`Tracked`], the SDK's transport wrapped.

use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use rmcp::RoleServer;
use rmcp::model::{ClientJsonRpcMessage, ClientNotification, ErrorData, RequestId, ServerJsonRpcMessage};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;

/// The ids in flight in one session. Cheap to clone; clones share the set.
#[derive(Debug, Clone, Default)]
pub struct InFlight {
    ids: Arc<Mutex<HashSet<RequestId>>>,
}

impl InFlight {
    /// Claims the id of `incoming` when it is a request; `Err` with the answer to give when a
    /// request under that id is still in flight. A cancellation releases the id it names.
    pub fn claim(&self, incoming: &ClientJsonRpcMessage) -> Result<(), Box<ServerJsonRpcMessage>> {
        match incoming {
            ClientJsonRpcMessage::Request(request) => {
                if self.ids().insert(request.id.clone()) {
                    Ok(())
                } else {
                    Err(Box::new(already_in_flight(&request.id)))
                }
            }
            ClientJsonRpcMessage::Notification(notification) => {
                if let ClientNotification::CancelledNotification(cancelled) = &notification.notification
                    && let Some(id) = &cancelled.params.request_id
                {
                    self.ids().remove(id);
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Releases the id that `outgoing` answers.
    pub fn answered(&self, outgoing: &ServerJsonRpcMessage) {
        let id = match outgoing {
            ServerJsonRpcMessage::Response(response) => Some(&response.id),
            ServerJsonRpcMessage::Error(error) => error.id.as_ref(),
            _ => None,
        };
        if let Some(id) = id {
            self.ids().remove(id);
        }
    }

    /// Releases `id` without an answer from the SDK (the request never reached it).
    pub fn release(&self, id: &RequestId) {
        self.ids().remove(id);
    }

    fn ids(&self) -> std::sync::MutexGuard<'_, HashSet<RequestId>> {
        // The set holds no invariant a panic half-way could break: insert and remove are whole.
        self.ids.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The refusal of a request whose id is in flight, under that id.
fn already_in_flight(id: &RequestId) -> ServerJsonRpcMessage {
    let error = ErrorData::invalid_request(
        format!(
            "Invalid Request: id {id} is already in flight; a request's id must not be reused until it is answered"
        ),
        None,
    );
    ServerJsonRpcMessage::error(error, Some(id.clone()))
}

/// The SDK's transport, releasing each id as its answer goes out.
pub struct Tracked<T> {
    inner: T,
    in_flight: InFlight,
    /// Run when the session's transport goes: its ids are forgotten with it.
    on_drop: Option<Box<dyn FnOnce() + Send>>,
}

impl<T> Tracked<T> {
    pub fn new(inner: T, in_flight: InFlight) -> Tracked<T> {
        Tracked { inner, in_flight, on_drop: None }
    }

    /// Runs `forget` when the transport is dropped (the SDK drops it when the session ends).
    pub fn on_drop(mut self, forget: impl FnOnce() + Send + 'static) -> Tracked<T> {
        self.on_drop = Some(Box::new(forget));
        self
    }
}

impl<T> Drop for Tracked<T> {
    fn drop(&mut self) {
        if let Some(forget) = self.on_drop.take() {
            forget();
        }
    }
}

impl<T: Transport<RoleServer>> Transport<RoleServer> for Tracked<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.in_flight.answered(&item);
        self.inner.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleServer>>> + Send {
        self.inner.receive()
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> ClientJsonRpcMessage {
        serde_json::from_str(text).expect("a client message")
    }

    fn answer(id: i64) -> ServerJsonRpcMessage {
        serde_json::from_value(serde_json::json!({"jsonrpc": "2.0", "id": id, "result": {}}))
            .expect("a response")
    }

    #[test]
    fn an_id_is_in_flight_from_its_request_to_its_answer_or_its_cancellation() {
        let in_flight = InFlight::default();
        let call = parsed(r#"{"jsonrpc":"2.0","id":7,"method":"tools/list"}"#);
        assert!(in_flight.claim(&call).is_ok());
        let again = serde_json::to_value(in_flight.claim(&call).expect_err("7 is in flight")).expect("JSON");
        assert_eq!(
            (&again["id"], &again["error"]["code"]),
            (&serde_json::json!(7), &serde_json::json!(-32600))
        );
        assert!(again["error"]["message"].as_str().is_some_and(|m| m.contains("id 7 is already in flight")));
        // Another id, and the same number as a string, are other ids.
        assert!(in_flight.claim(&parsed(r#"{"jsonrpc":"2.0","id":"7","method":"tools/list"}"#)).is_ok());
        in_flight.answered(&answer(7));
        assert!(in_flight.claim(&call).is_ok(), "answered, 7 may be used again");
        let cancel = parsed(
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"reason":"gone"}}"#,
        );
        assert!(in_flight.claim(&cancel).is_ok());
        assert!(in_flight.claim(&call).is_ok(), "cancelled, 7 may be used again");
        in_flight.release(&RequestId::Number(7));
        assert!(in_flight.claim(&call).is_ok());
    }
}
