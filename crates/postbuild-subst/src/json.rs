//! JSON lookups on the hot paths of `plan` and the audits.

use serde_json::Value;

/// [`Value::pointer`] without its two string allocations per token (a token is unescaped,
/// `~1` to `/` and `~0` to `~`, only when it holds a `~`): `plan` looks up fields of every
/// applied object for every Kustomization, and those allocations were a tenth of its time.
pub fn pointer<'v>(value: &'v Value, pointer: &str) -> Option<&'v Value> {
    if pointer.is_empty() {
        return Some(value);
    }
    let rest = pointer.strip_prefix('/')?;
    rest.split('/').try_fold(value, |target, token| {
        let unescaped;
        let token = if token.contains('~') {
            unescaped = token.replace("~1", "/").replace("~0", "~");
            unescaped.as_str()
        } else {
            token
        };
        match target {
            Value::Object(map) => map.get(token),
            Value::Array(list) => index(token).and_then(|i| list.get(i)),
            _ => None,
        }
    })
}

/// The string at `pointer` in `value`, or `""`.
pub fn text<'v>(value: &'v Value, at: &str) -> &'v str {
    pointer(value, at)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// A list index as RFC 6901 (and serde_json) reads it: digits, no sign, no leading zero.
fn index(token: &str) -> Option<usize> {
    if token.starts_with('+') || (token.starts_with('0') && token.len() != 1) {
        return None;
    }
    token.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finds_what_serde_json_finds() {
        let value = json!({"a": {"b/c": 1, "m~n": [10, 20], "": 3}, "list": [{"x": "y"}]});
        for at in [
            "",
            "/",
            "/a",
            "/a/b~1c",
            "/a/m~0n/1",
            "/a/m~0n/01",
            "/a/m~0n/+1",
            "/a/m~0n/2",
            "/list/0/x",
            "/list/x",
            "/a/",
            "a",
            "/missing/deeper",
        ] {
            assert_eq!(pointer(&value, at), value.pointer(at), "{at}");
        }
        assert_eq!(text(&value, "/list/0/x"), "y");
        assert_eq!(text(&value, "/a/b~1c"), "");
    }
}
