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

use std::collections::BTreeMap;

use alloy_consensus::transaction::{RlpEcdsaDecodableTx, SignerRecoverable};
use alloy_consensus::{Transaction, TxEnvelope, TxLegacy};
use alloy_eips::Typed2718;
use alloy_eips::eip2718::{Decodable2718, Eip2718Error};
use alloy_primitives::{Address, B256, U256, keccak256};
use serde_json::{Map, Value, json};

use super::rpc::{self, BlockId, CallArgs, Params, RpcError};
use crate::core::{Inner, Mode, Stamp};
use crate::record::Effect;

pub const DEFAULT_CHAIN_ID: u64 = 31337;
const GWEI: u128 = 1_000_000_000;
/// The base fee of every block. Constant: blocks are never full enough to move it.
pub const BASE_FEE_WEI: u64 = 1_000_000_000;
/// What `eth_gasPrice` suggests.
pub const GAS_PRICE_WEI: u128 = GWEI;
/// What `eth_maxPriorityFeePerGas` suggests.
pub const PRIORITY_FEE_WEI: u128 = GWEI;
pub const BLOCK_GAS_LIMIT: u64 = 30_000_000;
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
const FEE_HISTORY_BLOCKS_MAX: u64 = 1024;
const WEI_PER_ETHER: f64 = 1e18;

/// An account's balance and nonce, and their values after each block that changed them.
#[derive(Debug, Clone, Default)]
struct Account {
    balance: U256,
    nonce: u64,
    /// `(block, balance, nonce)`, oldest first: what reads of older blocks (and stale reads)
    /// see.
    history: Vec<(u64, U256, u64)>,
}

impl Account {
    fn set(&mut self, block: u64, balance: U256, nonce: u64) {
        self.balance = balance;
        self.nonce = nonce;
        match self.history.last_mut() {
            Some(last) if last.0 == block => *last = (block, balance, nonce),
            _ => self.history.push((block, balance, nonce)),
        }
    }

    /// Balance and nonce as of the end of `block`.
    fn at(&self, block: u64) -> (U256, u64) {
        let i = self.history.partition_point(|(b, _, _)| *b <= block);
        i.checked_sub(1).and_then(|i| self.history.get(i)).map_or((U256::ZERO, 0), |(_, bal, n)| (*bal, *n))
    }
}

/// Where a mined transaction sits.
#[derive(Debug, Clone, Copy)]
struct Mined {
    block: u64,
    index: u64,
    cumulative_gas_used: u64,
    effective_gas_price: u128,
}

/// A transaction the node knows: pooled, or mined.
#[derive(Debug, Clone)]
struct TxRecord {
    envelope: TxEnvelope,
    from: Address,
    /// Service time it entered the pool.
    pooled_ms: u64,
    /// The request that pooled it, for the ledger.
    request_id: String,
    /// What it uses when mined: its intrinsic gas (there is no EVM).
    gas_used: u64,
    mined: Option<Mined>,
}

impl TxRecord {
    /// What it costs at most: geth's `tx.Cost()`, the fee cap times the gas limit plus value.
    fn max_cost(&self) -> U256 {
        max_cost(&self.envelope)
    }

    /// What it costs when mined.
    fn mined_cost(&self) -> U256 {
        (U256::from(self.gas_used) * U256::from(self.envelope.effective_gas_price(Some(BASE_FEE_WEI))))
            .saturating_add(self.envelope.value())
    }
}

#[derive(Debug, Clone)]
struct Block {
    hash: B256,
    parent_hash: B256,
    at_ms: u64,
    txs: Vec<B256>,
    gas_used: u64,
}

/// The chain fake's state.
#[derive(Debug, Clone)]
pub struct ChainState {
    pub chain_id: u64,
    pub block_time_ms: u64,
    accounts: BTreeMap<Address, Account>,
    /// Every transaction pooled or mined (a replaced one is forgotten, as geth forgets it).
    txs: BTreeMap<B256, TxRecord>,
    /// The current transaction per sender and nonce, pooled or mined.
    nonces: BTreeMap<Address, BTreeMap<u64, B256>>,
    /// Pooled transactions per sender and nonce: pending and queued.
    pool: BTreeMap<Address, BTreeMap<u64, B256>>,
    pool_len: usize,
    blocks: Vec<Block>,
    block_numbers: BTreeMap<B256, u64>,
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
    head: u64,
    until_ms: u64,
}

