//! The one way kustomize's last step after substitution fails on a resource that `YAMLToJSON`
//! accepted: `res.UnmarshalJSON` (kyaml) writes the resource with yaml.v3 and parses it back.
//! yaml.v3 writes a multi-line string as a literal block (`|-`) even when it starts with a tab
//! (yaml.v2 quotes it), with no indentation indicator, and its own scanner then refuses the
//! block: `found a tab character where an indentation space is expected`.
//!
//! The line in the message is where yaml.v3 put the block. It is counted here from yaml.v3's
//! layout: keys in Go's order, one line per scalar, a line per nested key or item, the block's
//! own lines. yaml.v3 also folds plain and quoted strings longer than 80 columns; such strings
//! before the block are counted as one line, so the line can then differ from Flux's.

use serde_json::Value;

use super::emitter::is_printable;
use super::key_order::sorted_order;

/// The line of kustomize's `UnmarshalJSON: yaml: line N: found a tab character where an
/// indentation space is expected` for `resource`, when kustomize fails on it; else `None`.
pub(crate) fn tab_led_block_line(resource: &Value) -> Option<usize> {
    let found = walk(resource)?;
    // yaml.v3 reports the block's start (0-based, + 1), unless that is line 0: then the line
    // where the tab was found, the block's first content line (0-based 1, + 1).
    Some(if found == 0 { 2 } else { found + 1 })
}

/// Whether yaml.v3 writes `s` as a literal block that its scanner refuses: multi-line, led by
/// a tab, and a block is allowed.
fn refused(s: &str) -> bool {
    s.starts_with('\t') && s.contains('\n') && block_allowed(s)
}

/// yaml.v3's analysis of a scalar: a block is not allowed with a trailing space, a space before
/// a line break, or a character it cannot print (a tab it can).
fn block_allowed(s: &str) -> bool {
    let is_break = |c: char| matches!(c, '\n' | '\r' | '\u{85}' | '\u{2028}' | '\u{2029}');
    let mut previous_space = false;
    for c in s.chars() {
        if (previous_space && is_break(c)) || (c != '\t' && !is_printable(c)) {
            return false;
        }
        previous_space = c == ' ';
    }
    !s.ends_with(' ')
}

/// The lines a scalar `s` takes: one, or a literal block's indicator and its lines.
fn scalar_lines(s: &str) -> usize {
    if !s.contains('\n') || !block_allowed(s) {
        return 1;
    }
    let breaks = s.matches('\n').count();
    1 + if s.ends_with('\n') {
        breaks
    } else {
        breaks + 1
    }
}

/// Lays `resource` out as yaml.v3 does, line by line: the line of a refused block's indicator.
fn walk(resource: &Value) -> Option<usize> {
    // A loop over what is left to write, next first (not recursion: resources may nest deeper
    // than the stack allows). `true` for a list item: a map or list item's first entry shares
    // its dash's line, where under a key it starts on the next line.
    let mut pending: Vec<(&Value, bool)> = Vec::new();
    push_children(resource, &mut pending);
    let mut line = 0usize;
    while let Some((item, item_of_list)) = pending.pop() {
        match item {
            Value::String(s) if refused(s) => return Some(line),
            Value::String(s) => line += scalar_lines(s),
            Value::Object(m) if !m.is_empty() => {
                line += usize::from(!item_of_list);
                push_children(item, &mut pending);
            }
            Value::Array(a) if !a.is_empty() => {
                line += usize::from(!item_of_list);
                push_children(item, &mut pending);
            }
            // Numbers, booleans, null, `{}` and `[]`: one line.
            _ => line += 1,
        }
    }
    None
}

/// Queues the entries of a map (in Go's key order) or the items of a list, first on top.
fn push_children<'a>(value: &'a Value, pending: &mut Vec<(&'a Value, bool)>) {
    match value {
        Value::Object(map) => {
            let keys: Vec<&str> = map.keys().map(String::as_str).collect();
            let order = sorted_order(&keys);
            pending.extend(order.into_iter().rev().map(|i| (&map[keys[i]], false)));
        }
        Value::Array(items) => pending.extend(items.iter().rev().map(|item| (item, true))),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn cm(extra: Value) -> Value {
        let mut v = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}});
        for (k, x) in extra.as_object().into_iter().flatten() {
            v[k] = x.clone();
        }
        v
    }

    /// Lines kustomize-controller v1.9.5 (kyaml v0.21.1, go.yaml.in/yaml/v3 v3.0.4) reported
    /// for these resources.
    #[test]
    fn the_line_kustomize_reports() {
        assert_eq!(tab_led_block_line(&cm(json!({"a": "\tx\ny"}))), Some(2));
        assert_eq!(
            tab_led_block_line(&cm(json!({"z": 1, "a": "\tx\ny"}))),
            Some(2)
        );
        assert_eq!(
            tab_led_block_line(&cm(json!({"b": [1, "\tq\nr"]}))),
            Some(4)
        );
        assert_eq!(
            tab_led_block_line(&cm(json!({"k": {"l": "multi\nline\nstr", "m": "\tx\ny"}}))),
            Some(7)
        );
        assert_eq!(
            tab_led_block_line(&cm(json!({"a10": 1, "a9": 2, "b": "\tx\ny"}))),
            Some(4)
        );
        assert_eq!(
            tab_led_block_line(&cm(json!({"l": [{"a": 1, "b": [2, 3]}, {"c": "\tx\ny"}]}))),
            Some(8)
        );
        assert_eq!(
            tab_led_block_line(&cm(json!({"l": [[1, 2], "a\nb\n", {}, "\tx\ny"]}))),
            Some(10)
        );
    }

    /// Strings yaml.v3 quotes, or writes with an indentation indicator, parse back.
    #[test]
    fn what_kustomize_accepts() {
        for s in [
            "x\n\ty",
            "\tx\ny ",
            "\n\tx",
            "\tx",
            "\tx \ny",
            "\tx\u{1}\ny",
        ] {
            assert_eq!(tab_led_block_line(&cm(json!({"m": s}))), None, "{s:?}");
        }
    }
}
