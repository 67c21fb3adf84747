//! Decoding raw transaction bytes as geth's `UnmarshalBinary` does, with geth's `rlp` words
//! for every malformation, and recovering the sender.
//!
//! Separate because it runs outside the service's lock, before the transaction meets any
//! state, and because its error words are a contract of their own (clients match on them).
//!
//! The sender is recovered here rather than by alloy's `recover_signer`, with the same
//! answers: alloy's k256 path verifies the signature against the key it has just recovered,
//! a check that cannot fail once the recovery succeeded (see [`recover_sender`]) and that
//! cost as much as the recovery itself, at every broadcast the fake received.

use alloy_consensus::transaction::{RlpEcdsaDecodableTx, SignableTransaction};
use alloy_consensus::{TxEnvelope, TxLegacy};
use alloy_eips::eip2718::{Decodable2718, Eip2718Error};
use alloy_primitives::{Address, B256, Signature, U256};
use k256::elliptic_curve::ops::{Invert, LinearCombination, Reduce};
use k256::elliptic_curve::point::DecompressPoint;
use k256::elliptic_curve::subtle::Choice;
use k256::{AffinePoint, FieldBytes, ProjectivePoint, Scalar};

/// A signed transaction, decoded and its sender recovered, before it meets the node's state.
/// Decoding and recovery happen outside the service's lock.
#[derive(Debug, Clone)]
pub(crate) struct Decoded {
    pub(crate) envelope: TxEnvelope,
    pub(crate) hash: B256,
    pub(super) raw_len: usize,
    pub(super) from: Result<Address, ()>,
}

impl Decoded {
    /// What the transaction asks for, named as its `tx.mined` effect names it: the recipient
    /// (lowercase 0x hex; null for a creation) and the value (a decimal string of wei).
    pub(crate) fn transfer_params(&self) -> serde_json::Value {
        transfer_params(&self.envelope)
    }
}

/// [`Decoded::transfer_params`] of a transaction whose sender is not needed.
pub(crate) fn transfer_params(envelope: &TxEnvelope) -> serde_json::Value {
    use alloy_consensus::Transaction;
    serde_json::json!({
        "to": envelope.to().map(|a| format!("{a:#x}")),
        "value": envelope.value().to_string(),
    })
}

/// Decodes raw transaction bytes as geth's `UnmarshalBinary` does, with its messages, and
/// recovers the sender.
pub(crate) fn decode_raw(raw: &[u8]) -> Result<Decoded, String> {
    let envelope = decode_envelope(raw)?;
    let hash = *envelope.tx_hash();
    let from = recover_sender(&envelope);
    Ok(Decoded { envelope, hash, raw_len: raw.len(), from })
}

/// Decodes raw transaction bytes as [`decode_raw`] does, without recovering the sender (the
/// costly part): for what only reads the transaction's fields.
pub(crate) fn decode_envelope(raw: &[u8]) -> Result<TxEnvelope, String> {
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
    decoded.map_err(|e| match e {
        Eip2718Error::RlpError(alloy_rlp::Error::InputTooShort) if list_fits(raw, type_name) => {
            // The list is all there; a field is missing from it.
            format!("rlp: too few elements for {type_name}")
        }
        Eip2718Error::RlpError(e) => rlp_message(&e, type_name),
        Eip2718Error::UnexpectedType(_) => "transaction type not supported".into(),
        // The error type is non-exhaustive.
        #[allow(unreachable_patterns)]
        _ => format!("rlp: {e}"),
    })
}

/// The sender of a signed transaction, exactly as alloy's `recover_signer` (k256 backend)
/// answers it: an `s` above half the group order is refused (EIP-2), as are `r` or `s` out of
/// range, an `r` that is no curve point's x and a key at infinity.
///
/// alloy goes through `VerifyingKey::recover_from_prehash`, which computes the key
/// `Q = r⁻¹(sR − zG)` and then verifies the signature against it. That check is left out:
/// for this `Q` the verification computes `z·s⁻¹·G + r·s⁻¹·Q = R`, whose x is `r`, so it
/// passes whenever the recovery did, and its one other refusal, a high `s`, was refused first.
/// A test compares both on valid, tampered and malformed signatures.
pub(crate) fn recover_sender(envelope: &TxEnvelope) -> Result<Address, ()> {
    let (signature, prehash) = match envelope {
        TxEnvelope::Legacy(tx) => (tx.signature(), tx.tx().signature_hash()),
        TxEnvelope::Eip2930(tx) => (tx.signature(), tx.tx().signature_hash()),
        TxEnvelope::Eip1559(tx) => (tx.signature(), tx.tx().signature_hash()),
        TxEnvelope::Eip4844(tx) => (tx.signature(), tx.tx().signature_hash()),
        TxEnvelope::Eip7702(tx) => (tx.signature(), tx.tx().signature_hash()),
    };
    recover_prehash(signature, &prehash)
}

/// `secp256k1n / 2`: the largest `s` EIP-2 allows.
const SECP256K1N_HALF: U256 = U256::from_be_bytes([
    0x7F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x5D,
    0x57, 0x6E, 0x73, 0x57, 0xA4, 0x50, 0x1D, 0xDF, 0xE9, 0x2F, 0x46, 0x68, 0x1B, 0x20, 0xA0,
]);

