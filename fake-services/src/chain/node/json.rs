//! The JSON shapes the node answers in: quantities and hashes as geth writes them (lowercase
//! `0x` hex), blocks (mined and pending), transactions and receipts.
//!
//! Separate from the methods so that each shape is written once, whichever method answers it.

use alloy_consensus::Transaction;
use alloy_eips::Typed2718;
use alloy_primitives::{Address, B256, U256, keccak256};
use serde_json::{Map, Value, json};

use super::state::{ChainState, TxRecord, View};
use super::{BASE_FEE_WEI, BLOCK_GAS_LIMIT};

pub(crate) fn hex_address(address: &Address) -> String {
    format!("{address:#x}")
}

pub(super) fn hex_hash(hash: &B256) -> String {
    format!("{hash:#x}")
}

pub(super) fn qty(n: u64) -> Value {
    Value::String(format!("{n:#x}"))
}

pub(super) fn qty_u128(n: u128) -> Value {
    Value::String(format!("{n:#x}"))
}

pub(super) fn qty_big(n: U256) -> Value {
    Value::String(format!("{n:#x}"))
}

pub(super) fn hex_bytes(bytes: &[u8]) -> Value {
    Value::String(alloy_primitives::hex::encode_prefixed(bytes))
}

impl ChainState {
    pub(super) fn block_json(&self, number: u64, full: bool, view: View) -> Value {
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
    pub(super) fn pending_block_json(&self, full: bool, view: View, now_ms: u64) -> Value {
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

    pub(super) fn tx_json(&self, hash: &B256, tx: &TxRecord, view: View) -> Value {
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

    pub(super) fn receipt_json(&self, hash: &B256, tx: &TxRecord) -> Value {
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
    fn quantities_and_addresses_are_lowercase_0x_hex() {
        assert_eq!(qty(0), json!("0x0"));
        assert_eq!(qty_big(U256::ZERO), json!("0x0"));
        assert_eq!(qty_big(U256::from(255)), json!("0xff"));
        let address: Address = "0xAbCdEf0000000000000000000000000000000001".parse().unwrap();
        assert_eq!(hex_address(&address), "0xabcdef0000000000000000000000000000000001");
        assert_eq!(EMPTY_BLOOM.len(), 2 + 512);
    }
}
