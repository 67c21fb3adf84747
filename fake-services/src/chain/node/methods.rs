//! The read methods of JSON-RPC ([`ChainState::answer`]): chain id, blocks, balances and
//! nonces at a block or pending, gas estimates, fee history, transactions and receipts.
//!
//! Separate from admission and mining because it only reads, through a [`View`] that may be
//! stale; `eth_sendRawTransaction` is the caller's business (`pool.rs`).

use alloy_consensus::Transaction;
use alloy_primitives::{Address, U256};
use serde_json::{Map, Value, json};

use super::super::rpc::{self, BlockId, CallArgs, Params, RpcError};
use super::gas::{floor_data_gas, intrinsic_gas};
use super::json::{qty, qty_big, qty_u128};
use super::state::{Block, ChainState, View};
use super::{BASE_FEE_WEI, BLOCK_GAS_LIMIT, GAS_PRICE_WEI, PRIORITY_FEE_WEI};

const FEE_HISTORY_BLOCKS_MAX: u64 = 1024;

/// Where a state read looks.
enum StateAt {
    Block(u64),
    Pending,
}

impl ChainState {
    fn state_at(&self, id: BlockId, view: View) -> Result<StateAt, RpcError> {
        match id {
            BlockId::Latest | BlockId::Finalized => Ok(StateAt::Block(view.head)),
            BlockId::Pending => Ok(StateAt::Pending),
            BlockId::Earliest => Ok(StateAt::Block(0)),
            BlockId::Number(n) if n <= view.head => Ok(StateAt::Block(n)),
            BlockId::Number(_) => Err(RpcError::server("header not found")),
            BlockId::Hash(hash) => match self.block_numbers.get(&hash) {
                Some(n) if *n <= view.head => Ok(StateAt::Block(*n)),
                _ => Err(RpcError::server("header for hash not found")),
            },
        }
    }

    fn account_at(&self, address: &Address, block: u64) -> (U256, u64) {
        self.accounts.get(address).map_or((U256::ZERO, 0), |a| a.at(block))
    }

    /// Answers one read method; `eth_sendRawTransaction` is the caller's business.
    pub fn answer(
        &self,
        method: &str,
        raw_params: &Value,
        view: View,
        now_ms: u64,
    ) -> Result<Value, RpcError> {
        if let Some(value) = self.node_fact(method, view) {
            Params::read(raw_params, 0)?;
            return Ok(value);
        }
        match method {
            "eth_getBlockByNumber" | "eth_getBlockByHash" => {
                self.answer_block(method, raw_params, view, now_ms)
            }
            "eth_getBalance" | "eth_getTransactionCount" | "eth_getCode" => {
                self.answer_account(method, raw_params, view)
            }
            "eth_feeHistory" | "eth_estimateGas" | "eth_call" => self.answer_fees(method, raw_params, view),
            "eth_getTransactionByHash" | "eth_getTransactionReceipt" => {
                self.answer_tx(method, raw_params, view)
            }
            _ => Err(RpcError::method_not_found(method)),
        }
    }

    /// The answer of a method that takes no parameters: what the node is and where its chain
    /// is; `None` for every other method.
    fn node_fact(&self, method: &str, view: View) -> Option<Value> {
        Some(match method {
            "eth_chainId" => qty(self.chain_id),
            "net_version" => Value::String(self.chain_id.to_string()),
            "web3_clientVersion" => json!(concat!("twice/chain-fake/v", env!("CARGO_PKG_VERSION"))),
            "net_listening" => json!(true),
            "eth_syncing" => json!(false),
            "eth_accounts" => json!([]),
            "eth_blockNumber" => qty(view.head),
            "eth_gasPrice" => qty_u128(GAS_PRICE_WEI),
            "eth_maxPriorityFeePerGas" => qty_u128(PRIORITY_FEE_WEI),
            _ => return None,
        })
    }

