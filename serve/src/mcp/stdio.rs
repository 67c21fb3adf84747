//! MCP over stdio, framed here: one JSON-RPC message per line each way.
//!
//! The SDK's own stdio transport drops a line that is too long or no JSON without a word;
//! JSON-RPC says such a message gets an error with a null id (`-32600` Invalid Request,
//! `-32700` Parse error). So a reader task reads bounded lines, answers those itself (and
//! every other message [`super::message`] refuses, and a request whose id is still in flight,
//! [`super::inflight`]), and hands every well-formed message to the SDK through a channel
//! (which makes `receive` safe to cancel, as the SDK's loop does); one writer task owns
//! stdout, so replies from both never interleave.

use std::future::Future;

use rmcp::RoleServer;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use super::MESSAGE_BYTES_MAX;
use super::inflight::{InFlight, Tracked};
use super::message::{self, Read};

/// Messages read ahead of the SDK before the reader waits.
const AHEAD_MAX: usize = 64;

/// The transport the SDK runs on; made by [`spawn`].
pub struct Lines {
    incoming: mpsc::Receiver<RxJsonRpcMessage<RoleServer>>,
    outgoing: mpsc::UnboundedSender<String>,
}

/// Starts the reader on `input` and the writer on `output`; returns the transport and the
/// writer's task, which ends once every line given to it is written (await it before exit).
pub fn spawn<R, W>(input: R, output: W) -> (Tracked<Lines>, tokio::task::JoinHandle<()>)
where
    R: AsyncBufRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (lines_tx, lines_rx) = mpsc::unbounded_channel::<String>();
    let (messages_tx, messages_rx) = mpsc::channel(AHEAD_MAX);
    let in_flight = InFlight::default();
    let writer = tokio::spawn(write_lines(output, lines_rx));
    tokio::spawn(read_messages(input, messages_tx, lines_tx.clone(), in_flight.clone()));
    (Tracked::new(Lines { incoming: messages_rx, outgoing: lines_tx }, in_flight), writer)
}

async fn write_lines<W: AsyncWrite + Unpin>(mut output: W, mut lines: mpsc::UnboundedReceiver<String>) {
    while let Some(mut line) = lines.recv().await {
        line.push('\n');
        if output.write_all(line.as_bytes()).await.is_err() || output.flush().await.is_err() {
            // The client is gone; what is left has no reader.
            return;
        }
    }
}

async fn read_messages<R: AsyncBufRead + Unpin>(
    mut input: R,
    messages: mpsc::Sender<RxJsonRpcMessage<RoleServer>>,
    replies: mpsc::UnboundedSender<String>,
    in_flight: InFlight,
) {
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = (&mut input).take(MESSAGE_BYTES_MAX as u64 + 1).read_until(b'\n', &mut line).await;
        match read {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let read = if line.len() > MESSAGE_BYTES_MAX && !line.ends_with(b"\n") {
            // The rest of the line is skipped, unread, up to its end.
            if skip_line(&mut input).await.is_err() {
                return;
            }
            Read::Refuse(message::too_long(MESSAGE_BYTES_MAX))
        } else if line.iter().all(u8::is_ascii_whitespace) {
            Read::Skip
        } else {
            message::read(&line)
        };
        match read {
            Read::Message(message) => {
                if let Err(reply) = in_flight.claim(&message) {
                    let Ok(reply) = serde_json::to_string(&reply) else { continue };
                    if replies.send(reply).is_err() {
                        return;
                    }
                } else if messages.send(*message).await.is_err() {
                    return;
                }
            }
            Read::Refuse(reply) => {
                if replies.send(reply.to_string()).is_err() {
                    return;
                }
            }
            Read::Skip => {}
        }
    }
}

async fn skip_line<R: AsyncBufRead + Unpin>(input: &mut R) -> std::io::Result<()> {
    loop {
        let buffer = input.fill_buf().await?;
        if buffer.is_empty() {
            return Ok(());
        }
        match buffer.iter().position(|b| *b == b'\n') {
            Some(at) => {
                input.consume(at + 1);
                return Ok(());
            }
            None => {
                let len = buffer.len();
                input.consume(len);
            }
        }
    }
}

impl Transport<RoleServer> for Lines {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let sent = serde_json::to_string(&item).map_err(std::io::Error::other).and_then(|line| {
            self.outgoing
                .send(line)
                .map_err(|_| std::io::Error::new(std::io::ErrorKind::BrokenPipe, "stdout is closed"))
        });
        std::future::ready(sent)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleServer>>> + Send {
        self.incoming.recv()
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.incoming.close();
        std::future::ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    #[tokio::test]
    async fn a_line_past_the_bound_is_refused_and_the_next_one_read() {
        let mut input = vec![b'x'; MESSAGE_BYTES_MAX + 10];
        input.extend_from_slice(b"\n   \n{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}\n");
        let (out_tx, mut out_rx) = mpsc::unbounded_channel();
        let (msg_tx, mut msg_rx) = mpsc::channel(4);
        read_messages(tokio::io::BufReader::new(&input[..]), msg_tx, out_tx, InFlight::default()).await;
        let reply: Value = serde_json::from_str(&out_rx.recv().await.expect("a reply")).expect("JSON");
        assert_eq!(reply["error"]["code"], -32600);
        assert!(reply["error"]["message"].as_str().is_some_and(|m| m.contains("more than")), "{reply}");
        assert!(msg_rx.recv().await.is_some(), "the line after it is read");
        assert!(out_rx.try_recv().is_err(), "a blank line is not answered");
    }

    #[tokio::test]
    async fn a_second_request_under_an_id_in_flight_is_answered_and_not_passed_on() {
        let call = "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/list\"}\n";
        let input = format!("{call}{call}");
        let (out_tx, mut out_rx) = mpsc::unbounded_channel();
        let (msg_tx, mut msg_rx) = mpsc::channel(4);
        read_messages(tokio::io::BufReader::new(input.as_bytes()), msg_tx, out_tx, InFlight::default()).await;
        assert!(msg_rx.recv().await.is_some(), "the first goes to the SDK");
        assert!(msg_rx.try_recv().is_err(), "the second does not");
        let reply: Value = serde_json::from_str(&out_rx.recv().await.expect("a reply")).expect("JSON");
        assert_eq!(
            (&reply["id"], &reply["error"]["code"]),
            (&serde_json::json!(5), &serde_json::json!(-32600))
        );
    }
}
