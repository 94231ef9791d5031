//! go-yaml v2 compatible YAML around substitution: [`emit`] is `sigs.k8s.io/yaml.JSONToYAML`,
//! [`parse`] is `sigs.k8s.io/yaml.YAMLToJSON` (YAML 1.1 resolution).

pub mod emit;
pub mod parse;
