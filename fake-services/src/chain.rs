//! Chain: an Ethereum JSON-RPC node.

use std::sync::Arc;

use crate::clock::ServiceClock;
use crate::contract::Contract;
use crate::core::{ApiError, ServiceCore, Shape};
use crate::wire::{Disposition, FakeRequest, FakeResponse};

/// The service's name in rules, ledgers and URLs files.
pub const NAME: &str = "chain";

/// The chain fake's objects.
#[derive(Debug, Default)]
pub struct ChainState {}

/// The chain fake. Cheap to clone; clones share state.
#[derive(Clone)]
pub struct Chain {
    core: Arc<ServiceCore<ChainState>>,
}

impl Chain {
    pub fn new(clock: ServiceClock, seed: u64) -> Self {
        let shape = Shape { error: error_body, stamp: |_, _| {} };
        Chain { core: Arc::new(ServiceCore::new(NAME, clock, seed, Contract::chain_default(), shape)) }
    }

    pub fn core(&self) -> &Arc<ServiceCore<ChainState>> {
        &self.core
    }

    pub async fn handle(&self, _req: FakeRequest) -> Disposition {
        Disposition::Respond(self.core.stamped_error(&ApiError::new(501, "not_implemented", "not yet")))
    }
}

pub fn error_body(error: &ApiError) -> FakeResponse {
    FakeResponse::json(error.status, &serde_json::json!({"error": error.message}))
}
