//! Files: an S3-style object store (path style).

use std::sync::Arc;

use crate::clock::ServiceClock;
use crate::contract::Contract;
use crate::core::{ApiError, ServiceCore, Shape};
use crate::wire::{Disposition, FakeRequest, FakeResponse};

/// The service's name in rules, ledgers and URLs files.
pub const NAME: &str = "files";

/// The files fake's objects.
#[derive(Debug, Default)]
pub struct FilesState {}

/// The files fake. Cheap to clone; clones share state.
#[derive(Clone)]
pub struct Files {
    core: Arc<ServiceCore<FilesState>>,
}

impl Files {
    pub fn new(clock: ServiceClock, seed: u64) -> Self {
        let shape = Shape { error: error_body, stamp: |_, _| {} };
        Files { core: Arc::new(ServiceCore::new(NAME, clock, seed, Contract::files_default(), shape)) }
    }

    pub fn core(&self) -> &Arc<ServiceCore<FilesState>> {
        &self.core
    }

    pub async fn handle(&self, _req: FakeRequest) -> Disposition {
        Disposition::Respond(self.core.stamped_error(&ApiError::new(501, "not_implemented", "not yet")))
    }
}

pub fn error_body(error: &ApiError) -> FakeResponse {
    FakeResponse::json(error.status, &serde_json::json!({"error": error.message}))
}
