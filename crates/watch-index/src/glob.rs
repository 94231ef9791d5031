//! Name globs: `*` matches any run of characters (including none), `?` exactly one, everything
//! else itself. Used by `copy.conflux.dev/allowed-namespaces`, a ConfigSync's `namespaces` /
//! `excludeNamespaces` and the `configs` block of conflux's policies
//! ([`ConfigSelector`](crate::config_selector::ConfigSelector)). Object names are ASCII, so
//! matching works on bytes and never allocates.

/// True when `name` matches `pattern` as a whole.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let (p, n) = (pattern.as_bytes(), name.as_bytes());
    let (mut pi, mut ni) = (0, 0);
    // Where the last `*` was and how much of `name` it has swallowed so far: on a mismatch we let
    // that star take one more byte and retry (linear backtracking, no recursion).
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        match p.get(pi) {
            Some(b'*') => {
                star = Some((pi, ni));
                pi += 1;
            }
            Some(&c) if c == b'?' || c == n[ni] => {
                pi += 1;
                ni += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    pi = sp + 1;
                    ni = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// True when any of `patterns` matches `name`.
pub fn any_match<'a>(patterns: impl IntoIterator<Item = &'a str>, name: &str) -> bool {
    patterns.into_iter().any(|p| glob_match(p, name))
}

/// True for a pattern without `*` or `?`: it names exactly one namespace.
pub fn is_literal(pattern: &str) -> bool {
    !pattern.contains(['*', '?'])
}

/// Why `pattern` can never match an object name, if it cannot: it is empty, or holds a character
/// other than `*`, `?` and those of a DNS subdomain (`a`-`z`, `0`-`9`, `-`, `.`). Namespace and
/// ConfigMap/Secret names are DNS subdomains at most, so such a pattern is a mistake, not a rule.
pub fn check(pattern: &str) -> Result<(), &'static str> {
    if pattern.is_empty() {
        return Err("an empty pattern matches no name");
    }
    if pattern.len() > 253 {
        return Err("longer than any object name (253 characters)");
    }
    let allowed = |c: u8| matches!(c, b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'*' | b'?');
    if !pattern.bytes().all(allowed) {
        return Err("only a-z, 0-9, '-', '.' and the wildcards '*' and '?' can match a name");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_table() {
        let cases = [
            ("*", "", true),
            ("*", "anything", true),
            ("", "", true),
            ("", "a", false),
            ("team-*", "team-a", true),
            ("team-*", "team-", true),
            ("team-*", "teams", false),
            ("team-?", "team-a", true),
            ("team-?", "team-ab", false),
            ("*-prod", "shop-prod", true),
            ("*-prod", "shop-prod-2", false),
            ("a*b*c", "aXXbYYc", true),
            ("a*b*c", "aXXbYY", false),
            ("a*b", "abab", true),
            ("**", "x", true),
            ("?", "", false),
            ("exact", "exact", true),
            ("exact", "exactly", false),
            ("*a*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", false),
        ];
        for (pattern, name, want) in cases {
            assert_eq!(glob_match(pattern, name), want, "{pattern:?} vs {name:?}");
        }
    }

    #[test]
    fn literal_patterns() {
        assert!(is_literal("kube-system"));
        assert!(!is_literal("kube-*"));
        assert!(!is_literal("team-?"));
        assert!(any_match(["x", "team-*"], "team-a"));
        assert!(!any_match([], "team-a"));
    }

    #[test]
    fn checked_patterns() {
        assert!(check("team-*").is_ok());
        assert!(check("registry-?.x").is_ok());
        assert!(check("").is_err());
        assert!(check("Team-*").is_err());
        assert!(check("a/b").is_err());
        assert!(check("[ab]").is_err());
        assert!(check(&"a".repeat(254)).is_err());
    }

    /// The obvious recursive definition, to check the iterative one against.
    fn reference(p: &[u8], n: &[u8]) -> bool {
        match (p.first(), n.first()) {
            (None, _) => n.is_empty(),
            (Some(b'*'), _) => reference(&p[1..], n) || (!n.is_empty() && reference(p, &n[1..])),
            (Some(_), None) => false,
            (Some(&c), Some(&d)) => (c == b'?' || c == d) && reference(&p[1..], &n[1..]),
        }
    }

    proptest::proptest! {
        #[test]
        fn matches_reference(pattern in "[ab*?-]{0,8}", name in "[ab-]{0,10}") {
            proptest::prop_assert_eq!(
                glob_match(&pattern, &name),
                reference(pattern.as_bytes(), name.as_bytes())
            );
        }
    }
}
