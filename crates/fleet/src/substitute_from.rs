//! `conflux plan --substitute-from`: substitution values that live outside Git (a cluster
//! settings ConfigMap made by Terraform, a Secret from a vault) given to the plan, so the fleet
//! is built and audited with them.
//!
//! A value is either `[KIND/[NAMESPACE/]]NAME=FILE`, a dotenv file (`KEY=VALUE` lines; `#`
//! comments, blank lines and a leading `export ` ignored; one pair of surrounding quotes
//! stripped) that becomes the ConfigMap (the default kind) or Secret `NAME` in `NAMESPACE`
//! (`flux-system` by default), or a plain `FILE` of ConfigMap and Secret manifests. Values are
//! never printed: errors name the file and line only.
//!
//! ```
//! use conflux_fleet::substitute_from::{dotenv, object};
//!
//! let vars = dotenv("# cluster\nCLUSTER=prod\nexport REGION=\"eu-west-1\"\n").unwrap();
//! let secret = object("Secret", "flux-system", "cluster-secrets", &vars);
//! assert_eq!(secret["data"]["CLUSTER"], "cHJvZA==");
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde_json::{Map, Value, json};

use crate::kustomize::{Object, read_documents};
use crate::{Error, Result};

/// The namespace of a source named without one: Flux's own.
pub const DEFAULT_NAMESPACE: &str = "flux-system";

/// The objects one `--substitute-from` value stands for, each with the flag as its file.
pub fn objects(spec: &str) -> Result<Vec<Object>> {
    let label = format!("--substitute-from {spec}");
    let bad = |reason: String| Error::SubstituteFrom {
        spec: spec.to_owned(),
        reason,
    };
    let at = |object: Value| Object {
        object,
        file: Some(label.clone()),
    };
    let Some((source, file)) = spec.split_once('=') else {
        // A file of manifests: its ConfigMaps and Secrets.
        let documents = read_documents(Path::new(spec)).map_err(|e| bad(e.to_string()))?;
        let configs: Vec<Object> = documents
            .into_iter()
            .filter(|d| {
                d.get("apiVersion").and_then(Value::as_str) == Some("v1")
                    && matches!(
                        d.get("kind").and_then(Value::as_str),
                        Some("ConfigMap" | "Secret")
                    )
            })
            .map(at)
            .collect();
        if configs.is_empty() {
            return Err(bad("no ConfigMap or Secret in it".to_owned()));
        }
        return Ok(configs);
    };
    let parts: Vec<&str> = source.split('/').collect();
    let (kind, namespace, name) = match parts.as_slice() {
        [name] => ("ConfigMap", DEFAULT_NAMESPACE, *name),
        [kind, name] => (*kind, DEFAULT_NAMESPACE, *name),
        [kind, namespace, name] => (*kind, *namespace, *name),
        _ => return Err(bad("expected [KIND/[NAMESPACE/]]NAME=FILE".to_owned())),
    };
    if !matches!(kind, "ConfigMap" | "Secret") || name.is_empty() || namespace.is_empty() {
        return Err(bad(
            "the source is a ConfigMap or a Secret with a name: [KIND/[NAMESPACE/]]NAME=FILE"
                .to_owned(),
        ));
    }
    let path = PathBuf::from(file);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| bad(Error::io(path.display(), e).to_string()))?;
    let vars = dotenv(&text).map_err(|line| {
        bad(format!(
            "{}: line {line} is not KEY=VALUE (a dotenv file)",
            path.display()
        ))
    })?;
    Ok(vec![at(object(kind, namespace, name, &vars))])
}

/// The pairs of a dotenv text, in order of the keys; `Err(line)` (1-based) for a line that is
/// not `KEY=VALUE`.
pub fn dotenv(text: &str) -> std::result::Result<BTreeMap<String, String>, usize> {
    let mut vars = BTreeMap::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line).trim_start();
        let (key, value) = line.split_once('=').ok_or(index + 1)?;
        let key = key.trim();
        if key.is_empty() {
            return Err(index + 1);
        }
        let value = value.trim();
        let value = ['"', '\'']
            .iter()
            .find_map(|q| {
                value
                    .strip_prefix(*q)
                    .and_then(|v| v.strip_suffix(*q))
                    .filter(|_| value.len() >= 2)
            })
            .unwrap_or(value);
        vars.insert(key.to_owned(), value.to_owned());
    }
    Ok(vars)
}

/// The ConfigMap (`data`) or Secret (`data`, base64) `namespace/name` holding `vars`.
pub fn object(kind: &str, namespace: &str, name: &str, vars: &BTreeMap<String, String>) -> Value {
    let data: Map<String, Value> = vars
        .iter()
        .map(|(k, v)| {
            let value = if kind == "Secret" {
                base64::engine::general_purpose::STANDARD.encode(v)
            } else {
                v.clone()
            };
            (k.clone(), Value::String(value))
        })
        .collect();
    json!({"apiVersion": "v1", "kind": kind,
           "metadata": {"name": name, "namespace": namespace}, "data": data})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dotenv_file_becomes_the_named_source() {
        let dir = std::env::temp_dir().join(format!("conflux-subst-from-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let file = dir.join("settings.env");
        std::fs::write(
            &file,
            "# settings\n\nCLUSTER=prod\nexport DOMAIN='example.com'\n",
        )
        .expect("write");
        let spec = format!("ConfigMap/cluster-settings={}", file.display());
        let made = objects(&spec).expect("read");
        assert_eq!(
            made[0].object,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "cluster-settings", "namespace": "flux-system"},
                   "data": {"CLUSTER": "prod", "DOMAIN": "example.com"}})
        );
        assert_eq!(
            made[0].file.as_deref(),
            Some(format!("--substitute-from {spec}").as_str())
        );

        // A bad line is named by its number, never by its text (it may hold a secret).
        std::fs::write(&file, "A=1\nsecret-value-without-key\n").expect("write");
        let err = objects(&format!("Secret/apps/s={}", file.display()))
            .expect_err("refused")
            .to_string();
        assert!(
            err.contains("line 2") && !err.contains("secret-value"),
            "{err}"
        );

        // Not a ConfigMap or Secret.
        assert!(objects(&format!("Deployment/x={}", file.display())).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
