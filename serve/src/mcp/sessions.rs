//! The streamable HTTP sessions: the SDK's own session manager, with the ids in flight in each
//! session ([`super::inflight`]) kept beside it.
//!
//! A request reaches a session's worker through `create_stream`, which registers the request's
//! id for the stream that will carry its answer; a second request under an id still in flight
//! would take that registration over. So the id is claimed here, before the SDK sees the
//! request, and a request whose id is taken gets its refusal on a stream of its own (HTTP 200,
//! one event, as any answer to a request in a session comes), while the first request goes
//! on. The session's transport releases each id as its answer goes out. A stateless request
//! (no session) is served by a service of its own, so its id cannot meet another's.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use futures_util::stream::{Stream, StreamExt};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::WorkerTransport;
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError, LocalSessionWorker,
};
use rmcp::transport::streamable_http_server::session::{EventStore, ServerSseMessage};
use rmcp::transport::streamable_http_server::{RestoreOutcome, SessionId, SessionManager};

use super::inflight::{InFlight, Tracked};

/// The SDK's local session manager, and the ids in flight per session.
#[derive(Default)]
pub struct Sessions {
    inner: LocalSessionManager,
    in_flight: Arc<Mutex<HashMap<SessionId, InFlight>>>,
}

impl Sessions {
    /// The session's ids in flight (made on first use: a session restored by the SDK has one
    /// too).
    fn of(&self, id: &SessionId) -> InFlight {
        let mut sessions = self.in_flight.lock().unwrap_or_else(PoisonError::into_inner);
        sessions.entry(id.clone()).or_default().clone()
    }

    /// The session's transport, releasing its ids as answers go out, and forgetting them when
    /// the session ends.
    fn tracked(
        &self,
        id: &SessionId,
        transport: WorkerTransport<LocalSessionWorker>,
    ) -> Tracked<WorkerTransport<LocalSessionWorker>> {
        let sessions = Arc::clone(&self.in_flight);
        let session = id.clone();
        Tracked::new(transport, self.of(id)).on_drop(move || {
            sessions.lock().unwrap_or_else(PoisonError::into_inner).remove(&session);
        })
    }
}

impl SessionManager for Sessions {
    type Error = LocalSessionManagerError;
    type Transport = Tracked<WorkerTransport<LocalSessionWorker>>;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let (id, transport) = self.inner.create_session().await?;
        let tracked = self.tracked(&id, transport);
        Ok((id, tracked))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        self.inner.initialize_session(id, message).await
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        self.inner.has_session(id).await
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        self.in_flight.lock().unwrap_or_else(PoisonError::into_inner).remove(id);
        self.inner.close_session(id).await
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let in_flight = self.of(id);
        if let Err(refusal) = in_flight.claim(&message) {
            return Ok(futures_util::stream::once(async move { ServerSseMessage::from_message(*refusal) })
                .left_stream());
        }
        match self.inner.create_stream(id, message.clone()).await {
            Ok(stream) => Ok(stream.right_stream()),
            Err(e) => {
                // The request never reached the session: its id is free again.
                if let ClientJsonRpcMessage::Request(request) = &message {
                    in_flight.release(&request.id);
                }
                Err(e)
            }
        }
    }

    async fn accept_message(&self, id: &SessionId, message: ClientJsonRpcMessage) -> Result<(), Self::Error> {
        // A cancellation frees the id it names: the SDK answers no cancelled request.
        let _ = self.of(id).claim(&message);
        self.inner.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.inner.create_standalone_stream(id).await
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        self.inner.resume(id, last_event_id).await
    }

    async fn restore_session(&self, id: SessionId) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        Ok(match self.inner.restore_session(id.clone()).await? {
            RestoreOutcome::Restored(transport) => RestoreOutcome::Restored(self.tracked(&id, transport)),
            RestoreOutcome::AlreadyPresent => RestoreOutcome::AlreadyPresent,
            _ => RestoreOutcome::NotSupported,
        })
    }

    fn event_store(&self) -> Option<Arc<dyn EventStore>> {
        self.inner.event_store()
    }
}
