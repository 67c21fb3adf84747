//! The node's state: accounts with their history per block, every transaction it knows
//! (pooled or mined), the pool's indexes, the blocks, and the [`View`] a read sees.
//!
//! Apart from what changes it (the pool, mining) and what reads it (the methods) because all
//! of them share these types, and because the history kept here is what makes stale reads and
//! reads of older blocks answerable.

use std::collections::BTreeMap;

use alloy_consensus::{Transaction, TxEnvelope};
use alloy_primitives::{Address, B256, U256, keccak256};

use super::gas::max_cost;
use super::{BASE_FEE_WEI, DEFAULT_CHAIN_ID};

/// An account's balance and nonce, and their values after each block that changed them.
#[derive(Debug, Clone, Default)]
pub(super) struct Account {
    pub(super) balance: U256,
    pub(super) nonce: u64,
    /// `(block, balance, nonce)`, oldest first: what reads of older blocks (and stale reads)
    /// see.
    pub(super) history: Vec<(u64, U256, u64)>,
}

impl Account {
    pub(super) fn set(&mut self, block: u64, balance: U256, nonce: u64) {
        self.balance = balance;
        self.nonce = nonce;
        match self.history.last_mut() {
            Some(last) if last.0 == block => *last = (block, balance, nonce),
            _ => self.history.push((block, balance, nonce)),
        }
    }

    /// Balance and nonce as of the end of `block`.
    pub(super) fn at(&self, block: u64) -> (U256, u64) {
        let i = self.history.partition_point(|(b, _, _)| *b <= block);
        i.checked_sub(1).and_then(|i| self.history.get(i)).map_or((U256::ZERO, 0), |(_, bal, n)| (*bal, *n))
    }
}

/// Where a mined transaction sits.
#[derive(Debug, Clone, Copy)]
pub(super) struct Mined {
    pub(super) block: u64,
    pub(super) index: u64,
    pub(super) cumulative_gas_used: u64,
    pub(super) effective_gas_price: u128,
}

/// A transaction the node knows: pooled, or mined.
#[derive(Debug, Clone)]
pub(super) struct TxRecord {
    pub(super) envelope: TxEnvelope,
    pub(super) from: Address,
    /// Service time it entered the pool.
    pub(super) pooled_ms: u64,
    /// The request that pooled it, for the ledger.
    pub(super) request_id: String,
    /// What it uses when mined: its intrinsic gas (there is no EVM).
    pub(super) gas_used: u64,
    pub(super) mined: Option<Mined>,
}

impl TxRecord {
    /// What it costs at most: geth's `tx.Cost()`, the fee cap times the gas limit plus value.
    pub(super) fn max_cost(&self) -> U256 {
        max_cost(&self.envelope)
    }

    /// What it costs when mined.
    pub(super) fn mined_cost(&self) -> U256 {
        (U256::from(self.gas_used) * U256::from(self.envelope.effective_gas_price(Some(BASE_FEE_WEI))))
            .saturating_add(self.envelope.value())
    }
}

#[derive(Debug, Clone)]
pub(super) struct Block {
    pub(super) hash: B256,
    pub(super) parent_hash: B256,
    pub(super) at_ms: u64,
    pub(super) txs: Vec<B256>,
    pub(super) gas_used: u64,
}

/// The chain fake's state.
#[derive(Debug, Clone)]
pub struct ChainState {
    pub chain_id: u64,
    pub block_time_ms: u64,
    pub(super) accounts: BTreeMap<Address, Account>,
    /// Every transaction pooled or mined (a replaced one is forgotten, as geth forgets it).
    pub(super) txs: BTreeMap<B256, TxRecord>,
    /// The current transaction per sender and nonce, pooled or mined.
    pub(super) nonces: BTreeMap<Address, BTreeMap<u64, B256>>,
    /// Pooled transactions per sender and nonce: pending and queued.
    pub(super) pool: BTreeMap<Address, BTreeMap<u64, B256>>,
    pub(super) pool_len: usize,
    pub(super) blocks: Vec<Block>,
    pub(super) block_numbers: BTreeMap<B256, u64>,
}

impl Default for ChainState {
    fn default() -> Self {
        let genesis = Block {
            hash: keccak256(b"twice chain genesis"),
            parent_hash: B256::ZERO,
            at_ms: 0,
            txs: Vec::new(),
            gas_used: 0,
        };
        ChainState {
            chain_id: DEFAULT_CHAIN_ID,
            block_time_ms: 0,
            accounts: BTreeMap::new(),
            txs: BTreeMap::new(),
            nonces: BTreeMap::new(),
            pool: BTreeMap::new(),
            pool_len: 0,
            block_numbers: BTreeMap::from([(genesis.hash, 0)]),
            blocks: vec![genesis],
        }
    }
}

/// What a read may see: the blocks up to `head` and the pool as of `until_ms`. Under
/// `stale_read` both are as they were `lag_ms` ago.
#[derive(Debug, Clone, Copy)]
pub struct View {
    pub(super) head: u64,
    pub(super) until_ms: u64,
}

impl ChainState {
    /// The newest block.
    pub fn head(&self) -> u64 {
        self.blocks.len() as u64 - 1
    }

    /// What a read as of `until_ms` sees.
    pub fn view(&self, until_ms: u64) -> View {
        let visible = self.blocks.partition_point(|b| b.at_ms <= until_ms);
        View { head: visible.saturating_sub(1) as u64, until_ms }
    }

    pub fn pool_len(&self) -> usize {
        self.pool_len
    }

    /// Sets an account's balance (seeding is not a ledger effect).
    pub fn seed_account(&mut self, address: Address, balance: U256) {
        let head = self.head();
        let account = self.accounts.entry(address).or_default();
        let nonce = account.nonce;
        account.set(head, balance, nonce);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn account_history_answers_older_blocks() {
        let mut account = Account::default();
        account.set(0, U256::from(100), 0);
        account.set(3, U256::from(70), 1);
        account.set(3, U256::from(40), 2);
        assert_eq!(account.at(0), (U256::from(100), 0));
        assert_eq!(account.at(2), (U256::from(100), 0));
        assert_eq!(account.at(3), (U256::from(40), 2));
        assert_eq!(account.at(9), (U256::from(40), 2));
        assert_eq!(Account::default().at(5), (U256::ZERO, 0));
    }
}