/// The address whose key signed `prehash` with `signature` (see [`recover_sender`]).
fn recover_prehash(signature: &Signature, prehash: &B256) -> Result<Address, ()> {
    if signature.s() > SECP256K1N_HALF {
        return Err(());
    }
    let mut bytes = [0u8; 64];
    bytes[..32].copy_from_slice(&signature.r().to_be_bytes::<32>());
    bytes[32..].copy_from_slice(&signature.s().to_be_bytes::<32>());
    // Refuses an `r` or `s` of zero or not below the group order. `s` is low (checked above),
    // so there is nothing to normalise and the parity stays as signed.
    let k256_signature = k256::ecdsa::Signature::from_slice(&bytes).map_err(|_| ())?;
    let (r, s) = k256_signature.split_scalars();
    let z = <Scalar as Reduce<k256::U256>>::reduce_bytes(&FieldBytes::from(prehash.0));
    let big_r = AffinePoint::decompress(&r.to_bytes(), Choice::from(u8::from(signature.v())));
    let big_r = Option::<AffinePoint>::from(big_r).ok_or(())?;
    // `r` is not zero, so its inverse exists.
    let r_inv = *Invert::invert(&r);
    let u1 = -(r_inv * z);
    let u2 = r_inv * *s;
    let key = ProjectivePoint::lincomb(&ProjectivePoint::GENERATOR, &u1, &ProjectivePoint::from(big_r), &u2);
    let key = k256::ecdsa::VerifyingKey::from_affine(key.to_affine()).map_err(|_| ())?;
    Ok(Address::from_public_key(&key))
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

#[cfg(test)]
mod recovery_tests {
    use alloy_consensus::crypto::secp256k1::recover_signer;
    use alloy_consensus::transaction::SignerRecoverable;
    use alloy_primitives::keccak256;
    use k256::ecdsa::SigningKey;

    use super::*;

    /// The group order.
    const N: U256 = U256::from_be_bytes([
        0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFE, 0xBA,
        0xAE, 0xDC, 0xE6, 0xAF, 0x48, 0xA0, 0x3B, 0xBF, 0xD2, 0x5E, 0x8C, 0xD0, 0x36, 0x41, 0x41,
    ]);

    fn alloy(signature: &Signature, prehash: B256) -> Result<Address, ()> {
        recover_signer(signature, prehash).map_err(|_| ())
    }

    /// Valid signatures, and every way of spoiling one, recover as alloy recovers them.
    #[test]
    fn recovery_answers_as_alloys() {
        let mut compared = 0;
        for i in 0u32..40 {
            let key = SigningKey::from_slice(keccak256(format!("key {i}")).as_slice()).unwrap();
            let prehash = keccak256(format!("message {i}"));
            let (sig, recid) = key.sign_prehash_recoverable(prehash.as_slice()).unwrap();
            let good = Signature::from((sig, recid));
            let (r, s, v) = (good.r(), good.s(), good.v());
            let noise = U256::from_be_bytes(keccak256(format!("noise {i}")).0);
            let variants = [
                good,
                Signature::new(r, s, !v),
                Signature::new(r, N - s, !v),
                Signature::new(r, N - s, v),
                Signature::new(r, SECP256K1N_HALF, v),
                Signature::new(r, SECP256K1N_HALF + U256::from(1), v),
                Signature::new(U256::ZERO, s, v),
                Signature::new(r, U256::ZERO, v),
                Signature::new(N, s, v),
                Signature::new(N + r, s, v),
                Signature::new(U256::MAX, s, v),
                Signature::new(noise, s, v),
                Signature::new(r, noise >> 2, v),
                Signature::new(noise >> 1, s, !v),
                Signature::new(r + U256::from(1), s, v),
            ];
            for (j, variant) in variants.iter().enumerate() {
                let other = keccak256(format!("other {i}"));
                for hash in [prehash, other] {
                    assert_eq!(recover_prehash(variant, &hash), alloy(variant, hash), "key {i} variant {j}");
                    compared += 1;
                }
            }
            let expected = Address::from_private_key(&key);
            assert_eq!(recover_prehash(&good, &prehash), Ok(expected));
        }
        assert_eq!(compared, 40 * 15 * 2);
    }

    /// A whole transaction: the sender is the envelope's own `recover_signer`.
    #[test]
    fn a_decoded_transfers_sender_is_alloys() {
        let key = "0x4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318";
        for nonce in 0..5 {
            let to = "0x00000000000000000000000000000000000000b1";
            let (raw, _) =
                crate::chain::sign_transfer(key, 31337, nonce, to, 1, 3_000_000_000, 1_000_000_000, 21_000)
                    .unwrap();
            let decoded = decode_raw(&raw).unwrap();
            assert_eq!(decoded.from, decoded.envelope.recover_signer().map_err(|_| ()));
            assert_eq!(decoded.from.map(|a| format!("{a:#x}")), Ok(crate::chain::address_of(key).unwrap()));
        }
    }
}
