//! The chain account's key and the transfers it signs.
//!
//! A transfer is signed once, before its first broadcast, and the signed bytes are what the
//! intent log keeps: every later broadcast sends exactly those bytes, so that a transfer can
//! be mined at most once (its nonce is used once) whatever happens to the answers.

use alloy_consensus::{SignableTransaction, TxEip1559};
use alloy_primitives::{Address, Bytes, Signature, TxKind, U256, hex};
use k256::ecdsa::SigningKey;

/// Gas of a plain value transfer to an account without code.
pub const TRANSFER_GAS: u64 = 21_000;

/// Why a key or a transfer could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SigningError {
    #[error("the chain private key is not 32 bytes of 0x-prefixed hex")]
    KeyFormat,
    #[error("the chain private key is not a valid secp256k1 scalar")]
    KeyValue,
    #[error("the recipient {0} is not a 0x address of 20 bytes")]
    Recipient(String),
    #[error("signing failed: {0}")]
    Sign(String),
}

/// The private key of the chain account, and its address.
#[derive(Clone)]
pub struct ChainKey {
    key: SigningKey,
    address: String,
}

impl std::fmt::Debug for ChainKey {
    /// The address only: a key must not end up in logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChainKey").field("address", &self.address).finish_non_exhaustive()
    }
}

impl ChainKey {
    /// Reads a private key written as `0x` and 64 hex digits.
    pub fn parse(text: &str) -> Result<ChainKey, SigningError> {
        let digits = text.trim().strip_prefix("0x").ok_or(SigningError::KeyFormat)?;
        if digits.len() != 64 {
            return Err(SigningError::KeyFormat);
        }
        let bytes = hex::decode(digits).map_err(|_| SigningError::KeyFormat)?;
        let key = SigningKey::from_slice(&bytes).map_err(|_| SigningError::KeyValue)?;
        let address = lower(&Address::from_private_key(&key));
        Ok(ChainKey { key, address })
    }

    /// The account's address: `0x` and 40 lowercase hex digits.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Signs an EIP-1559 value transfer of `TRANSFER_GAS`.
    pub fn sign_transfer(&self, transfer: &Transfer) -> Result<SignedTransfer, SigningError> {
        let to: Address = transfer.to.parse().map_err(|_| SigningError::Recipient(transfer.to.clone()))?;
        let tx = TxEip1559 {
            chain_id: transfer.chain_id,
            nonce: transfer.nonce,
            gas_limit: TRANSFER_GAS,
            max_fee_per_gas: transfer.max_fee_per_gas_wei,
            max_priority_fee_per_gas: transfer.max_priority_fee_per_gas_wei,
            to: TxKind::Call(to),
            value: U256::from(transfer.value_wei),
            access_list: Default::default(),
            input: Bytes::new(),
        };
        let digest = tx.signature_hash();
        let (signature, recovery) = self
            .key
            .sign_prehash_recoverable(digest.as_slice())
            .map_err(|e| SigningError::Sign(e.to_string()))?;
        let signed = tx.into_signed(Signature::from_signature_and_parity(signature, recovery.is_y_odd()));
        let mut raw = Vec::with_capacity(signed.eip2718_encoded_length());
        signed.eip2718_encode(&mut raw);
        Ok(SignedTransfer {
            raw: hex::encode_prefixed(&raw),
            hash: hex::encode_prefixed(signed.hash().as_slice()),
            nonce: transfer.nonce,
            from: self.address.clone(),
        })
    }
}

/// What a transfer is signed with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transfer {
    pub chain_id: u64,
    pub nonce: u64,
    pub to: String,
    pub value_wei: u128,
    pub max_fee_per_gas_wei: u128,
    pub max_priority_fee_per_gas_wei: u128,
}

/// A signed transfer: the bytes every broadcast sends, and what identifies it on the chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedTransfer {
    /// The EIP-2718 encoding, `0x`-prefixed hex: what `eth_sendRawTransaction` takes.
    pub raw: String,
    /// The transaction hash, `0x`-prefixed lowercase hex.
    pub hash: String,
    pub nonce: u64,
    /// The sender, lowercase.
    pub from: String,
}

fn lower(address: &Address) -> String {
    hex::encode_prefixed(address.as_slice())
}

#[cfg(test)]
mod tests {
    use alloy_consensus::TxEnvelope;
    use alloy_consensus::transaction::SignerRecoverable;
    use alloy_primitives::keccak256;

    use super::*;

    fn key() -> ChainKey {
        ChainKey::parse(&hex::encode_prefixed(keccak256(b"twice chain account 1"))).unwrap()
    }

    #[test]
    fn a_signed_transfer_decodes_to_what_was_signed_from_the_keys_address() {
        use alloy_eips::eip2718::Decodable2718;
        let key = key();
        let transfer = Transfer {
            chain_id: 31337,
            nonce: 7,
            to: "0x00000000000000000000000000000000000000b1".into(),
            value_wei: 1_000,
            max_fee_per_gas_wei: 2_000_000_000,
            max_priority_fee_per_gas_wei: 1_000_000_000,
        };
        let signed = key.sign_transfer(&transfer).unwrap();
        let raw = hex::decode(&signed.raw).unwrap();
        let envelope = TxEnvelope::decode_2718_exact(&raw).unwrap();
        assert_eq!(hex::encode_prefixed(envelope.tx_hash().as_slice()), signed.hash);
        assert_eq!(lower(&envelope.recover_signer().unwrap()), key.address());
        assert_eq!(signed.from, key.address());
        assert_eq!(signed.nonce, 7);
        // The same transfer signs to the same bytes (RFC 6979 nonces): a re-sign is no
        // different transaction, but the executor never re-signs anyway.
        assert_eq!(key.sign_transfer(&transfer).unwrap(), signed);
    }

    #[test]
    fn bad_keys_say_what_is_wrong() {
        assert_eq!(ChainKey::parse("abc").unwrap_err(), SigningError::KeyFormat);
        assert_eq!(ChainKey::parse(&format!("0x{}", "zz".repeat(32))).unwrap_err(), SigningError::KeyFormat);
        assert_eq!(ChainKey::parse(&format!("0x{}", "00".repeat(32))).unwrap_err(), SigningError::KeyValue);
        assert!(!format!("{:?}", key()).contains(&hex::encode(keccak256(b"twice chain account 1"))));
    }
}
