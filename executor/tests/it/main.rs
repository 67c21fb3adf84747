//! The reference executor against real fakes over loopback HTTP: as a library driven by a rig
//! (`rig.rs`: decisions, faults, lineage, payloads) and as the `twice-executor` process
//! (`process.rs` and `world.rs`: crashes at every hook, fencing, the protocol). The process
//! tests need the binary: `cargo test --workspace` builds it beside the tests, and `cargo xtask
//! test` names its folder in `TWICE_BIN_DIR`. `tests/it` of the workspace includes
//! `process.rs` and `world.rs` too, for its own tests of the binary.

mod crash;
mod decisions;
mod faults;
mod fencing;
mod lineage;
mod payload;
mod process;
mod protocol;
mod rig;
mod world;
