//! Namespace name patterns as reflector and replicator write them: a comma-separated list of
//! regular expressions, each matching a namespace name as a whole. The two tools anchor their
//! regexes differently, and each [`Dialect`] does what its tool does, so a list written for one of
//! them selects the same namespaces here.
//!
//! Rust's `regex` crate speaks RE2's syntax, as Go's `regexp` (replicator) does; .NET's
//! (reflector) also knows lookaround and backreferences, which RE2 does not. A list with an entry
//! that does not compile is refused as a whole
//! ([`Error::InvalidPattern`](crate::Error::InvalidPattern)): the peers skip such an entry, which
//! can silently select fewer namespaces (and prune their copies) or grant consent nobody meant. Compiling is bounded ([`COMPILED_SIZE_LIMIT`]), and matching is linear in the
//! name, so no annotation value can make it slow.
//!
//! ```
//! use conflux_copy_core::patterns::{Dialect, NamePatterns};
//!
//! let list = NamePatterns::parse("my-ns-1, namespace-[0-9]*", Dialect::Replicator)?;
//! assert!(list.matches("my-ns-1"));
//! assert!(list.matches("namespace-42"));
//! assert!(!list.matches("my-ns-10"), "anchored at both ends");
//! // A list with an entry that is not a regex is refused as a whole.
//! assert!(NamePatterns::parse("team-a, team-[", Dialect::Reflector).is_err());
//! # Ok::<(), conflux_copy_core::patterns::PatternError>(())
//! ```

use std::fmt;

use regex::{Regex, RegexBuilder};

/// How a tool anchors its namespace regexes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Dialect {
    /// reflector (emberstack): entries are trimmed and empty ones skipped; a name matches when the
    /// regex's first (leftmost) match is the whole name (.NET `Regex.Match` and a length check).
    Reflector,
    /// replicator (mittwald): entries are trimmed and anchored with `^` and `$` unless they already
    /// start or end with them (its `BuildStrictRegex`); an empty entry becomes `^$` and matches
    /// nothing.
    Replicator,
}

/// The most memory a compiled list may take. Far above any real list; a hostile one (nested
/// repetitions) is refused instead of growing.
pub const COMPILED_SIZE_LIMIT: usize = 1 << 20;

/// An entry that does not compile: the entry as written (trimmed, at most 64 characters of it) and
/// what the regex parser said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatternError {
    /// The entry.
    pub pattern: String,
    /// The parser's message (one line).
    pub message: String,
}

impl fmt::Display for PatternError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "'{}' is not a valid regular expression: {}",
            self.pattern, self.message
        )
    }
}

impl std::error::Error for PatternError {}

/// A parsed list: each entry as written and compiled.
#[derive(Clone)]
pub struct NamePatterns {
    dialect: Dialect,
    entries: Vec<(String, Regex)>,
}

impl NamePatterns {
    /// Parses an annotation value. An empty list (no entries at all) is valid: what it means
    /// (every namespace for reflector's lists) is the caller's rule.
    pub fn parse(value: &str, dialect: Dialect) -> Result<Self, PatternError> {
        let raw: Vec<&str> = match dialect {
            Dialect::Reflector => value
                .split(',')
                .map(str::trim)
                .filter(|e| !e.is_empty())
                .collect(),
            // Go's strings.Split of "" is [""]: an empty value is one entry, `^$`.
            Dialect::Replicator => value.split(',').map(str::trim).collect(),
        };
        let mut entries = Vec::with_capacity(raw.len());
        for entry in raw {
            let source = match dialect {
                Dialect::Reflector => entry.to_owned(),
                Dialect::Replicator => strict(entry),
            };
            let regex = RegexBuilder::new(&source)
                .size_limit(COMPILED_SIZE_LIMIT)
                .dfa_size_limit(COMPILED_SIZE_LIMIT)
                .build()
                .map_err(|e| PatternError {
                    pattern: shorten(entry),
                    message: one_line(&e.to_string()),
                })?;
            entries.push((entry.to_owned(), regex));
        }
        Ok(NamePatterns { dialect, entries })
    }

    /// True when the list has no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether any entry matches `name` as a whole, in the list's dialect.
    pub fn matches(&self, name: &str) -> bool {
        self.entries.iter().any(|(_, re)| match self.dialect {
            Dialect::Reflector => re.find(name).is_some_and(|m| m.len() == name.len()),
            Dialect::Replicator => re.is_match(name),
        })
    }

    /// The entries that name exactly one namespace (no regex metacharacter): listing
    /// `kube-system` by name lifts its default exclusion, a pattern does not.
    pub fn literals(&self) -> impl Iterator<Item = &str> {
        self.entries
            .iter()
            .map(|(entry, _)| entry.as_str())
            .filter(|entry| {
                // Namespace names are lowercase alphanumerics and `-`; none of them is a regex
                // metacharacter (outside a class).
                !entry.is_empty()
                    && entry
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            })
    }

    /// The entries as written.
    pub fn entries(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(entry, _)| entry.as_str())
    }
}

