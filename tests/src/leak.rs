//! The Secret leak check: a marker that every end-to-end Secret can carry, in the shapes Secret
//! data takes (raw, base64, PEM), and a scanner that fails when any of them shows up in text that
//! leaves the process: logs, Events, statuses, metrics, error messages.
//!
//! The marker is unique per test process, so an old log cannot make a run fail (or pass). A
//! finding never prints the text around it: that would leak the marker into test output.

use std::collections::BTreeMap;
use std::sync::OnceLock;

/// The marker of this test process.
pub fn marker() -> &'static str {
    static MARKER: OnceLock<String> = OnceLock::new();
    MARKER.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        format!("cfxleak{}x{nanos}", std::process::id())
    })
}

/// Secret `stringData` holding the marker raw, as a PEM block and base64-encoded (a value that is
/// itself base64, as in a dockerconfigjson `auth`).
pub fn string_data() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("leak-raw".to_owned(), format!("password={}", marker())),
        ("leak-pem".to_owned(), pem()),
        ("leak-b64".to_owned(), base64(marker().as_bytes())),
    ])
}

/// The marker as a PEM private key.
pub fn pem() -> String {
    format!(
        "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
        base64(format!("{}{}", marker(), marker()).as_bytes())
    )
}

/// Every form in which the marker could leak: raw, the base64 of each value as the API carries it
/// in `data`, and the PEM body line.
pub fn forms() -> Vec<String> {
    let mut forms = vec![
        marker().to_owned(),
        base64(marker().as_bytes()),
        base64(format!("{}{}", marker(), marker()).as_bytes()),
    ];
    forms.extend(string_data().values().map(|v| base64(v.as_bytes())));
    forms
}

/// Where the marker was found in `text` (`what` names the text): `Err` with line numbers only.
pub fn scan(what: &str, text: &str) -> Result<(), String> {
    let forms = forms();
    let lines: Vec<usize> = text
        .lines()
        .enumerate()
        .filter(|(_, line)| forms.iter().any(|f| line.contains(f.as_str())))
        .map(|(i, _)| i + 1)
        .collect();
    if lines.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "Secret data leaked into {what}: {} line(s), numbers {:?} (content not printed)",
            lines.len(),
            &lines[..lines.len().min(20)]
        ))
    }
}

/// Panics when the marker is in `text`.
pub fn assert_clean(what: &str, text: &str) {
    if let Err(finding) = scan(what, text) {
        panic!("{finding}");
    }
}

/// For in-process end-to-end tests: captures every log event of this test process (all targets,
/// level debug, as JSON lines) into `target/e2e-logs/<binary>-<pid>.log`, once; returns the file.
/// [`assert_log_clean`] then scans it.
pub fn capture_logs() -> &'static std::path::Path {
    static LOG: OnceLock<std::path::PathBuf> = OnceLock::new();
    LOG.get_or_init(|| {
        let binary = std::env::current_exe()
            .ok()
            .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "test".to_owned());
        let dir = crate::repo_root().join("target/e2e-logs");
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join(format!("{binary}-{}.log", std::process::id()));
        if let Ok(file) = std::fs::File::create(&path) {
            let file = std::sync::Mutex::new(file);
            // Another subscriber already installed (by the code under test) keeps its place.
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new("debug"))
                .json()
                .with_writer(file)
                .with_ansi(false)
                .try_init();
        }
        path
    })
}

/// Panics when the marker is in the log captured by [`capture_logs`] (checked, for instance,
/// when a test's controllers stop; skipped while a test is already panicking).
pub fn assert_log_clean() {
    if std::thread::panicking() {
        return;
    }
    let text = std::fs::read_to_string(capture_logs()).unwrap_or_default();
    assert_clean("the captured debug log of this test process", &text);
}

/// The fixed marker of the `Debug` redaction tests of the library crates (a constant, so that
/// test values can be built from it at compile time).
pub const DEBUG_MARKER: &str = "conflux-leak-marker-7f3a";
/// `printf conflux-leak-marker-7f3a | base64`.
pub const DEBUG_MARKER_BASE64: &str = "Y29uZmx1eC1sZWFrLW1hcmtlci03ZjNh";
/// [`DEBUG_MARKER`] as a PEM private key.
pub const DEBUG_PEM: &str =
    "-----BEGIN PRIVATE KEY-----\nconflux-leak-marker-7f3a\n-----END PRIVATE KEY-----";

