//! The reference executor: arrives with its own change (see ARCHITECTURE.md).