/// Two lists are equal when they were written the same in the same dialect.
impl PartialEq for NamePatterns {
    fn eq(&self, other: &Self) -> bool {
        self.dialect == other.dialect && self.entries().eq(other.entries())
    }
}

impl fmt::Debug for NamePatterns {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NamePatterns")
            .field("dialect", &self.dialect)
            .field("entries", &self.entries().collect::<Vec<_>>())
            .finish()
    }
}

/// replicator's `BuildStrictRegex`: `^` and `$` added unless already there.
fn strict(entry: &str) -> String {
    let mut out = String::with_capacity(entry.len() + 2);
    if !entry.starts_with('^') {
        out.push('^');
    }
    out.push_str(entry);
    if !entry.ends_with('$') {
        out.push('$');
    }
    out
}

/// At most 64 characters of a value, for messages (annotation values may be 256 KiB).
pub(crate) fn shorten(value: &str) -> String {
    const MAX: usize = 64;
    match value.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &value[..cut]),
        None => value.to_owned(),
    }
}

/// The regex parser's multi-line message (a caret diagram) as one line.
fn one_line(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .unwrap_or("invalid")
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reflector_dialect_table() {
        // (list, name, matches)
        let cases = [
            (
                "namespace-1,namespace-2,namespace-[0-9]*",
                "namespace-1",
                true,
            ),
            (
                "namespace-1,namespace-2,namespace-[0-9]*",
                "namespace-17",
                true,
            ),
            (
                "namespace-1,namespace-2,namespace-[0-9]*",
                "namespace-x",
                false,
            ),
            ("namespace-1", "namespace-10", false),
            ("namespace-1", "my-namespace-1", false),
            (" a , b ", "b", true),
            ("a,,b", "b", true),
            (".*", "anything", true),
            ("team-.*", "team-a", true),
            ("team-.*", "xteam-a", false),
            // The leftmost match must be the whole name: `a|ab` finds `a` in `ab` first.
            ("a|ab", "ab", false),
            ("ab|a", "ab", true),
            ("(dev|staging|prod)-[a-zA-Z0-9-_]+", "dev-shop", true),
        ];
        for (list, name, want) in cases {
            let parsed = NamePatterns::parse(list, Dialect::Reflector).unwrap();
            assert_eq!(parsed.matches(name), want, "{list:?} vs {name:?}");
        }
        assert!(
            NamePatterns::parse("", Dialect::Reflector)
                .unwrap()
                .is_empty()
        );
        assert!(
            NamePatterns::parse(" , ", Dialect::Reflector)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn replicator_dialect_table() {
        let cases = [
            ("my-ns-1,namespace-[0-9]*", "my-ns-1", true),
            ("my-ns-1,namespace-[0-9]*", "namespace-", true),
            ("my-ns-1,namespace-[0-9]*", "namespace-12", true),
            ("my-ns-1,namespace-[0-9]*", "my-ns-12", false),
            ("my-ns-1, namespace-[0-9]*", "namespace-3", true),
            (".*", "anything", true),
            ("^team-.*$", "team-a", true),
            // Already anchored at one end only: the other end is added.
            ("^team-", "team-a", false),
            ("team-.*$", "team-a", true),
            // An empty entry is `^$`: it matches no namespace.
            ("", "a", false),
            ("a,,b", "", true),
            // `^a|b$` keeps its own anchors, as replicator's code does.
            ("^a|b$", "ab-b", true),
        ];
        for (list, name, want) in cases {
            let parsed = NamePatterns::parse(list, Dialect::Replicator).unwrap();
            assert_eq!(parsed.matches(name), want, "{list:?} vs {name:?}");
        }
    }

    #[test]
    fn invalid_entries_refuse_the_list_with_a_short_one_line_message() {
        for dialect in [Dialect::Reflector, Dialect::Replicator] {
            let err = NamePatterns::parse("ok, team-[", dialect).unwrap_err();
            assert_eq!(err.pattern, "team-[");
            assert!(!err.message.contains('\n'), "{err}");
            // .NET lookaround is not RE2.
            assert!(NamePatterns::parse("(?!kube-).*", dialect).is_err());
            let long = format!("{}(", "x".repeat(500));
            let err = NamePatterns::parse(&long, dialect).unwrap_err();
            assert!(err.pattern.chars().count() <= 65, "{}", err.pattern);
        }
        // Hostile sizes are refused, not compiled.
        assert!(NamePatterns::parse("((a{100}){100}){100}", Dialect::Replicator).is_err());
    }

    #[test]
    fn literals_are_the_plain_names() {
        let parsed =
            NamePatterns::parse("kube-system, kube-.*, team-a", Dialect::Reflector).unwrap();
        assert_eq!(
            parsed.literals().collect::<Vec<_>>(),
            ["kube-system", "team-a"]
        );
        let empty = NamePatterns::parse("", Dialect::Replicator).unwrap();
        assert_eq!(empty.literals().count(), 0);
    }
}
