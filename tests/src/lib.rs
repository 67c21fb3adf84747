//! End-to-end tests across crates live in tests/it.
