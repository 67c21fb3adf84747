//! Admission and the pool: `eth_sendRawTransaction` past decoding ([`submit`]), geth's checks
//! in geth's order and words, the replacement rule, and the pool's own questions (the pending
//! nonce, the runs of executable transactions a block could take).
//!
//! The geth policy limits (`txMaxSize`, `--txpool.pricebump`, `--rpc.txfeecap`, ...) live here
//! because only admission uses them.

use alloy_consensus::{Transaction, TxEnvelope};
use alloy_primitives::{Address, B256, U256};

use super::gas::{gas_needed, max_cost};
use super::state::{ChainState, TxRecord, View};
use super::{BASE_FEE_WEI, BLOCK_GAS_LIMIT, Decoded};
use crate::core::{Inner, Mode, Stamp};

/// geth's `txMaxSize`: four 32 KiB slots.
const TX_BYTES_MAX: usize = 4 * 32 * 1024;
/// geth's `MaxInitCodeSize`.
const INIT_CODE_BYTES_MAX: usize = 2 * 24_576;
/// geth's default `GlobalSlots + GlobalQueue`: a full pool refuses more.
const POOL_TXS_MAX: usize = 5120 + 1024;
/// A replacement must raise both fee caps by this many percent (geth's `--txpool.pricebump`).
const PRICE_BUMP_PCT: u64 = 10;
/// geth's `--rpc.txfeecap`: 1 ether.
const TX_FEE_CAP_ETHER: f64 = 1.0;
/// geth's `--txpool.pricelimit`: the lowest tip the pool accepts.
const MIN_TIP_WEI: u128 = 1;

const WEI_PER_ETHER: f64 = 1e18;

/// A transaction waiting in the pool, as [`ChainState::pooled`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pooled {
    /// Its hash, `0x` and 64 hex digits.
    pub hash: String,
    /// Its sender, `0x` and 40 hex digits.
    pub from: String,
    pub nonce: u64,
    /// The id of the request that broadcast it.
    pub request_id: String,
    /// Service time when a block takes it; `None` while no block can (geth's "queued": the
    /// nonce before it was never sent, or its sender cannot pay, or its fee cap is below the
    /// base fee), until its sender sends something more.
    pub due_ms: Option<u64>,
}

impl ChainState {
    /// Every transaction in the pool, by sender and nonce, with when a block takes it (see
    /// [`Pooled::due_ms`]). Read only: blocks are mined by [`super::mine_until`].
    pub fn pooled(&self) -> Vec<Pooled> {
        let last_ms = self.blocks.last().map_or(0, |b| b.at_ms);
        let due: std::collections::BTreeMap<B256, u64> = self
            .executable_runs()
            .into_iter()
            .flatten()
            .map(|(hash, ready_ms)| (hash, ready_ms.saturating_add(self.block_time_ms).max(last_ms)))
            .collect();
        let mut out = Vec::with_capacity(self.pool_len);
        for (sender, by_nonce) in &self.pool {
            for (nonce, hash) in by_nonce {
                let Some(tx) = self.txs.get(hash) else { continue };
                out.push(Pooled {
                    hash: super::json::hex_hash(hash),
                    from: super::json::hex_address(sender),
                    nonce: *nonce,
                    request_id: tx.request_id.clone(),
                    due_ms: due.get(hash).copied(),
                });
            }
        }
        out
    }

    /// The next nonce of `address` counting the pool's pending transactions (and, for an
    /// older view, those pooled by then and mined since).
    pub(super) fn pending_nonce(&self, address: &Address, view: View) -> u64 {
        let mut nonce = self.accounts.get(address).map_or(0, |a| a.at(view.head).1);
        if let Some(by_nonce) = self.nonces.get(address) {
            while let Some(hash) = by_nonce.get(&nonce) {
                match self.txs.get(hash) {
                    Some(tx) if tx.pooled_ms <= view.until_ms => nonce += 1,
                    _ => break,
                }
            }
        }
        nonce
    }

    /// Per sender with pooled transactions, the run the next block could take: consecutive
    /// nonces from the account's, each affordable and paying at least the base fee, with the
    /// time it became executable (the latest pooling time along the run).
    pub(super) fn executable_runs(&self) -> Vec<Vec<(B256, u64)>> {
        let mut runs = Vec::new();
        for (sender, by_nonce) in &self.pool {
            let (mut balance, mut nonce) =
                self.accounts.get(sender).map_or((U256::ZERO, 0), |a| (a.balance, a.nonce));
            let mut ready_ms = 0;
            let mut run = Vec::new();
            while let Some(hash) = by_nonce.get(&nonce) {
                let Some(tx) = self.txs.get(hash) else { break };
                if tx.envelope.max_fee_per_gas() < u128::from(BASE_FEE_WEI) {
                    break;
                }
                let cost = tx.mined_cost();
                if cost > balance {
                    break;
                }
                balance -= cost;
                ready_ms = ready_ms.max(tx.pooled_ms);
                run.push((*hash, ready_ms));
                nonce += 1;
            }
            if !run.is_empty() {
                runs.push(run);
            }
        }
        // The sender whose run became executable first goes first; ties by address order,
        // which the map already gives.
        runs.sort_by_key(|run| run.first().map_or(u64::MAX, |(_, ready)| *ready));
        runs
    }

