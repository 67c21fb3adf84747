//! The chain accounts every world of `twice serve` funds: the first accounts of the
//! mnemonic that local Ethereum nodes (Hardhat, Anvil) fund by default, so that an
//! application or a wallet set up for those nodes can send a transaction at once. Their
//! private keys are public knowledge: test keys, never to be used on a real chain.

use serde_json::{Value, json};

use fake_services::chain::Chain;
use scenarios::model::ETHER_WEI;

/// What each dev account is funded with: 10 000 ether, as the local nodes do.
pub const DEV_ACCOUNT_BALANCE_WEI: u128 = 10_000 * ETHER_WEI;

/// A funded dev account: its address (checksummed, as the local nodes print it) and its
/// private key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DevAccount {
    pub address: &'static str,
    pub private_key: &'static str,
}

/// The first three accounts of the mnemonic "test test test test test test test test test
/// test test junk" (derivation path m/44'/60'/0'/0/i).
pub const DEV_ACCOUNTS: [DevAccount; 3] = [
    DevAccount {
        address: "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266",
        private_key: "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80",
    },
    DevAccount {
        address: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
        private_key: "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
    },
    DevAccount {
        address: "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",
        private_key: "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a",
    },
];

/// Funds every dev account on `chain` with [`DEV_ACCOUNT_BALANCE_WEI`].
pub fn fund(chain: &Chain) {
    for account in DEV_ACCOUNTS {
        // The addresses are constants that a unit test parses: seeding cannot refuse them.
        if let Err(e) = chain.seed_account(account.address, DEV_ACCOUNT_BALANCE_WEI) {
            tracing::error!(target: "twice::serve", address = account.address, error = %e, "dev account not funded");
        }
    }
}

/// The dev accounts as the URLs file and `GET /__twice/scenario` list them.
pub fn json() -> Value {
    let accounts: Vec<Value> = DEV_ACCOUNTS
        .iter()
        .map(|a| {
            json!({
                "address": a.address,
                "private_key": a.private_key,
                "balance_wei": DEV_ACCOUNT_BALANCE_WEI.to_string(),
            })
        })
        .collect();
    Value::Array(accounts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_key_is_its_address() {
        for account in DEV_ACCOUNTS {
            let derived = fake_services::chain::address_of(account.private_key).unwrap();
            assert_eq!(derived.to_lowercase(), account.address.to_lowercase(), "{account:?}");
        }
    }
}
