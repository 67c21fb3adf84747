//! Gas: what a transaction needs before any execution (its intrinsic gas across the forks,
//! and EIP-7623's calldata floor), and what it may cost at most.
//!
//! Pure functions of the transaction, shared by admission (`pool.rs`) and `eth_estimateGas`.

use alloy_consensus::{Transaction, TxEnvelope};
use alloy_primitives::U256;

/// geth's `tx.Cost()`: gas limit times the fee cap (the gas price for legacy), plus value.
pub(super) fn max_cost(envelope: &TxEnvelope) -> U256 {
    // A value near 2^256 must not wrap the cost into something affordable.
    (U256::from(envelope.gas_limit()) * U256::from(envelope.max_fee_per_gas()))
        .saturating_add(envelope.value())
}

/// Gas a transaction needs before any execution (Istanbul calldata prices, Shanghai init
/// code words, Berlin access lists, Prague authorizations).
pub(crate) fn intrinsic_gas(input: &[u8], create: bool, access: (u64, u64), authorizations: u64) -> u64 {
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
pub(crate) fn floor_data_gas(input: &[u8]) -> u64 {
    let zeros = input.iter().filter(|b| **b == 0).count() as u64;
    let tokens = zeros + 4 * (input.len() as u64 - zeros);
    21_000u64.saturating_add(tokens.saturating_mul(10))
}

fn access_counts(envelope: &TxEnvelope) -> (u64, u64) {
    envelope.access_list().map_or((0, 0), |list| {
        (list.0.len() as u64, list.0.iter().map(|item| item.storage_keys.len() as u64).sum())
    })
}

pub(super) fn gas_needed(envelope: &TxEnvelope) -> (u64, u64) {
    let input = envelope.input();
    let authorizations = envelope.authorization_list().map_or(0, |list| list.len() as u64);
    (
        intrinsic_gas(input, envelope.is_create(), access_counts(envelope), authorizations),
        floor_data_gas(input),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intrinsic_gas_follows_the_forks() {
        assert_eq!(intrinsic_gas(&[], false, (0, 0), 0), 21_000);
        assert_eq!(intrinsic_gas(&[0, 1], false, (1, 2), 0), 21_000 + 4 + 16 + 2400 + 2 * 1900);
        assert_eq!(intrinsic_gas(&[1; 33], true, (0, 0), 0), 53_000 + 33 * 16 + 2 * 2);
        assert_eq!(floor_data_gas(&[0, 1]), 21_000 + 10 * 5);
    }
}
