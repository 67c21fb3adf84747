//! Report renderers: arrive with their own change (see ARCHITECTURE.md).
