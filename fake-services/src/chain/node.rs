//! The node behind the JSON-RPC surface: accounts, the transaction pool, blocks, and the
//! answers of every method.
//!
//! Validation follows geth's order and words (`SubmitTransaction`, then the pool's
//! `ValidateTransaction` and `ValidateTransactionWithState`, then its replacement rule), since
//! clients and executors branch on them. Blocks are mined lazily: a block is due
//! `block_time_ms` after the earliest executable pending transaction became executable (at
//! once when the block time is 0), and [`mine_until`] mines every block due by a service time.
//! Only blocks with transactions are made, so a long clock jump does not mint millions of
//! empty ones. There is no EVM: a transaction uses exactly its intrinsic gas, calls return
//! `0x`, and nothing emits logs.
//!
//! The node is split by concept: `state.rs` (accounts, transactions, blocks, views),
//! `decode.rs` (raw bytes to a transaction and its sender), `gas.rs` (intrinsic gas and costs),
//! `pool.rs` (admission and the pool), `mine.rs` (blocks and the ledger), `methods.rs` (the read
//! methods) and `json.rs` (the shapes answers take). This file holds the chain-wide constants.

mod decode;
mod gas;
mod json;
mod methods;
mod mine;
mod pool;
mod state;

pub(crate) use decode::{Decoded, decode_envelope, decode_raw, transfer_params};
pub(crate) use json::hex_address;
pub(crate) use mine::mine_until;
pub(crate) use pool::submit;
pub(crate) use state::{ChainState, View};

pub(crate) const DEFAULT_CHAIN_ID: u64 = 31337;
const GWEI: u128 = 1_000_000_000;
/// The base fee of every block. Constant: blocks are never full enough to move it.
pub const BASE_FEE_WEI: u64 = 1_000_000_000;
/// What `eth_gasPrice` suggests.
pub(crate) const GAS_PRICE_WEI: u128 = GWEI;
/// What `eth_maxPriorityFeePerGas` suggests.
pub const PRIORITY_FEE_WEI: u128 = GWEI;
pub(crate) const BLOCK_GAS_LIMIT: u64 = 30_000_000;
