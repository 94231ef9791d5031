//! go-yaml v2 `decode.go`: events to a node tree (first document only), then the node tree
//! to Go values as `yaml.Unmarshal` into an `interface{}` produces them.

use std::collections::{HashMap, HashSet};

use super::parser::{EventKind, Parser};
use super::tags::{self, BINARY_TAG, MERGE_TAG};
use crate::yaml::gofmt::{format_g, go_quote};
use crate::yaml::resolve::Resolved;

/// A decoded Go value (`interface{}` holding one of go-yaml's result types).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum GoVal {
    Nil,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
    /// Bytes, because `!!binary` can produce invalid UTF-8.
    Str(Vec<u8>),
    Seq(Vec<GoVal>),
    Map(GoMap),
}

/// `map[interface{}]interface{}`: insertion-ordered entries with Go key equality.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct GoMap {
    pub entries: Vec<(GoVal, GoVal)>,
    index: HashMap<KeyId, usize>,
}

/// Go map key identity for the hashable values go-yaml produces.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum KeyId {
    Nil,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(u64),
    Str(Vec<u8>),
}

impl GoMap {
    fn insert(&mut self, key: GoVal, value: GoVal) {
        let id = match &key {
            GoVal::Nil => Some(KeyId::Nil),
            GoVal::Bool(b) => Some(KeyId::Bool(*b)),
            GoVal::Int(i) => Some(KeyId::Int(*i)),
            GoVal::Uint(u) => Some(KeyId::Uint(*u)),
            // NaN never equals itself, so every NaN key is a new entry; +0 and -0 are equal.
            GoVal::Float(f) if f.is_nan() => None,
            GoVal::Float(f) => Some(KeyId::Float(if *f == 0.0 { 0 } else { f.to_bits() })),
            GoVal::Str(s) => Some(KeyId::Str(s.clone())),
            GoVal::Seq(_) | GoVal::Map(_) => None,
        };
        match id {
            Some(id) => {
                if let Some(&i) = self.index.get(&id) {
                    // Go overwrites both the stored key and the value.
                    self.entries[i] = (key, value);
                } else {
                    self.index.insert(id, self.entries.len());
                    self.entries.push((key, value));
                }
            }
            None => self.entries.push((key, value)),
        }
    }
}

#[derive(Debug)]
enum Node {
    Scalar {
        value: String,
        tag: String,
        implicit: bool,
    },
    Sequence(Vec<usize>),
    Mapping(Vec<usize>),
    Alias {
        name: String,
        target: usize,
    },
}

fn yaml_err(msg: impl Into<String>) -> crate::Error {
    crate::Error::Yaml(msg.into())
}

/// The node tree of the first document.
pub(crate) struct Tree {
    nodes: Vec<Node>,
    root: usize,
    /// The deepest recursion decoding can reach, in nodes (aliases count their target).
    pub depth: usize,
}