/// A signed transaction, decoded and its sender recovered, before it meets the node's state.
/// Decoding and recovery happen outside the service's lock.
#[derive(Debug, Clone)]
pub struct Decoded {
    envelope: TxEnvelope,
    hash: B256,
    raw_len: usize,
    from: Result<Address, ()>,
}

/// Decodes raw transaction bytes as geth's `UnmarshalBinary` does, with its messages.
pub fn decode_raw(raw: &[u8]) -> Result<Decoded, String> {
    let type_name = match raw.first() {
        None => return Err("typed transaction too short".into()),
        Some(&ty) if ty <= 0x7f => {
            if raw.len() <= 1 {
                return Err("typed transaction too short".into());
            }
            match ty {
                1 => "types.AccessListTx",
                2 => "types.DynamicFeeTx",
                3 => "types.BlobTx",
                4 => "types.SetCodeTx",
                _ => return Err("transaction type not supported".into()),
            }
        }
        // A string, not a list: geth decodes it as a legacy transaction and fails there
        // (alloy would read the byte as a type flag).
        Some(0x80..=0xbf) => return Err("rlp: expected input list for types.LegacyTx".into()),
        Some(_) => "types.LegacyTx",
    };
    let decoded = if type_name == "types.LegacyTx" {
        // The envelope's own legacy fallback hides the RLP error behind "unexpected type 0";
        // decoding the legacy transaction directly keeps it.
        let mut buf = raw;
        TxLegacy::rlp_decode_signed(&mut buf).map_err(Eip2718Error::RlpError).and_then(|signed| {
            if buf.is_empty() {
                Ok(TxEnvelope::Legacy(signed))
            } else {
                Err(Eip2718Error::RlpError(alloy_rlp::Error::UnexpectedLength))
            }
        })
    } else {
        TxEnvelope::decode_2718_exact(raw)
    };
    let envelope = decoded.map_err(|e| match e {
        Eip2718Error::RlpError(alloy_rlp::Error::InputTooShort) if list_fits(raw, type_name) => {
            // The list is all there; a field is missing from it.
            format!("rlp: too few elements for {type_name}")
        }
        Eip2718Error::RlpError(e) => rlp_message(&e, type_name),
        Eip2718Error::UnexpectedType(_) => "transaction type not supported".into(),
        // The error type is non-exhaustive.
        #[allow(unreachable_patterns)]
        _ => format!("rlp: {e}"),
    })?;
    let hash = *envelope.tx_hash();
    let from = envelope.recover_signer().map_err(|_| ());
    Ok(Decoded { envelope, hash, raw_len: raw.len(), from })
}

/// Whether the transaction's outer list header is whole and its payload within the input.
fn list_fits(raw: &[u8], type_name: &str) -> bool {
    let mut payload = if type_name == "types.LegacyTx" { raw } else { &raw[1..] };
    match alloy_rlp::Header::decode(&mut payload) {
        Ok(header) => header.list && header.payload_length <= payload.len(),
        Err(_) => false,
    }
}

/// alloy's RLP errors in the words of geth's `rlp` package.
fn rlp_message(error: &alloy_rlp::Error, type_name: &str) -> String {
    use alloy_rlp::Error as E;
    match error {
        E::Overflow => format!("rlp: uint overflow for {type_name}"),
        E::LeadingZero => format!("rlp: non-canonical integer (leading zero bytes) for {type_name}"),
        E::InputTooShort => "rlp: value size exceeds available input length".into(),
        E::NonCanonicalSingleByte | E::NonCanonicalSize => {
            format!("rlp: non-canonical size information for {type_name}")
        }
        E::UnexpectedLength => "rlp: input contains more than one value".into(),
        E::UnexpectedString => format!("rlp: expected input list for {type_name}"),
        E::UnexpectedList => format!("rlp: expected input string or byte for {type_name}"),
        E::ListLengthMismatch { expected, got } if got < expected => {
            format!("rlp: too few elements for {type_name}")
        }
        E::ListLengthMismatch { .. } => format!("rlp: input list has too many elements for {type_name}"),
        E::Custom(message) => format!("rlp: {message} for {type_name}"),
        // The error type is non-exhaustive.
        #[allow(unreachable_patterns)]
        other => format!("rlp: {other} for {type_name}"),
    }
}

