//! Mining: blocks made lazily when they fall due ([`mine_until`]), each moving balances and
//! nonces and recording a `tx.mined` effect per transaction.
//!
//! The only place that writes the ledger for the chain, so it has a module of its own.

use alloy_consensus::Transaction;
use alloy_primitives::{Address, B256, U256, keccak256};
use serde_json::json;

use super::BASE_FEE_WEI;
use super::json::{hex_address, hex_hash};
use super::state::{Block, ChainState, Mined};
use crate::core::Inner;
use vocabulary::Effect;

impl ChainState {
    fn credit(&mut self, address: Address, block: u64, amount: U256) {
        let account = self.accounts.entry(address).or_default();
        let (balance, nonce) = (account.balance.saturating_add(amount), account.nonce);
        account.set(block, balance, nonce);
    }
}

/// Mines every block due by `now_ms`, recording a `tx.mined` effect per transaction.
pub(crate) fn mine_until(inner: &mut Inner<ChainState>, now_ms: u64) {
    while inner.state.pool_len > 0 {
        let runs = inner.state.executable_runs();
        let Some(first_ready_ms) = runs.iter().filter_map(|run| run.first().map(|(_, r)| *r)).min() else {
            return;
        };
        let last_ms = inner.state.blocks.last().map_or(0, |b| b.at_ms);
        let at_ms = first_ready_ms.saturating_add(inner.state.block_time_ms).max(last_ms);
        if at_ms > now_ms {
            return;
        }
        let txs: Vec<B256> = runs
            .iter()
            .flat_map(|run| run.iter().take_while(|(_, ready)| *ready <= at_ms).map(|(hash, _)| *hash))
            .collect();
        mine_block(inner, at_ms, txs);
    }
}

fn mine_block(inner: &mut Inner<ChainState>, at_ms: u64, hashes: Vec<B256>) {
    let state = &mut inner.state;
    let number = state.blocks.len() as u64;
    let parent_hash = state.blocks.last().map_or(B256::ZERO, |b| b.hash);
    let mut cumulative_gas_used = 0u64;
    let mut seal = Vec::with_capacity(48 + 32 * hashes.len());
    seal.extend_from_slice(parent_hash.as_slice());
    seal.extend_from_slice(&number.to_be_bytes());
    seal.extend_from_slice(&at_ms.to_be_bytes());
    for (index, hash) in hashes.iter().enumerate() {
        let Some(tx) = state.txs.get(hash).cloned() else { continue };
        seal.extend_from_slice(hash.as_slice());
        let effective_gas_price = tx.envelope.effective_gas_price(Some(BASE_FEE_WEI));
        let value = tx.envelope.value();
        let nonce = tx.envelope.nonce();
        let sender = state.accounts.entry(tx.from).or_default();
        let balance = sender.balance.saturating_sub(tx.mined_cost());
        sender.set(number, balance, nonce + 1);
        let to = tx.envelope.to().unwrap_or_else(|| tx.from.create(nonce));
        state.credit(to, number, value);
        cumulative_gas_used += tx.gas_used;
        if let Some(record) = state.txs.get_mut(hash) {
            record.mined =
                Some(Mined { block: number, index: index as u64, cumulative_gas_used, effective_gas_price });
        }
        state.pool_remove(&tx.from, nonce);
        inner.ledger.record(Effect {
            seq: 0,
            at_ms,
            kind: "tx.mined".into(),
            object_id: hex_hash(hash),
            params: json!({
                "from": hex_address(&tx.from),
                "to": tx.envelope.to().map(|a| hex_address(&a)),
                "value": value.to_string(),
                "nonce": nonce,
                "hash": hex_hash(hash),
                "block": number,
            }),
            idempotency_key: None,
            fencing_token: None,
            request_id: tx.request_id.clone(),
        });
    }
    let hash = keccak256(&seal);
    state.block_numbers.insert(hash, number);
    state.blocks.push(Block { hash, parent_hash, at_ms, txs: hashes, gas_used: cumulative_gas_used });
}