/// Parses the first document of `text` into a node tree. `Ok(None)` means no document.
pub(crate) fn parse_tree(text: &str) -> Result<Option<Tree>, crate::Error> {
    let mut parser = Parser::new(text);
    let mut next = || parser.next_event().map_err(|e| yaml_err(e.message()));
    // `p.init()` expects STREAM-START, then `p.parse()` peeks the document.
    let first = next()?;
    if first != EventKind::StreamStart {
        return Err(yaml_err(
            "yaml: did not find expected <stream-start>".to_string(),
        ));
    }
    match next()? {
        EventKind::DocumentStart => {}
        _ => return Ok(None),
    }
    let mut nodes: Vec<Node> = Vec::new();
    let mut anchors: HashMap<String, usize> = HashMap::new();
    let mut stack: Vec<usize> = Vec::new();
    let mut root: Option<usize> = None;
    // Per node, the decode depth once the node is complete (0 while still open).
    let mut depth: Vec<usize> = Vec::new();
    loop {
        let event = next()?;
        let is_seq = matches!(event, EventKind::SequenceStart { .. });
        let created = match event {
            EventKind::Scalar {
                anchor,
                tag,
                value,
                implicit,
            } => {
                let idx = nodes.len();
                nodes.push(Node::Scalar {
                    value,
                    tag,
                    implicit,
                });
                depth.push(1);
                if let Some(a) = anchor {
                    anchors.insert(a, idx);
                }
                Some((idx, false))
            }
            EventKind::Alias { anchor } => {
                let Some(&target) = anchors.get(&anchor) else {
                    return Err(yaml_err(format!(
                        "yaml: unknown anchor '{anchor}' referenced"
                    )));
                };
                let idx = nodes.len();
                nodes.push(Node::Alias {
                    name: anchor,
                    target,
                });
                // An open target is an ancestor: decoding stops there with an error.
                depth.push(1 + depth[target].max(1));
                Some((idx, false))
            }
            EventKind::SequenceStart { anchor } | EventKind::MappingStart { anchor } => {
                let idx = nodes.len();
                nodes.push(if is_seq {
                    Node::Sequence(Vec::new())
                } else {
                    Node::Mapping(Vec::new())
                });
                depth.push(0);
                if let Some(a) = anchor {
                    anchors.insert(a, idx);
                }
                Some((idx, true))
            }
            EventKind::SequenceEnd | EventKind::MappingEnd => {
                if let Some(done) = stack.pop()
                    && let Node::Sequence(children) | Node::Mapping(children) = &nodes[done]
                {
                    depth[done] = 1 + children.iter().map(|&c| depth[c]).max().unwrap_or(0);
                }
                None
            }
            EventKind::StreamEnd => {
                return Err(yaml_err(
                    "yaml: attempted to go past the end of stream; corrupted value?",
                ));
            }
            EventKind::StreamStart | EventKind::DocumentStart | EventKind::DocumentEnd => {
                return Err(yaml_err("yaml: unknown problem parsing YAML content"));
            }
        };
        if let Some((idx, is_collection)) = created {
            match stack.last() {
                Some(&parent) => match &mut nodes[parent] {
                    Node::Sequence(children) | Node::Mapping(children) => children.push(idx),
                    _ => {}
                },
                None => root = Some(idx),
            }
            if is_collection {
                stack.push(idx);
            }
        }
        if stack.is_empty()
            && let Some(r) = root
        {
            // `p.expect(yaml_DOCUMENT_END_EVENT)`: peeks one more event, which may fail.
            match next()? {
                EventKind::DocumentEnd => {
                    return Ok(Some(Tree {
                        depth: depth[r],
                        nodes,
                        root: r,
                    }));
                }
                EventKind::StreamEnd => {
                    return Err(yaml_err(
                        "yaml: attempted to go past the end of stream; corrupted value?",
                    ));
                }
                _ => return Err(yaml_err("yaml: unknown problem parsing YAML content")),
            }
        }
    }
}

struct Decoder<'a> {
    nodes: &'a [Node],
    active_aliases: HashSet<usize>,
    decode_count: u64,
    alias_count: u64,
    alias_depth: u64,
}

fn allowed_alias_ratio(decode_count: u64) -> f64 {
    const LOW: u64 = 400_000;
    const HIGH: u64 = 4_000_000;
    if decode_count <= LOW {
        0.99
    } else if decode_count >= HIGH {
        0.10
    } else {
        0.99 - 0.89 * ((decode_count - LOW) as f64 / (HIGH - LOW) as f64)
    }
}

