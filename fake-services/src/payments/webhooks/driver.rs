//! The delivery task: sends each delivery when it is due, one task per attempt, and notes how
//! it went. It runs beside the payments fake's listener (started by [`crate::server::Server`])
//! and ends with it; an attempt under way when it ends is let go.

use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::outbound;
use crate::payments::Payments;

/// With nothing due, the task looks again this often anyway: a jumped service clock makes a
/// retry due without anyone saying so.
const IDLE_POLL_MS: u64 = 200;

/// Sends what is due until `stop` says stop.
pub(crate) async fn run(payments: Payments, mut stop: watch::Receiver<bool>) {
    let wake = payments.wake();
    let mut attempts = JoinSet::new();
    loop {
        for outgoing in payments.take_due_deliveries() {
            let payments = payments.clone();
            attempts.spawn(async move {
                let answer =
                    outbound::post(&outgoing.url, &outgoing.headers, outgoing.body, outgoing.timeout_ms)
                        .await;
                payments.delivery_attempted(outgoing.delivery, answer);
            });
        }
        let wait_ms = payments.next_delivery_in_ms().map_or(IDLE_POLL_MS, |ms| ms.clamp(1, IDLE_POLL_MS));
        tokio::select! {
            _ = wake.notified() => {}
            _ = tokio::time::sleep(Duration::from_millis(wait_ms)) => {}
            Some(_) = attempts.join_next(), if !attempts.is_empty() => {}
            _ = stop.changed() => return,
        }
    }
}
