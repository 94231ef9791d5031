//! `YAMLToJSON`: the go-yaml v2 parser with YAML 1.1 resolution, then Go `json.Marshal`.