/// What a `Debug` output must never show: [`DEBUG_MARKER`] raw, base64-encoded and as the byte
/// list a derived `Debug` of `ByteString` prints (`conflux`), and the PEM header.
const DEBUG_FORBIDDEN: [(&str, &str); 4] = [
    ("the raw marker", DEBUG_MARKER),
    ("the base64 marker", DEBUG_MARKER_BASE64),
    ("the marker's bytes", "99, 111, 110, 102, 108, 117, 120"),
    ("the PEM header", "-----BEGIN PRIVATE KEY-----"),
];

/// Asserts that `{:?}` and `{:#?}` of `value` show none of the forms of [`DEBUG_MARKER`] and every
/// one of `shown`. A failure prints the output with the marker forms masked, so the marker stays
/// out of logs.
pub fn assert_debug_redacted(what: &str, value: &impl std::fmt::Debug, shown: &[&str]) {
    for (format, text) in [
        ("{:?}", format!("{value:?}")),
        ("{:#?}", format!("{value:#?}")),
    ] {
        let masked = DEBUG_FORBIDDEN
            .iter()
            .fold(text.clone(), |t, (_, form)| t.replace(form, "<MARKER>"));
        for (form_name, form) in DEBUG_FORBIDDEN {
            assert!(
                !text.contains(form),
                "{what}: {format} shows {form_name}:\n{masked}"
            );
        }
        for name in shown {
            assert!(
                text.contains(name),
                "{what}: {format} lacks {name:?}:\n{masked}"
            );
        }
    }
}

/// Standard base64 with padding (no dependency for one test helper).
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_standard() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
    }

    #[test]
    fn every_form_is_found_and_only_line_numbers_are_reported() {
        for form in forms() {
            let text = format!("ok\nvalue {form} here\n");
            let err = scan("text", &text).unwrap_err();
            assert!(err.contains("[2]"), "{err}");
            assert!(!err.contains(marker()), "the report leaks");
        }
        assert!(scan("text", "nothing\n").is_ok());
    }
}

/// The JSON formatter's own keys, which no log field may take.
const FORMATTER_KEYS: [&str; 5] = ["timestamp", "level", "message", "target", "span"];

/// Checks every JSON log line of `text` (conflux's `--log-encoding=json` output): no key appears
/// twice in a line (a field named like the formatter's own keys would), and no field value is a
/// Rust `Debug` form (`Some(…)`, `None`, `Ok(…)`, `Err(…)`, a quoted string inside a string).
/// Returns the first problem found.
pub fn check_log_fields(text: &str) -> Result<(), String> {
    for line in text.lines().filter(|l| l.starts_with('{')) {
        let Ok(serde_json::Value::Object(fields)) = serde_json::from_str::<serde_json::Value>(line)
        else {
            continue;
        };
        for key in FORMATTER_KEYS {
            let times = line.matches(&format!("\"{key}\":")).count();
            if times > 1 {
                return Err(format!("the key {key:?} appears {times} times in: {line}"));
            }
        }
        for (key, value) in &fields {
            if key == "message" {
                continue;
            }
            let Some(value) = value.as_str() else {
                continue;
            };
            let debug_form = value == "None"
                || ["Some(", "Ok(", "Err("]
                    .iter()
                    .any(|p| value.starts_with(p) && value.ends_with(')'))
                || (value.starts_with('"') && value.ends_with('"') && value.len() > 1);
            if debug_form {
                return Err(format!(
                    "field {key} is a Rust Debug form ({value}) in: {line}"
                ));
            }
        }
    }
    Ok(())
}

/// Panics with the problem [`check_log_fields`] finds in `what`.
pub fn assert_log_fields_clean(what: &str, text: &str) {
    if let Err(problem) = check_log_fields(text) {
        panic!("{what}: {problem}");
    }
}

#[cfg(test)]
mod log_field_tests {
    use super::check_log_fields;

    #[test]
    fn the_log_field_check_sees_duplicate_keys_and_debug_forms() {
        let good = r#"{"timestamp":"t","level":"INFO","message":"m","object":"ConfigMap/a/b","target":"conflux_copy_core"}"#;
        assert!(check_log_fields(good).is_ok());
        let twice = r#"{"timestamp":"t","level":"INFO","message":"m","target":"ConfigMap/a/b","target":"conflux_copy_core"}"#;
        assert!(check_log_fields(twice).is_err());
        let some = r#"{"timestamp":"t","level":"INFO","message":"m","object":"Some(\"pull\")"}"#;
        assert!(check_log_fields(some).is_err());
        let quoted = r#"{"timestamp":"t","level":"INFO","message":"m","name":"\"x\""}"#;
        assert!(check_log_fields(quoted).is_err());
        assert!(check_log_fields("plain text line").is_ok());
    }
}