impl Decoder<'_> {
    fn count(&mut self) -> Result<(), crate::Error> {
        self.decode_count += 1;
        if self.alias_depth > 0 {
            self.alias_count += 1;
        }
        if self.alias_count > 100
            && self.decode_count > 1000
            && self.alias_count as f64 / self.decode_count as f64
                > allowed_alias_ratio(self.decode_count)
        {
            return Err(yaml_err("yaml: document contains excessive aliasing"));
        }
        Ok(())
    }

    /// `d.unmarshal(n, out)` with `out` an `interface{}`.
    fn value(&mut self, n: usize) -> Result<GoVal, crate::Error> {
        self.count()?;
        match &self.nodes[n] {
            Node::Alias { name, target } => {
                let target = *target;
                let name = name.clone();
                self.enter_alias(n, &name)?;
                let v = self.value(target);
                self.leave_alias(n);
                v
            }
            Node::Scalar {
                value,
                tag,
                implicit,
            } => scalar(value, tag, *implicit),
            Node::Sequence(children) => {
                let mut out = Vec::with_capacity(children.len());
                for &c in children {
                    out.push(self.value(c)?);
                }
                Ok(GoVal::Seq(out))
            }
            Node::Mapping(_) => {
                let mut map = GoMap::default();
                self.mapping_into(n, &mut map)?;
                Ok(GoVal::Map(map))
            }
        }
    }

    fn enter_alias(&mut self, n: usize, name: &str) -> Result<(), crate::Error> {
        if !self.active_aliases.insert(n) {
            return Err(yaml_err(format!(
                "yaml: anchor '{name}' value contains itself"
            )));
        }
        self.alias_depth += 1;
        Ok(())
    }

    fn leave_alias(&mut self, n: usize) {
        self.alias_depth -= 1;
        self.active_aliases.remove(&n);
    }

    /// `d.mapping(n, out)` with `out` an existing map (also used by merges).
    fn mapping_into(&mut self, n: usize, map: &mut GoMap) -> Result<(), crate::Error> {
        let Node::Mapping(children) = &self.nodes[n] else {
            return Ok(());
        };
        for pair in children.chunks(2) {
            let (k, v) = (pair[0], pair.get(1).copied());
            let Some(v) = v else { break };
            if self.is_merge(k) {
                self.merge(v, map)?;
                continue;
            }
            let key = self.value(k)?;
            if matches!(key, GoVal::Seq(_) | GoVal::Map(_)) {
                return Err(yaml_err(format!(
                    "yaml: invalid map key: {}",
                    sharp_v(&key, true)
                )));
            }
            let value = self.value(v)?;
            map.insert(key, value);
        }
        Ok(())
    }

    fn is_merge(&self, n: usize) -> bool {
        matches!(&self.nodes[n], Node::Scalar { value, tag, implicit }
            if value == "<<" && (*implicit || tag == MERGE_TAG))
    }

    fn is_mapping_or_alias_to_mapping(&self, n: usize) -> bool {
        match &self.nodes[n] {
            Node::Mapping(_) => true,
            Node::Alias { target, .. } => matches!(self.nodes[*target], Node::Mapping(_)),
            _ => false,
        }
    }

    /// `d.unmarshal(n, out)` with `out` the map being merged into.
    fn unmarshal_into_map(&mut self, n: usize, map: &mut GoMap) -> Result<(), crate::Error> {
        self.count()?;
        match &self.nodes[n] {
            Node::Alias { name, target } => {
                let target = *target;
                let name = name.clone();
                self.enter_alias(n, &name)?;
                let r = self.unmarshal_into_map(target, map);
                self.leave_alias(n);
                r
            }
            Node::Mapping(_) => self.mapping_into(n, map),
            // Unreachable: merges check the kind first.
            _ => Err(merge_error()),
        }
    }

    fn merge(&mut self, n: usize, map: &mut GoMap) -> Result<(), crate::Error> {
        match &self.nodes[n] {
            Node::Mapping(_) => self.unmarshal_into_map(n, map),
            Node::Alias { .. } => {
                if !self.is_mapping_or_alias_to_mapping(n) {
                    return Err(merge_error());
                }
                self.unmarshal_into_map(n, map)
            }
            Node::Sequence(children) => {
                // Backwards, so that earlier maps take precedence.
                for &c in children.clone().iter().rev() {
                    if !self.is_mapping_or_alias_to_mapping(c) {
                        return Err(merge_error());
                    }
                    self.unmarshal_into_map(c, map)?;
                }
                Ok(())
            }
            Node::Scalar { .. } => Err(merge_error()),
        }
    }
}

fn merge_error() -> crate::Error {
    yaml_err("yaml: map merge requires map or sequence of maps as the value")
}

