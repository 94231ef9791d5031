//! go-yaml v2 compatible YAML around substitution: [`emit`] is `sigs.k8s.io/yaml.JSONToYAML`,
//! [`parse`] is `sigs.k8s.io/yaml.YAMLToJSON`. What both directions share lives beside them:
//! YAML 1.1 resolution (`resolve`), scalar text rules of the scanner (`scan`), Go's float
//! formatting (`gofmt`) and Go's timestamps ([`timestamp`]).

pub mod emit;
mod gofmt;
pub mod parse;
mod resolve;
mod scan;
pub mod timestamp;
