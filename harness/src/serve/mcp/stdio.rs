//! MCP over stdio, framed here: one JSON-RPC message per line each way.
//!
//! The SDK's own stdio transport drops a line that is too long or no JSON without a word;
//! JSON-RPC says such a message gets an error with a null id (`-32600` Invalid Request,
//! `-32700` Parse error), and a request for a method nobody knows gets `-32601`. So a
//! reader task reads bounded lines, answers those itself, and hands every well-formed
//! message to the SDK through a channel (which makes `receive` safe to cancel, as the SDK's
//! loop does); one writer task owns stdout, so replies from both never interleave.

use std::future::Future;

use rmcp::RoleServer;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use super::MESSAGE_BYTES_MAX;

/// Messages read ahead of the SDK before the reader waits.
const AHEAD_MAX: usize = 64;

/// The transport the SDK runs on; made by [`spawn`].
pub struct Lines {
    incoming: mpsc::Receiver<RxJsonRpcMessage<RoleServer>>,
    outgoing: mpsc::UnboundedSender<String>,
}

/// Starts the reader on `input` and the writer on `output`; returns the transport and the
/// writer's task, which ends once every line given to it is written (await it before exit).
pub fn spawn<R, W>(input: R, output: W) -> (Lines, tokio::task::JoinHandle<()>)
where
    R: AsyncBufRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (lines_tx, lines_rx) = mpsc::unbounded_channel::<String>();
    let (messages_tx, messages_rx) = mpsc::channel(AHEAD_MAX);
    let writer = tokio::spawn(write_lines(output, lines_rx));
    tokio::spawn(read_messages(input, messages_tx, lines_tx.clone()));
    (Lines { incoming: messages_rx, outgoing: lines_tx }, writer)
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

/// What one line of input is.
#[derive(Debug)]
enum Read {
    Message(Box<RxJsonRpcMessage<RoleServer>>),
    /// Answer this error and read on.
    Refuse(Value),
    /// Nothing to do (an empty line, or a notification nobody knows).
    Skip,
}

async fn read_messages<R: AsyncBufRead + Unpin>(
    mut input: R,
    messages: mpsc::Sender<RxJsonRpcMessage<RoleServer>>,
    replies: mpsc::UnboundedSender<String>,
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
            Read::Refuse(error(
                -32600,
                format!("Invalid Request: a message of more than {MESSAGE_BYTES_MAX} bytes"),
            ))
        } else {
            read_line(&line)
        };
        match read {
            Read::Message(message) => {
                if messages.send(*message).await.is_err() {
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

fn read_line(line: &[u8]) -> Read {
    let text = String::from_utf8_lossy(line);
    let text = text.trim();
    if text.is_empty() {
        return Read::Skip;
    }
    let value: Value = match serde_json::from_str(text) {
        Ok(value) => value,
        Err(e) => return Read::Refuse(error(-32700, format!("Parse error: {e}"))),
    };
    match serde_json::from_value::<RxJsonRpcMessage<RoleServer>>(value.clone()) {
        Ok(message) => Read::Message(Box::new(message)),
        Err(e) => {
            let id = value.get("id").filter(|id| id.is_string() || id.is_number()).cloned();
            let method = value.get("method").and_then(Value::as_str);
            match (id, method) {
                // A notification is never answered, even one nobody knows.
                (None, Some(_)) => Read::Skip,
                (Some(id), Some(method)) if value.get("jsonrpc") == Some(&json!("2.0")) => {
                    Read::Refuse(error_for(id, -32601, format!("Method not found: {method} ({e})")))
                }
                (id, _) => Read::Refuse(error_for(
                    id.unwrap_or(Value::Null),
                    -32600,
                    format!("Invalid Request: {e}"),
                )),
            }
        }
    }
}

fn error(code: i64, message: String) -> Value {
    error_for(Value::Null, code, message)
}

fn error_for(id: Value, code: i64, message: String) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
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
    use super::*;

    fn refused(line: &str) -> Value {
        match read_line(line.as_bytes()) {
            Read::Refuse(reply) => reply,
            other => panic!("{line}: {other:?}"),
        }
    }

    #[test]
    fn each_kind_of_bad_line_gets_json_rpcs_error() {
        assert_eq!(refused("{not json")["error"]["code"], -32700);
        assert_eq!(refused("{not json")["id"], Value::Null);
        // A well-formed request for a method nobody knows is the SDK's to answer (-32601).
        assert!(matches!(
            read_line(br#"{"jsonrpc":"2.0","id":7,"method":"tools/frobnicate"}"#),
            Read::Message(_)
        ));
        let no_version = refused(r#"{"id":7,"method":"tools/list"}"#);
        assert_eq!(
            (no_version["id"].clone(), no_version["error"]["code"].clone()),
            (json!(7), json!(-32600))
        );
        assert_eq!(refused(r#"[1, 2]"#)["error"]["code"], -32600);
        assert!(matches!(read_line(b"   \n"), Read::Skip));
        // So is a notification nobody knows (it is never answered).
        assert!(matches!(
            read_line(br#"{"jsonrpc":"2.0","method":"notifications/frobnicated"}"#),
            Read::Message(_)
        ));
        assert!(matches!(read_line(br#"{"method":"notifications/frobnicated"}"#), Read::Skip));
        assert!(matches!(read_line(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#), Read::Message(_)));
    }

    #[tokio::test]
    async fn a_line_past_the_bound_is_refused_and_the_next_one_read() {
        let mut input = vec![b'x'; MESSAGE_BYTES_MAX + 10];
        input.extend_from_slice(b"\n{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}\n");
        let (out_tx, mut out_rx) = mpsc::unbounded_channel();
        let (msg_tx, mut msg_rx) = mpsc::channel(4);
        read_messages(tokio::io::BufReader::new(&input[..]), msg_tx, out_tx).await;
        let reply: Value = serde_json::from_str(&out_rx.recv().await.expect("a reply")).expect("JSON");
        assert_eq!(reply["error"]["code"], -32600);
        assert!(reply["error"]["message"].as_str().is_some_and(|m| m.contains("more than")), "{reply}");
        assert!(msg_rx.recv().await.is_some(), "the line after it is read");
    }
}
