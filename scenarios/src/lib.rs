//! Scenario model, TOML format and generators: arrive with their own change (see ARCHITECTURE.md).