/// geth's `tx.Cost()`: gas limit times the fee cap (the gas price for legacy), plus value.
fn max_cost(envelope: &TxEnvelope) -> U256 {
    // A value near 2^256 must not wrap the cost into something affordable.
    (U256::from(envelope.gas_limit()) * U256::from(envelope.max_fee_per_gas()))
        .saturating_add(envelope.value())
}

/// Gas a transaction needs before any execution (Istanbul calldata prices, Shanghai init
/// code words, Berlin access lists, Prague authorizations).
pub fn intrinsic_gas(input: &[u8], create: bool, access: (u64, u64), authorizations: u64) -> u64 {
    let zeros = input.iter().filter(|b| **b == 0).count() as u64;
    let nonzeros = input.len() as u64 - zeros;
    let mut gas: u64 = if create { 53_000 } else { 21_000 };
    gas = gas.saturating_add(zeros.saturating_mul(4)).saturating_add(nonzeros.saturating_mul(16));
    if create {
        gas = gas.saturating_add(2 * input.len().div_ceil(32) as u64);
    }
    gas.saturating_add(access.0.saturating_mul(2400))
        .saturating_add(access.1.saturating_mul(1900))
        .saturating_add(authorizations.saturating_mul(25_000))
}

/// EIP-7623's floor: 21000 plus 10 per calldata token (a zero byte is one, others four).
pub fn floor_data_gas(input: &[u8]) -> u64 {
    let zeros = input.iter().filter(|b| **b == 0).count() as u64;
    let tokens = zeros + 4 * (input.len() as u64 - zeros);
    21_000u64.saturating_add(tokens.saturating_mul(10))
}

fn access_counts(envelope: &TxEnvelope) -> (u64, u64) {
    envelope.access_list().map_or((0, 0), |list| {
        (list.0.len() as u64, list.0.iter().map(|item| item.storage_keys.len() as u64).sum())
    })
}

fn gas_needed(envelope: &TxEnvelope) -> (u64, u64) {
    let input = envelope.input();
    let authorizations = envelope.authorization_list().map_or(0, |list| list.len() as u64);
    (
        intrinsic_gas(input, envelope.is_create(), access_counts(envelope), authorizations),
        floor_data_gas(input),
    )
}

pub fn hex_address(address: &Address) -> String {
    format!("{address:#x}")
}

fn hex_hash(hash: &B256) -> String {
    format!("{hash:#x}")
}

fn qty(n: u64) -> Value {
    Value::String(format!("{n:#x}"))
}

fn qty_u128(n: u128) -> Value {
    Value::String(format!("{n:#x}"))
}

fn qty_big(n: U256) -> Value {
    Value::String(format!("{n:#x}"))
}

