//! When a ConfigMap/Secret event must wake its referrers (DESIGN.md 3.3).
