//! go-yaml v2 compatible YAML around substitution: [`emit`] is `sigs.k8s.io/yaml.JSONToYAML`,
//! [`parse`] is `sigs.k8s.io/yaml.YAMLToJSON`. Both type plain scalars with the one YAML 1.1
//! resolver in `resolve`.

pub mod emit;
pub mod parse;
mod resolve;
