//! Structured logs with `tracing`, configured like Flux's `--log-level` and `--log-encoding`.

use std::io::IsTerminal;

use anyhow::Context;
use tracing_subscriber::EnvFilter;

/// Log encodings, as Flux names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogEncoding {
    /// One JSON object per line (the default, as in Flux's containers).
    Json,
    /// Human-readable lines.
    Console,
}

/// Installs the global subscriber. `level` is a Flux level (`debug`, `info`, `error`, `trace`) or
/// any `tracing` filter directive (`conflux=debug,kube=info`).
pub fn init(level: &str, encoding: LogEncoding) -> anyhow::Result<()> {
    let filter =
        EnvFilter::try_new(level).with_context(|| format!("invalid --log-level '{level}'"))?;
    // Logs go to stderr, as Flux's controllers write theirs; colour only on a terminal.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(true)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let result = match encoding {
        LogEncoding::Json => builder.json().flatten_event(true).try_init(),
        LogEncoding::Console => builder.try_init(),
    };
    // A second init (in-process tests) keeps the first subscriber; that is fine.
    if let Err(err) = result {
        tracing::debug!(%err, "tracing subscriber already installed");
    }
    Ok(())
}

/// Keys the JSON formatter writes itself (with `flatten_event`): an event field of one of these
/// names would appear twice in a line, and log pipelines keep only one.
pub const RESERVED_FIELDS: [&str; 7] = [
    "timestamp",
    "level",
    "target",
    "message",
    "span",
    "spans",
    "fields",
];

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::RESERVED_FIELDS;

    /// The Rust sources whose log lines conflux writes: every crate's `src`, and the examples.
    fn sources() -> Vec<PathBuf> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
            .expect("crates/")
            .filter_map(|e| e.ok().map(|e| e.path().join("src")))
            .collect();
        dirs.push(root.join("examples/src"));
        let mut files = Vec::new();
        while let Some(dir) = dirs.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for path in entries.filter_map(|e| e.ok().map(|e| e.path())) {
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|x| x == "rs") {
                    files.push(path);
                }
            }
        }
        files
    }

    /// The arguments of every `tracing` event macro call in `source`, split at top-level commas.
    fn event_fields(source: &str) -> Vec<Vec<String>> {
        let mut calls = Vec::new();
        for macro_name in ["trace!(", "debug!(", "info!(", "warn!(", "error!("] {
            let mut from = 0;
            while let Some(at) = source[from..].find(macro_name) {
                let start = from + at + macro_name.len();
                from = start;
                let before = source[..from - macro_name.len()].chars().next_back();
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                    continue;
                }
                let (mut depth, mut in_string, mut escaped) = (1usize, false, false);
                let mut args = vec![String::new()];
                for c in source[start..].chars() {
                    if in_string {
                        in_string = c != '"' || escaped;
                        escaped = c == '\\' && !escaped;
                    } else {
                        match c {
                            '"' => in_string = true,
                            '(' | '[' | '{' => depth += 1,
                            ')' | ']' | '}' => depth -= 1,
                            ',' if depth == 1 => {
                                args.push(String::new());
                                continue;
                            }
                            _ => {}
                        }
                    }
                    if depth == 0 {
                        break;
                    }
                    if let Some(last) = args.last_mut() {
                        last.push(c);
                    }
                }
                calls.push(args.into_iter().map(|a| a.trim().to_owned()).collect());
            }
        }
        calls
    }

    /// What is wrong with one argument of an event, if anything.
    fn problem(arg: &str) -> Option<String> {
        if arg.starts_with('?') {
            return Some(format!("`{arg}` logs a Rust Debug form"));
        }
        let (name, value) = arg.split_once('=')?;
        let (name, value) = (name.trim(), value.trim());
        if value.starts_with('=')
            || !name
                .chars()
                .all(|c| c.is_alphanumeric() || c == '_' || c == '.')
        {
            return None;
        }
        if RESERVED_FIELDS.contains(&name) {
            return Some(format!(
                "field `{name}` collides with the JSON formatter's own key"
            ));
        }
        if value.starts_with('?') {
            return Some(format!("field `{name}` logs a Rust Debug form"));
        }
        None
    }

    #[test]
    fn log_fields_are_never_debug_forms_nor_the_formatters_own_keys() {
        let mut problems = Vec::new();
        let files = sources();
        assert!(files.len() > 50, "the sources were found");
        for path in files {
            let source = std::fs::read_to_string(&path).expect("readable");
            // Test modules may log whatever helps them.
            let source = source.split("#[cfg(test)]").next().unwrap_or_default();
            for args in event_fields(source) {
                problems.extend(
                    args.iter()
                        .filter_map(|a| problem(a))
                        .map(|p| format!("{}: {p}", path.display())),
                );
            }
        }
        assert!(problems.is_empty(), "{problems:#?}");
    }

    #[test]
    fn the_checker_sees_what_it_must() {
        let calls = event_fields(
            r#"warn!(object = ?name, target = %key, "x, y"); tracing::info!(a = 1, ?b, c = %d("e,f"));"#,
        );
        let problems: Vec<String> = calls.iter().flatten().filter_map(|a| problem(a)).collect();
        assert_eq!(problems.len(), 3, "{problems:?}");
    }
}