    pub(super) fn pool_remove(&mut self, sender: &Address, nonce: u64) {
        if let Some(by_nonce) = self.pool.get_mut(sender)
            && by_nonce.remove(&nonce).is_some()
        {
            self.pool_len -= 1;
            if by_nonce.is_empty() {
                self.pool.remove(sender);
            }
        }
    }
}

/// `eth_sendRawTransaction` past decoding: geth's checks in its order, then the pool. Under
/// `Mode::Pretend` every check runs and nothing is pooled.
pub(crate) fn submit(
    inner: &mut Inner<ChainState>,
    tx: &Decoded,
    mode: Mode,
    stamp: &Stamp,
) -> Result<B256, String> {
    let state = &mut inner.state;
    check_submission(state, tx)?;
    let (from, gas_used) = validate(state, tx)?;
    validate_with_state(state, tx, from)?;
    check_room(state, tx, from)?;
    if mode == Mode::Pretend {
        return Ok(tx.hash);
    }
    pool(state, tx, from, gas_used, stamp);
    Ok(tx.hash)
}

/// geth's `SubmitTransaction`: the RPC's own fee cap, then replay protection; and a
/// transaction the pool holds is "already known", whatever else is true of it.
fn check_submission(state: &ChainState, tx: &Decoded) -> Result<(), String> {
    let envelope = &tx.envelope;
    // SubmitTransaction: the RPC's own fee cap, then replay protection.
    let fee_ether = (U256::from(envelope.max_fee_per_gas()) * U256::from(envelope.gas_limit()))
        .to_string()
        .parse::<f64>()
        .unwrap_or(f64::MAX)
        / WEI_PER_ETHER;
    if fee_ether > TX_FEE_CAP_ETHER {
        return Err(format!(
            "tx fee ({fee_ether:.2} ether) exceeds the configured cap ({TX_FEE_CAP_ETHER:.2} ether)"
        ));
    }
    if envelope.is_legacy() && envelope.chain_id().is_none() {
        return Err("only replay-protected (EIP-155) transactions allowed over RPC".into());
    }
    // The pool: a transaction it holds is "already known", whatever else is true of it.
    if state.txs.get(&tx.hash).is_some_and(|t| t.mined.is_none()) {
        return Err("already known".into());
    }
    Ok(())
}

/// geth's `ValidateTransaction`: type, size, gas and fee caps, the sender and its chain id,
/// the intrinsic and floor gas, the lowest tip. The sender and the gas a block will charge.
fn validate(state: &ChainState, tx: &Decoded) -> Result<(Address, u64), String> {
    let envelope = &tx.envelope;
    if envelope.is_eip4844() {
        return Err("transaction type not supported".into());
    }
    if tx.raw_len > TX_BYTES_MAX {
        return Err(format!("oversized data: transaction size {}, limit {TX_BYTES_MAX}", tx.raw_len));
    }
    if envelope.is_create() && envelope.input().len() > INIT_CODE_BYTES_MAX {
        return Err(format!(
            "max initcode size exceeded: code size {}, limit {INIT_CODE_BYTES_MAX}",
            envelope.input().len()
        ));
    }
    if envelope.gas_limit() > BLOCK_GAS_LIMIT {
        return Err("exceeds block gas limit".into());
    }
    let (fee_cap, tip_cap) = caps(envelope);
    if fee_cap < tip_cap {
        return Err("max priority fee per gas higher than max fee per gas".into());
    }
    let Ok(from) = tx.from else {
        return Err("invalid sender: invalid transaction v, r, s values".into());
    };
    if let Some(chain_id) = envelope.chain_id()
        && chain_id != state.chain_id
    {
        return Err(format!(
            "invalid sender: invalid chain id for signer: have {chain_id} want {}",
            state.chain_id
        ));
    }
    let (intrinsic, floor) = gas_needed(envelope);
    let gas = envelope.gas_limit();
    if gas < intrinsic {
        return Err(format!("intrinsic gas too low: gas {gas}, minimum needed {intrinsic}"));
    }
    if gas < floor {
        return Err(format!("insufficient gas for floor data gas cost: gas {gas}, minimum needed {floor}"));
    }
    if tip_cap < MIN_TIP_WEI {
        return Err(format!(
            "transaction gas price below minimum: gas tip cap {tip_cap}, minimum needed {MIN_TIP_WEI}"
        ));
    }
    if envelope.authorization_list().is_some_and(|list| list.is_empty()) {
        return Err("set code tx must have at least one authorization tuple".into());
    }
    Ok((from, intrinsic.max(floor)))
}