/// `d.scalar(n, out)` with `out` an `interface{}`.
fn scalar(value: &str, tag: &str, implicit: bool) -> Result<GoVal, crate::Error> {
    if tag.is_empty() && !implicit {
        return Ok(GoVal::Str(value.as_bytes().to_vec()));
    }
    let (rtag, resolved) = tags::resolve(tag, value).map_err(yaml_err)?;
    if rtag == BINARY_TAG {
        return match tags::decode_base64(value) {
            Some(bytes) => Ok(GoVal::Str(bytes)),
            None => Err(yaml_err(
                "yaml: !!binary value contains invalid base64 data",
            )),
        };
    }
    Ok(match resolved {
        Resolved::Null => GoVal::Nil,
        Resolved::Bool(b) => GoVal::Bool(b),
        Resolved::Int(i) => GoVal::Int(i),
        Resolved::Uint(u) => GoVal::Uint(u),
        Resolved::Float(f) => GoVal::Float(f),
        // Strings, timestamps (kept as their text for interface{} targets) and unknown tags.
        Resolved::Timestamp | Resolved::Str => GoVal::Str(value.as_bytes().to_vec()),
    })
}

/// The decode half of `yaml.Unmarshal(text, &obj)` with `obj interface{}`; `None` (no
/// document) gives `GoVal::Nil`. Recursion goes as deep as [`Tree::depth`].
pub(crate) fn decode_tree(tree: Option<&Tree>) -> Result<GoVal, crate::Error> {
    let Some(tree) = tree else {
        return Ok(GoVal::Nil);
    };
    let mut decoder = Decoder {
        nodes: &tree.nodes,
        active_aliases: HashSet::new(),
        decode_count: 0,
        alias_count: 0,
        alias_depth: 0,
    };
    // The document node itself counts as one decode.
    decoder.count()?;
    decoder.value(tree.root)
}

/// A rank per Go type, to order map keys of different types in `%#v` output. Go orders
/// them by type descriptor address, which is not reproducible; this keeps output stable.
fn type_rank(v: &GoVal) -> u8 {
    match v {
        GoVal::Nil => 0,
        GoVal::Bool(_) => 1,
        GoVal::Int(_) => 2,
        GoVal::Uint(_) => 3,
        GoVal::Float(_) => 4,
        GoVal::Str(_) => 5,
        GoVal::Seq(_) => 6,
        GoVal::Map(_) => 7,
    }
}

fn fmtsort_cmp(a: &GoVal, b: &GoVal) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    match (a, b) {
        (GoVal::Bool(x), GoVal::Bool(y)) => x.cmp(y),
        (GoVal::Int(x), GoVal::Int(y)) => x.cmp(y),
        (GoVal::Uint(x), GoVal::Uint(y)) => x.cmp(y),
        (GoVal::Float(x), GoVal::Float(y)) => x.partial_cmp(y).unwrap_or_else(|| {
            // fmtsort puts NaN first.
            if x.is_nan() && !y.is_nan() {
                Ordering::Less
            } else if y.is_nan() && !x.is_nan() {
                Ordering::Greater
            } else {
                Ordering::Equal
            }
        }),
        (GoVal::Str(x), GoVal::Str(y)) => x.cmp(y),
        _ => type_rank(a).cmp(&type_rank(b)),
    }
}

/// Go `fmt` `%#v` of a value held in an `interface{}` (`top`: the argument itself).
pub(crate) fn sharp_v(v: &GoVal, top: bool) -> String {
    match v {
        GoVal::Nil => {
            if top {
                "<nil>".into()
            } else {
                "interface {}(nil)".into()
            }
        }
        GoVal::Bool(b) => b.to_string(),
        GoVal::Int(i) => i.to_string(),
        GoVal::Uint(u) => format!("0x{u:x}"),
        GoVal::Float(f) => format_g(*f, false),
        GoVal::Str(s) => go_quote(s),
        GoVal::Seq(items) => {
            let inner: Vec<String> = items.iter().map(|i| sharp_v(i, false)).collect();
            format!("[]interface {{}}{{{}}}", inner.join(", "))
        }
        GoVal::Map(map) => {
            let mut entries: Vec<&(GoVal, GoVal)> = map.entries.iter().collect();
            entries.sort_by(|a, b| fmtsort_cmp(&a.0, &b.0));
            let inner: Vec<String> = entries
                .iter()
                .map(|(k, v)| format!("{}:{}", sharp_v(k, false), sharp_v(v, false)))
                .collect();
            format!("map[interface {{}}]interface {{}}{{{}}}", inner.join(", "))
        }
    }
}
