//! Requests of one client, counted from the API server's audit log. The test cluster audits
//! only its user `audited` (metadata level, no bodies), and each contender runs as that user
//! alone, so every entry is the contender's own: exact, unlike server-wide metrics.
//!
//! A request is counted once: by its `ResponseComplete` entry, or for a watch by its
//! `ResponseStarted` entry (a watch may never complete while it is counted).

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use serde_json::Value;

/// Requests by `VERB resource[/subresource]`.
pub type Requests = BTreeMap<String, u64>;

/// A reading position in the audit log.
#[derive(Debug, Clone)]
pub struct AuditLog {
    path: PathBuf,
    offset: u64,
}

impl AuditLog {
    /// Starts reading at the current end of `path`: only later requests count.
    pub fn at_end(path: &Path) -> AuditLog {
        let offset = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        AuditLog {
            path: path.to_path_buf(),
            offset,
        }
    }

    /// The requests logged since the last call (or since [`AuditLog::at_end`]).
    pub fn take(&mut self) -> Requests {
        let mut out = Requests::new();
        let Ok(mut file) = std::fs::File::open(&self.path) else {
            return out;
        };
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        // Rotated (the server keeps 200 MB per file): start over in the new file.
        if len < self.offset {
            self.offset = 0;
        }
        if file.seek(SeekFrom::Start(self.offset)).is_err() {
            return out;
        }
        let mut text = String::new();
        if file.read_to_string(&mut text).is_err() {
            return out;
        }
        // Only whole lines; a partly written last line is read next time.
        let whole = text.rfind('\n').map_or(0, |i| i + 1);
        self.offset += whole as u64;
        for line in text[..whole].lines() {
            if let Some(key) = request_key(line) {
                *out.entry(key).or_default() += 1;
            }
        }
        out
    }
}

/// The `VERB resource[/subresource]` of one audit entry when it counts as a request.
fn request_key(line: &str) -> Option<String> {
    let entry: Value = serde_json::from_str(line).ok()?;
    let verb = entry.get("verb")?.as_str()?;
    let stage = entry.get("stage")?.as_str()?;
    let counted = match verb {
        "watch" => stage == "ResponseStarted",
        _ => stage == "ResponseComplete",
    };
    if !counted {
        return None;
    }
    let object = entry.get("objectRef");
    let resource = object
        .and_then(|o| o.get("resource"))
        .and_then(Value::as_str)
        .unwrap_or("-");
    let mut key = format!("{} {resource}", verb.to_uppercase());
    if let Some(sub) = object
        .and_then(|o| o.get("subresource"))
        .and_then(Value::as_str)
    {
        key.push('/');
        key.push_str(sub);
    }
    Some(key)
}

/// All requests in `requests`.
pub fn total(requests: &Requests) -> u64 {
    requests.values().sum()
}

/// Requests with verb `verb` (upper case).
pub fn with_verb(requests: &Requests, verb: &str) -> u64 {
    requests
        .iter()
        .filter(|(key, _)| key.split(' ').next() == Some(verb))
        .map(|(_, n)| n)
        .sum()
}

/// One line: `N (LIST a, WATCH b, GET c, writes d: PATCH x 3, CREATE y 2)`.
pub fn summary(requests: &Requests) -> String {
    const WRITES: [&str; 5] = ["CREATE", "UPDATE", "PATCH", "DELETE", "DELETECOLLECTION"];
    let writes: u64 = WRITES.iter().map(|v| with_verb(requests, v)).sum();
    let mut line = format!(
        "{} (LIST {}, WATCH {}, GET {}, writes {}",
        total(requests),
        with_verb(requests, "LIST"),
        with_verb(requests, "WATCH"),
        with_verb(requests, "GET"),
        writes
    );
    let mut by: Vec<(&String, &u64)> = requests
        .iter()
        .filter(|(key, _)| WRITES.contains(&key.split(' ').next().unwrap_or_default()))
        .collect();
    by.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    if !by.is_empty() {
        let parts: Vec<String> = by.iter().map(|(k, n)| format!("{k} {n}")).collect();
        line.push_str(": ");
        line.push_str(&parts.join(", "));
    }
    line.push(')');
    line
}

/// Adds `more` into `into`.
pub fn add(into: &mut Requests, more: &Requests) {
    for (key, n) in more {
        *into.entry(key.clone()).or_default() += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_each_request_once() {
        let lines = [
            r#"{"stage":"ResponseStarted","verb":"watch","objectRef":{"resource":"configmaps"}}"#,
            r#"{"stage":"ResponseComplete","verb":"watch","objectRef":{"resource":"configmaps"}}"#,
            r#"{"stage":"ResponseComplete","verb":"list","objectRef":{"resource":"secrets"}}"#,
            r#"{"stage":"ResponseComplete","verb":"patch","objectRef":{"resource":"kustomizations","subresource":"status"}}"#,
            r#"{"stage":"ResponseComplete","verb":"get","requestURI":"/version"}"#,
        ];
        let keys: Vec<_> = lines.iter().filter_map(|l| request_key(l)).collect();
        assert_eq!(
            keys,
            [
                "WATCH configmaps",
                "LIST secrets",
                "PATCH kustomizations/status",
                "GET -"
            ]
        );
    }

    #[test]
    fn reads_only_new_whole_lines() {
        let dir = std::env::temp_dir().join(format!("audit-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("audit.log");
        std::fs::write(&path, "").unwrap();
        let mut log = AuditLog::at_end(&path);
        let line =
            r#"{"stage":"ResponseComplete","verb":"get","objectRef":{"resource":"secrets"}}"#;
        std::fs::write(&path, format!("{line}\n{line}")).unwrap();
        assert_eq!(total(&log.take()), 1);
        std::fs::write(&path, format!("{line}\n{line}\n")).unwrap();
        assert_eq!(total(&log.take()), 1);
        assert_eq!(summary(&log.take()), "0 (LIST 0, WATCH 0, GET 0, writes 0)");
        let _ = std::fs::remove_dir_all(dir);
    }
}