fn hex_bytes(bytes: &[u8]) -> Value {
    Value::String(alloy_primitives::hex::encode_prefixed(bytes))
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

    /// The next nonce of `address` counting the pool's pending transactions (and, for an
    /// older view, those pooled by then and mined since).
    fn pending_nonce(&self, address: &Address, view: View) -> u64 {
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
    fn executable_runs(&self) -> Vec<Vec<(B256, u64)>> {
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

    fn pool_remove(&mut self, sender: &Address, nonce: u64) {
        if let Some(by_nonce) = self.pool.get_mut(sender)
            && by_nonce.remove(&nonce).is_some()
        {
            self.pool_len -= 1;
            if by_nonce.is_empty() {
                self.pool.remove(sender);
            }
        }
    }

    fn credit(&mut self, address: Address, block: u64, amount: U256) {
        let account = self.accounts.entry(address).or_default();
        let (balance, nonce) = (account.balance.saturating_add(amount), account.nonce);
        account.set(block, balance, nonce);
    }
}

/// Mines every block due by `now_ms`, recording a `tx.mined` effect per transaction.
pub fn mine_until(inner: &mut Inner<ChainState>, now_ms: u64) {
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

/// `eth_sendRawTransaction` past decoding: geth's checks in its order, then the pool. Under
/// `Mode::Pretend` every check runs and nothing is pooled.
pub fn submit(
    inner: &mut Inner<ChainState>,
    tx: &Decoded,
    mode: Mode,
    stamp: &Stamp,
) -> Result<B256, String> {
    let state = &mut inner.state;
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
    // ValidateTransaction.
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
    let fee_cap = envelope.max_fee_per_gas();
    let tip_cap = envelope.max_priority_fee_per_gas().unwrap_or(fee_cap);
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
    // ValidateTransactionWithState.
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
    // The pool's replacement rule: both caps higher, and by the price bump.
    let existing = pooled.and_then(|p| p.get(&nonce)).and_then(|h| state.txs.get(h));
    if let Some(old) = existing {
        let old_fee_cap = old.envelope.max_fee_per_gas();
        let old_tip_cap = old.envelope.max_priority_fee_per_gas().unwrap_or(old_fee_cap);
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
    if mode == Mode::Pretend {
        return Ok(tx.hash);
    }
    if let Some(old_hash) = state.pool.get(&from).and_then(|p| p.get(&nonce)).copied() {
        state.txs.remove(&old_hash);
        state.pool_remove(&from, nonce);
    }
    state.txs.insert(
        tx.hash,
        TxRecord {
            envelope: envelope.clone(),
            from,
            pooled_ms: stamp.now_ms,
            request_id: stamp.request_id.clone(),
            gas_used: intrinsic.max(floor),
            mined: None,
        },
    );
    state.nonces.entry(from).or_default().insert(nonce, tx.hash);
    state.pool.entry(from).or_default().insert(nonce, tx.hash);
    state.pool_len += 1;
    Ok(tx.hash)
}

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
        match method {
            "eth_chainId" => {
                Params::read(raw_params, 0)?;
                Ok(qty(self.chain_id))
            }
            "net_version" => {
                Params::read(raw_params, 0)?;
                Ok(Value::String(self.chain_id.to_string()))
            }
            "web3_clientVersion" => {
                Params::read(raw_params, 0)?;
                Ok(json!(concat!("twice/chain-fake/v", env!("CARGO_PKG_VERSION"))))
            }
            "net_listening" => {
                Params::read(raw_params, 0)?;
                Ok(json!(true))
            }
            "eth_syncing" => {
                Params::read(raw_params, 0)?;
                Ok(json!(false))
            }
            "eth_accounts" => {
                Params::read(raw_params, 0)?;
                Ok(json!([]))
            }
            "eth_blockNumber" => {
                Params::read(raw_params, 0)?;
                Ok(qty(view.head))
            }
            "eth_gasPrice" => {
                Params::read(raw_params, 0)?;
                Ok(qty_u128(GAS_PRICE_WEI))
            }
            "eth_maxPriorityFeePerGas" => {
                Params::read(raw_params, 0)?;
                Ok(qty_u128(PRIORITY_FEE_WEI))
            }
            "eth_getBlockByNumber" => {
                let params = Params::read(raw_params, 2)?;
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
                let params = Params::read(raw_params, 2)?;
                let hash = params.arg(0, rpc::hash)?;
                let full = params.arg(1, rpc::boolean)?;
                Ok(match self.block_numbers.get(&hash) {
                    Some(n) if *n <= view.head => self.block_json(*n, full, view),
                    _ => Value::Null,
                })
            }
            "eth_getBalance" => {
                let params = Params::read(raw_params, 2)?;
                let address = params.arg(0, rpc::address)?;
                let at = self.state_at(params.arg(1, rpc::block_number_or_hash)?, view)?;
                let block = match at {
                    StateAt::Block(n) => n,
                    StateAt::Pending => view.head,
                };
                Ok(qty_big(self.account_at(&address, block).0))
            }
            "eth_getTransactionCount" => {
                let params = Params::read(raw_params, 2)?;
                let address = params.arg(0, rpc::address)?;
                Ok(qty(match self.state_at(params.arg(1, rpc::block_number_or_hash)?, view)? {
                    StateAt::Block(n) => self.account_at(&address, n).1,
                    StateAt::Pending => self.pending_nonce(&address, view),
                }))
            }
            "eth_getCode" => {
                let params = Params::read(raw_params, 2)?;
                params.arg(0, rpc::address)?;
                self.state_at(params.arg(1, rpc::block_number_or_hash)?, view)?;
                Ok(json!("0x"))
            }
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
            "eth_getTransactionByHash" => {
                let params = Params::read(raw_params, 1)?;
                let hash = params.arg(0, rpc::hash)?;
                Ok(match self.txs.get(&hash) {
                    Some(tx) if tx.pooled_ms <= view.until_ms => self.tx_json(&hash, tx, view),
                    _ => Value::Null,
                })
            }
            "eth_getTransactionReceipt" => {
                let params = Params::read(raw_params, 1)?;
                let hash = params.arg(0, rpc::hash)?;
                Ok(match self.txs.get(&hash) {
                    Some(tx) if tx.mined.is_some_and(|m| m.block <= view.head) => {
                        self.receipt_json(&hash, tx)
                    }
                    _ => Value::Null,
                })
            }
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

    fn block_json(&self, number: u64, full: bool, view: View) -> Value {
        let Some(block) = self.blocks.get(number as usize) else { return Value::Null };
        let txs: Vec<Value> = if full {
            block.txs.iter().filter_map(|h| self.txs.get(h).map(|tx| self.tx_json(h, tx, view))).collect()
        } else {
            block.txs.iter().map(|h| json!(hex_hash(h))).collect()
        };
        let mut body =
            header_json(number, block.at_ms, block.parent_hash, block.gas_used, block.txs.len(), txs);
        let root = |tag: &[u8]| {
            if block.txs.is_empty() {
                json!(EMPTY_ROOT)
            } else {
                json!(hex_hash(&keccak256([tag, block.hash.as_slice()].concat())))
            }
        };
        body.insert("hash".into(), json!(hex_hash(&block.hash)));
        body.insert("transactionsRoot".into(), root(b"transactions"));
        body.insert("receiptsRoot".into(), root(b"receipts"));
        body.insert(
            "stateRoot".into(),
            json!(hex_hash(&keccak256([b"state", block.hash.as_slice()].concat()))),
        );
        Value::Object(body)
    }

    /// geth's pending block: the next number, no hash, nonce or miner, the pending
    /// transactions.
    fn pending_block_json(&self, full: bool, view: View, now_ms: u64) -> Value {
        let hashes: Vec<B256> = self
            .executable_runs()
            .into_iter()
            .flatten()
            .map(|(hash, _)| hash)
            .filter(|h| self.txs.get(h).is_some_and(|tx| tx.pooled_ms <= view.until_ms))
            .collect();
        let gas_used = hashes.iter().filter_map(|h| self.txs.get(h)).map(|tx| tx.gas_used).sum();
        let txs = hashes
            .iter()
            .filter_map(|h| {
                let tx = self.txs.get(h)?;
                Some(if full { self.tx_json(h, tx, view) } else { json!(hex_hash(h)) })
            })
            .collect();
        let parent = self.blocks.get(view.head as usize).map_or(B256::ZERO, |b| b.hash);
        let mut body = header_json(view.head + 1, now_ms, parent, gas_used, hashes.len(), txs);
        for field in ["hash", "nonce", "miner"] {
            body.insert(field.into(), Value::Null);
        }
        body.insert("transactionsRoot".into(), json!(EMPTY_ROOT));
        body.insert("receiptsRoot".into(), json!(EMPTY_ROOT));
        body.insert("stateRoot".into(), json!(hex_hash(&B256::ZERO)));
        Value::Object(body)
    }

    fn tx_json(&self, hash: &B256, tx: &TxRecord, view: View) -> Value {
        let envelope = &tx.envelope;
        let mined = tx.mined.filter(|m| m.block <= view.head);
        let block_hash = mined.and_then(|m| self.blocks.get(m.block as usize)).map(|b| hex_hash(&b.hash));
        let signature = envelope.signature();
        let mut body = Map::new();
        body.insert("blockHash".into(), json!(block_hash));
        body.insert("blockNumber".into(), mined.map_or(Value::Null, |m| qty(m.block)));
        body.insert("from".into(), json!(hex_address(&tx.from)));
        body.insert("gas".into(), qty(envelope.gas_limit()));
        let price =
            mined.map_or_else(|| envelope.effective_gas_price(Some(BASE_FEE_WEI)), |m| m.effective_gas_price);
        body.insert("gasPrice".into(), qty_u128(price));
        if envelope.is_dynamic_fee() {
            body.insert("maxFeePerGas".into(), qty_u128(envelope.max_fee_per_gas()));
            body.insert(
                "maxPriorityFeePerGas".into(),
                qty_u128(envelope.max_priority_fee_per_gas().unwrap_or_default()),
            );
        }
        body.insert("hash".into(), json!(hex_hash(hash)));
        body.insert("input".into(), hex_bytes(envelope.input()));
        body.insert("nonce".into(), qty(envelope.nonce()));
        body.insert("to".into(), json!(envelope.to().map(|a| hex_address(&a))));
        body.insert("transactionIndex".into(), mined.map_or(Value::Null, |m| qty(m.index)));
        body.insert("value".into(), qty_big(envelope.value()));
        body.insert("type".into(), qty(u64::from(envelope.ty())));
        if let Some(list) = envelope.access_list() {
            let items: Vec<Value> = list
                .0
                .iter()
                .map(|item| {
                    json!({
                        "address": hex_address(&item.address),
                        "storageKeys": item.storage_keys.iter().map(hex_hash).collect::<Vec<_>>(),
                    })
                })
                .collect();
            body.insert("accessList".into(), Value::Array(items));
        }
        if let Some(list) = envelope.authorization_list() {
            let items: Vec<Value> = list
                .iter()
                .map(|auth| {
                    json!({
                        "chainId": qty_big(auth.chain_id),
                        "address": hex_address(&auth.address),
                        "nonce": qty(auth.nonce),
                        "yParity": qty(u64::from(auth.y_parity())),
                        "r": qty_big(auth.r()),
                        "s": qty_big(auth.s()),
                    })
                })
                .collect();
            body.insert("authorizationList".into(), Value::Array(items));
        }
        let parity = u64::from(signature.v());
        let v = if envelope.is_legacy() {
            envelope.chain_id().map_or(27 + parity, |id| id.saturating_mul(2).saturating_add(35 + parity))
        } else {
            parity
        };
        if !envelope.is_legacy() {
            body.insert("chainId".into(), envelope.chain_id().map_or(Value::Null, qty));
            body.insert("yParity".into(), qty(parity));
        } else if let Some(id) = envelope.chain_id() {
            body.insert("chainId".into(), qty(id));
        }
        body.insert("v".into(), qty(v));
        body.insert("r".into(), qty_big(signature.r()));
        body.insert("s".into(), qty_big(signature.s()));
        Value::Object(body)
    }

    fn receipt_json(&self, hash: &B256, tx: &TxRecord) -> Value {
        let Some(mined) = tx.mined else { return Value::Null };
        let block_hash = self.blocks.get(mined.block as usize).map_or(B256::ZERO, |b| b.hash);
        let contract = tx.envelope.is_create().then(|| hex_address(&tx.from.create(tx.envelope.nonce())));
        json!({
            "blockHash": hex_hash(&block_hash),
            "blockNumber": qty(mined.block),
            "contractAddress": contract,
            "cumulativeGasUsed": qty(mined.cumulative_gas_used),
            "effectiveGasPrice": qty_u128(mined.effective_gas_price),
            "from": hex_address(&tx.from),
            "gasUsed": qty(tx.gas_used),
            "logs": [],
            "logsBloom": EMPTY_BLOOM,
            "status": "0x1",
            "to": tx.envelope.to().map(|a| hex_address(&a)),
            "transactionHash": hex_hash(hash),
            "transactionIndex": qty(mined.index),
            "type": qty(u64::from(tx.envelope.ty())),
        })
    }
}

/// The root of an empty trie.
const EMPTY_ROOT: &str = "0x56e81f171bcc55a6ff8345e692c0f86e5b48e01b996cadc001622fb5e363b421";
/// keccak256 of the RLP of an empty list: a block without uncles.
const EMPTY_UNCLES: &str = "0x1dcc4de8dec75d7aab85b567b6ccd41ad312451b948a7413f0a142fd40d49347";
/// 256 zero bytes: nothing logged.
const EMPTY_BLOOM: &str = concat!(
    "0x",
    "0000000000000000000000000000000000000000000000000000000000000000",
    "0000000000000000000000000000000000000000000000000000000000000000",
    "0000000000000000000000000000000000000000000000000000000000000000",
    "0000000000000000000000000000000000000000000000000000000000000000",
    "0000000000000000000000000000000000000000000000000000000000000000",
    "0000000000000000000000000000000000000000000000000000000000000000",
    "0000000000000000000000000000000000000000000000000000000000000000",
    "0000000000000000000000000000000000000000000000000000000000000000",
);

/// The fields every block has, post-merge (no difficulty, no uncles, no withdrawals).
fn header_json(
    number: u64,
    at_ms: u64,
    parent_hash: B256,
    gas_used: u64,
    tx_count: usize,
    txs: Vec<Value>,
) -> Map<String, Value> {
    let mut body = Map::new();
    body.insert("number".into(), qty(number));
    body.insert("parentHash".into(), json!(hex_hash(&parent_hash)));
    body.insert("timestamp".into(), qty(at_ms / 1000));
    body.insert("baseFeePerGas".into(), qty(BASE_FEE_WEI));
    body.insert("gasLimit".into(), qty(BLOCK_GAS_LIMIT));
    body.insert("gasUsed".into(), qty(gas_used));
    body.insert("miner".into(), json!(hex_address(&Address::ZERO)));
    body.insert("difficulty".into(), qty(0));
    body.insert("totalDifficulty".into(), qty(0));
    body.insert("extraData".into(), json!("0x"));
    body.insert("logsBloom".into(), json!(EMPTY_BLOOM));
    body.insert("mixHash".into(), json!(hex_hash(&B256::ZERO)));
    body.insert("nonce".into(), json!("0x0000000000000000"));
    body.insert("sha3Uncles".into(), json!(EMPTY_UNCLES));
    body.insert("uncles".into(), json!([]));
    body.insert("withdrawals".into(), json!([]));
    body.insert("withdrawalsRoot".into(), json!(EMPTY_ROOT));
    // A rough size: the header and about 110 bytes per transfer.
    body.insert("size".into(), qty(540 + 110 * tx_count as u64));
    body.insert("transactions".into(), Value::Array(txs));
    body
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

    #[test]
    fn quantities_and_addresses_are_lowercase_0x_hex() {
        assert_eq!(qty(0), json!("0x0"));
        assert_eq!(qty_big(U256::ZERO), json!("0x0"));
        assert_eq!(qty_big(U256::from(255)), json!("0xff"));
        let address: Address = "0xAbCdEf0000000000000000000000000000000001".parse().unwrap();
        assert_eq!(hex_address(&address), "0xabcdef0000000000000000000000000000000001");
        assert_eq!(EMPTY_BLOOM.len(), 2 + 512);
    }

    #[test]
    fn malformed_bytes_get_geths_rlp_words() {
        let cases = [
            ("", "typed transaction too short"),
            ("02", "typed transaction too short"),
            ("7f00", "transaction type not supported"),
            ("80", "rlp: expected input list for types.LegacyTx"),
            ("c0", "rlp: too few elements for types.LegacyTx"),
            ("02c0", "rlp: too few elements for types.DynamicFeeTx"),
            ("01c3010203", "rlp: too few elements for types.AccessListTx"),
            ("f86c", "rlp: value size exceeds available input length"),
            ("02c3c0c0c0", "rlp: expected input string or byte for types.DynamicFeeTx"),
        ];
        for (hex, want) in cases {
            let raw = alloy_primitives::hex::decode(hex).unwrap();
            assert_eq!(decode_raw(&raw).map(|_| ()), Err(want.to_string()), "{hex}");
        }
    }

    #[test]
    fn intrinsic_gas_follows_the_forks() {
        assert_eq!(intrinsic_gas(&[], false, (0, 0), 0), 21_000);
        assert_eq!(intrinsic_gas(&[0, 1], false, (1, 2), 0), 21_000 + 4 + 16 + 2400 + 2 * 1900);
        assert_eq!(intrinsic_gas(&[1; 33], true, (0, 0), 0), 53_000 + 33 * 16 + 2 * 2);
        assert_eq!(floor_data_gas(&[0, 1]), 21_000 + 10 * 5);
    }
}