    /// A block by number or hash, its transactions as hashes or whole; `null` for one the
    /// view does not reach.
    fn answer_block(
        &self,
        method: &str,
        raw_params: &Value,
        view: View,
        now_ms: u64,
    ) -> Result<Value, RpcError> {
        let params = Params::read(raw_params, 2)?;
        match method {
            "eth_getBlockByNumber" => {
                let id = params.arg(0, rpc::block_number)?;
                let full = params.arg(1, rpc::boolean)?;
                Ok(match id {
                    BlockId::Pending => self.pending_block_json(full, view, now_ms),
                    BlockId::Latest | BlockId::Finalized => self.block_json(view.head, full, view),
                    BlockId::Earliest => self.block_json(0, full, view),
                    BlockId::Number(n) if n <= view.head => self.block_json(n, full, view),
                    _ => Value::Null,
                })
            }
            "eth_getBlockByHash" => {
                let hash = params.arg(0, rpc::hash)?;
                let full = params.arg(1, rpc::boolean)?;
                Ok(match self.block_numbers.get(&hash) {
                    Some(n) if *n <= view.head => self.block_json(*n, full, view),
                    _ => Value::Null,
                })
            }
            _ => Err(RpcError::method_not_found(method)),
        }
    }

    /// An account's balance, nonce or code at a block or pending (an account has no code
    /// here).
    fn answer_account(&self, method: &str, raw_params: &Value, view: View) -> Result<Value, RpcError> {
        let params = Params::read(raw_params, 2)?;
        let address = params.arg(0, rpc::address)?;
        let at = self.state_at(params.arg(1, rpc::block_number_or_hash)?, view)?;
        match method {
            "eth_getBalance" => {
                let block = match at {
                    StateAt::Block(n) => n,
                    StateAt::Pending => view.head,
                };
                Ok(qty_big(self.account_at(&address, block).0))
            }
            "eth_getTransactionCount" => Ok(qty(match at {
                StateAt::Block(n) => self.account_at(&address, n).1,
                StateAt::Pending => self.pending_nonce(&address, view),
            })),
            "eth_getCode" => Ok(json!("0x")),
            _ => Err(RpcError::method_not_found(method)),
        }
    }

    /// What sending costs: the fee history, a gas estimate, and a call (which runs nothing
    /// here: no account has code).
    fn answer_fees(&self, method: &str, raw_params: &Value, view: View) -> Result<Value, RpcError> {
        match method {
            "eth_feeHistory" => {
                let params = Params::read(raw_params, 3)?;
                let count = params.arg(0, rpc::hex_or_decimal)?;
                let newest = params.arg(1, rpc::block_number)?;
                let percentiles = params.optional_arg(2, rpc::floats)?;
                self.fee_history(count, newest, percentiles.as_deref(), view)
            }
            "eth_estimateGas" => {
                let params = Params::read(raw_params, 4)?;
                let args = params.arg(0, rpc::call_args)?;
                let at = match params.optional_arg(1, rpc::block_number_or_hash)? {
                    Some(id) => self.state_at(id, view)?,
                    None => StateAt::Pending,
                };
                self.estimate_gas(&args, at, view)
            }
            "eth_call" => {
                let params = Params::read(raw_params, 4)?;
                params.arg(0, rpc::call_args)?;
                if let Some(id) = params.optional_arg(1, rpc::block_number_or_hash)? {
                    self.state_at(id, view)?;
                }
                Ok(json!("0x"))
            }
            _ => Err(RpcError::method_not_found(method)),
        }
    }

    /// A transaction by hash once pooled within the view, or its receipt once mined within
    /// it; `null` otherwise.
    fn answer_tx(&self, method: &str, raw_params: &Value, view: View) -> Result<Value, RpcError> {
        let params = Params::read(raw_params, 1)?;
        let hash = params.arg(0, rpc::hash)?;
        match method {
            "eth_getTransactionByHash" => Ok(match self.txs.get(&hash) {
                Some(tx) if tx.pooled_ms <= view.until_ms => self.tx_json(&hash, tx, view),
                _ => Value::Null,
            }),
            "eth_getTransactionReceipt" => Ok(match self.txs.get(&hash) {
                Some(tx) if tx.mined.is_some_and(|m| m.block <= view.head) => self.receipt_json(&hash, tx),
                _ => Value::Null,
            }),
            _ => Err(RpcError::method_not_found(method)),
        }
    }

