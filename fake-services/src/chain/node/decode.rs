//! Decoding raw transaction bytes as geth's `UnmarshalBinary` does, with geth's `rlp` words
//! for every malformation, and recovering the sender.
//!
//! Separate because it runs outside the service's lock, before the transaction meets any
//! state, and because its error words are a contract of their own (clients match on them).

use alloy_consensus::transaction::{RlpEcdsaDecodableTx, SignerRecoverable};
use alloy_consensus::{TxEnvelope, TxLegacy};
use alloy_eips::eip2718::{Decodable2718, Eip2718Error};
use alloy_primitives::{Address, B256};

/// A signed transaction, decoded and its sender recovered, before it meets the node's state.
/// Decoding and recovery happen outside the service's lock.
#[derive(Debug, Clone)]
pub struct Decoded {
    pub(crate) envelope: TxEnvelope,
    pub(crate) hash: B256,
    pub(super) raw_len: usize,
    pub(super) from: Result<Address, ()>,
}

impl Decoded {
    /// What the transaction asks for, named as its `tx.mined` effect names it: the recipient
    /// (lowercase 0x hex; null for a creation) and the value (a decimal string of wei).
    pub fn transfer_params(&self) -> serde_json::Value {
        use alloy_consensus::Transaction;
        serde_json::json!({
            "to": self.envelope.to().map(|a| format!("{a:#x}")),
            "value": self.envelope.value().to_string(),
        })
    }
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
