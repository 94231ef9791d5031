//! References from Flux objects (and copies) to ConfigMaps and Secrets (DESIGN.md 3.2).