    fn estimate_gas(&self, args: &CallArgs, at: StateAt, view: View) -> Result<Value, RpcError> {
        if let Some(from) = &args.from
            && !args.value.is_zero()
        {
            let block = match at {
                StateAt::Block(n) => n,
                StateAt::Pending => view.head,
            };
            if self.account_at(from, block).0 < args.value {
                return Err(RpcError::server("insufficient funds for transfer"));
            }
        }
        let gas = intrinsic_gas(&args.input, args.to.is_none(), args.access_list_items, 0);
        Ok(qty(gas.max(floor_data_gas(&args.input))))
    }

    fn fee_history(
        &self,
        count: u64,
        newest: BlockId,
        percentiles: Option<&[f64]>,
        view: View,
    ) -> Result<Value, RpcError> {
        if let Some(percentiles) = percentiles {
            for (i, p) in percentiles.iter().enumerate() {
                if !(0.0..=100.0).contains(p) {
                    return Err(RpcError::server(format!("invalid reward percentile: {p:.6}")));
                }
                if i > 0 && *p <= percentiles[i - 1] {
                    return Err(RpcError::server(format!(
                        "invalid reward percentile: #{}:{:.6} >= #{i}:{p:.6}",
                        i - 1,
                        percentiles[i - 1]
                    )));
                }
            }
        }
        if count == 0 {
            return Ok(json!({"oldestBlock": "0x0", "gasUsedRatio": null}));
        }
        let newest = match newest {
            BlockId::Latest | BlockId::Finalized | BlockId::Pending => view.head,
            BlockId::Earliest => 0,
            BlockId::Number(n) if n <= view.head => n,
            BlockId::Number(n) => {
                return Err(RpcError::server(format!(
                    "request beyond head block: requested {n}, head {}",
                    view.head
                )));
            }
            BlockId::Hash(_) => view.head,
        };
        let count = count.min(FEE_HISTORY_BLOCKS_MAX).min(newest + 1);
        let oldest = newest + 1 - count;
        let blocks = &self.blocks[oldest as usize..=newest as usize];
        let mut result = Map::new();
        result.insert("oldestBlock".into(), qty(oldest));
        result.insert("baseFeePerGas".into(), Value::Array(vec![qty(BASE_FEE_WEI); count as usize + 1]));
        result.insert(
            "gasUsedRatio".into(),
            Value::Array(blocks.iter().map(|b| json!(b.gas_used as f64 / BLOCK_GAS_LIMIT as f64)).collect()),
        );
        if let Some(percentiles) = percentiles {
            let rewards = blocks.iter().map(|b| Value::Array(self.rewards(b, percentiles))).collect();
            result.insert("reward".into(), Value::Array(rewards));
        }
        Ok(Value::Object(result))
    }

    /// geth's percentile walk over a block's effective tips, weighted by gas used.
    fn rewards(&self, block: &Block, percentiles: &[f64]) -> Vec<Value> {
        let mut sorted: Vec<(u128, u64)> = block
            .txs
            .iter()
            .filter_map(|h| self.txs.get(h))
            .map(|tx| (tx.envelope.effective_tip_per_gas(BASE_FEE_WEI).unwrap_or(0), tx.gas_used))
            .collect();
        if sorted.is_empty() {
            return vec![qty(0); percentiles.len()];
        }
        sorted.sort_by_key(|(tip, _)| *tip);
        let mut index = 0;
        let mut sum = sorted[0].1;
        percentiles
            .iter()
            .map(|p| {
                let threshold = (block.gas_used as f64 * p / 100.0) as u64;
                while sum < threshold && index < sorted.len() - 1 {
                    index += 1;
                    sum += sorted[index].1;
                }
                qty_u128(sorted[index].0)
            })
            .collect()
    }
}