/// A transaction's fee cap and tip cap (a legacy one's gas price is both).
fn caps(envelope: &TxEnvelope) -> (u128, u128) {
    let fee_cap = envelope.max_fee_per_gas();
    (fee_cap, envelope.max_priority_fee_per_gas().unwrap_or(fee_cap))
}

/// geth's `ValidateTransactionWithState`: a nonce not yet used, and a balance that pays for
/// this transaction on top of what the sender's pending ones may already spend (a
/// replacement only for what it adds).
fn validate_with_state(state: &ChainState, tx: &Decoded, from: Address) -> Result<(), String> {
    let envelope = &tx.envelope;
    let (balance, next_nonce) = state.accounts.get(&from).map_or((U256::ZERO, 0), |a| (a.balance, a.nonce));
    let nonce = envelope.nonce();
    if nonce < next_nonce {
        return Err(format!("nonce too low: next nonce {next_nonce}, tx nonce {nonce}"));
    }
    let cost = max_cost(envelope);
    if balance < cost {
        return Err(format!(
            "insufficient funds for gas * price + value: balance {balance}, tx cost {cost}, overshot {}",
            cost - balance
        ));
    }
    // What the sender's pending (executable) transactions may already spend.
    let pooled = state.pool.get(&from);
    let mut spent = U256::ZERO;
    let mut replaced_cost = None;
    let mut walk = next_nonce;
    while let Some(hash) = pooled.and_then(|p| p.get(&walk)) {
        let Some(pending) = state.txs.get(hash) else { break };
        spent = spent.saturating_add(pending.max_cost());
        if walk == nonce {
            replaced_cost = Some(pending.max_cost());
        }
        walk += 1;
    }
    let (tx_cost, need) = match replaced_cost {
        Some(previous) => {
            let bump = cost.saturating_sub(previous);
            (bump, spent.saturating_add(bump))
        }
        None => (cost, spent.saturating_add(cost)),
    };
    if balance < need {
        return Err(format!(
            "insufficient funds for gas * price + value: balance {balance}, queued cost {spent}, tx cost {tx_cost}, overshot {}",
            need - balance
        ));
    }
    Ok(())
}

/// Room in the pool: a transaction with a pooled one's sender and nonce replaces it only
/// with both caps higher, by the price bump (the pool's replacement rule); any other needs a
/// pool that is not full.
fn check_room(state: &ChainState, tx: &Decoded, from: Address) -> Result<(), String> {
    let (fee_cap, tip_cap) = caps(&tx.envelope);
    let existing =
        state.pool.get(&from).and_then(|p| p.get(&tx.envelope.nonce())).and_then(|h| state.txs.get(h));
    if let Some(old) = existing {
        let (old_fee_cap, old_tip_cap) = caps(&old.envelope);
        let bumped = |old: u128| old.saturating_mul(100 + u128::from(PRICE_BUMP_PCT)) / 100;
        if old_fee_cap >= fee_cap
            || old_tip_cap >= tip_cap
            || fee_cap < bumped(old_fee_cap)
            || tip_cap < bumped(old_tip_cap)
        {
            return Err("replacement transaction underpriced".into());
        }
    } else if state.pool_len >= POOL_TXS_MAX {
        return Err("txpool is full".into());
    }
    Ok(())
}

/// Pools `tx` from `from`, in place of the transaction it replaces, if any (which is
/// forgotten, as geth forgets it).
fn pool(state: &mut ChainState, tx: &Decoded, from: Address, gas_used: u64, stamp: &Stamp) {
    let nonce = tx.envelope.nonce();
    if let Some(old_hash) = state.pool.get(&from).and_then(|p| p.get(&nonce)).copied() {
        state.txs.remove(&old_hash);
        state.pool_remove(&from, nonce);
    }
    state.txs.insert(
        tx.hash,
        TxRecord {
            envelope: tx.envelope.clone(),
            from,
            pooled_ms: stamp.now_ms,
            request_id: stamp.request_id.clone(),
            gas_used,
            mined: None,
        },
    );
    state.nonces.entry(from).or_default().insert(nonce, tx.hash);
    state.pool.entry(from).or_default().insert(nonce, tx.hash);
    state.pool_len += 1;
}
