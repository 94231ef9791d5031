//! The reverse index: ConfigMap/Secret key to the objects that reference it (DESIGN.md 3.3).
