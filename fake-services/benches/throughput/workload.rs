//! The refund workload both the throughput benchmark and `examples/count_server.rs` send:
//! one payment intent with room for every refund, a one-cent refund per request, and the
//! fixed body bare hyper answers with. Shared so that the timed and the counted figures
//! measure the same requests.

pub const SEED: u64 = 7;
pub const INTENT: &str = "pi_bench";
/// Enough to refund 1 cent per request for as long as any run lasts.
pub const INTENT_AMOUNT: u64 = 1 << 60;
pub const FORM: &[u8] = b"payment_intent=pi_bench&amount=1";
pub const BARE_BODY: &[u8] =
    br#"{"id":"re_bench","object":"refund","amount":1,"currency":"usd","status":"succeeded"}"#;
