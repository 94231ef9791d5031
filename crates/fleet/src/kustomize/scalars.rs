//! What kustomize does to a resource's scalars between reading and writing it, which
//! serde-saphyr's values cannot show (they keep no scalar style or tag). Observed with kustomize
//! v5.8.2 (the vectors in the tests below) and explained by its code:
//!
//! - kustomize writes a resource with kyaml's `RNode.MarshalJSON`: go-yaml v3 emits the node,
//!   decodes that text into `interface{}` (where a plain timestamp becomes a `time.Time`) and
//!   `encoding/json` writes it: `2001-12-14` becomes `"2001-12-14T00:00:00Z"`. A quoted scalar
//!   stays text, and so does a plain one the emitter quotes: inside a flow collection, one with
//!   `:` (every timestamp with a clock). Aliases and merge keys count where they are used (kyaml
//!   `DeAnchor` copies them there first).
//! - Before that, at the end of the build, `metadata.annotations` is rebuilt from its text
//!   (`GetAnnotations`, then `SetAnnotations` of strings): `1` → `"1"`, `2001-12-14` stays, a
//!   collection is `""`, an empty or non-map field goes, and a key that reads as a timestamp
//!   fails even when it was quoted. A JSON 6902 patch writes its object through JSON before
//!   then, so its annotations' text is Go's JSON by the end: [`Marks`] say which changes.
//! - A strategic-merge patch is merged as nodes, so its timestamps follow the same rules; its
//!   annotations are rebuilt only after the merge, so a `null` there still deletes.
//! - The items of a `List` are decoded and written as JSON when the file is read
//!   (`inlineAnyEmbeddedLists`), without the emitter: there every plain timestamp is converted,
//!   annotations and flow collections included.
//! - A timestamp as a map key (`json: unsupported type`) or with an offset of a day or more fails
//!   the build.

use std::collections::{BTreeMap, HashMap, HashSet};

use conflux_postbuild_subst::json::pointer as json_at;
use conflux_postbuild_subst::yaml::timestamp::Timestamp;
use serde_json::{Map, Value};
use serde_saphyr::granit_parser::{Event, Parser, ScalarStyle, StructureStyle};

use crate::Error;

/// A YAML node as far as kustomize's rewrites need it.
#[derive(Clone)]
enum Node {
    Scalar {
        /// The value after escapes and folding.
        text: String,
        /// Plain and untagged: the only scalars go-yaml resolves as timestamps (an explicit
        /// `!!timestamp` already fails serde-saphyr).
        plain: bool,
        /// 1-based.
        line: usize,
    },
    Seq {
        items: Vec<Node>,
        flow: bool,
    },
    Map {
        entries: Vec<(Node, Node)>,
        flow: bool,
    },
}

/// What is being read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Read {
    /// A resource file.
    Resource,
    /// A strategic-merge patch.
    Patch,
}

/// Where a node is: how kustomize gets from it to JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Mode {
    /// In a resource: through go-yaml's emitter.
    #[default]
    Resource,
    /// In the items of a `List`: decoded directly.
    ListItem,
    /// In a strategic-merge patch: as a resource, annotations left for after the merge.
    Patch,
}

/// What a JSON round trip does to an annotation still as read (its text, until the end).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ThroughJson {
    /// A plain timestamp: it becomes Go's JSON text of it.
    Timestamp,
    /// A number, boolean or null: it becomes Go's JSON text of the value, which the built-in
    /// subset does not compute (`0x10` → `16`, `1.50` → `1.5`, `~` → `null`).
    Retyped,
}

/// An object's annotations that a JSON round trip changes, by key.
pub(super) type Marks = BTreeMap<String, ThroughJson>;

/// What [`rewrite`] found.
#[derive(Debug, Default)]
pub(super) struct Rewritten {
    /// What the built-in subset cannot follow exactly: a timestamp in a name, namespace or
    /// label, which kustomize writes converted but selects and names by its text.
    pub inexact: Vec<String>,
    /// The [`Marks`] of each document (empty for all but objects).
    pub marks: Vec<Marks>,
}

/// `documents`, serde-saphyr's values of `text` (null documents dropped), as kustomize writes
/// them.
pub(super) fn rewrite(text: &str, documents: &mut [Value], read: Read) -> Result<Rewritten, Error> {
    let mut marks = vec![Marks::new(); documents.len()];
    if !needed(text, documents) {
        return Ok(Rewritten {
            inexact: Vec::new(),
            marks,
        });
    }
    let nodes = nodes(text)?;
    // Objects are the only documents that matter, and each side has one per mapping.
    let maps: Vec<&Node> = nodes
        .iter()
        .filter(|n| matches!(n, Node::Map { .. }))
        .collect();
    let objects: Vec<usize> = (0..documents.len())
        .filter(|i| documents[*i].is_object())
        .collect();
    if maps.len() != objects.len() {
        return Ok(Rewritten {
            inexact: vec![
                "its documents could not be matched with the YAML parser's; plain timestamps and annotations are kept as read".to_owned(),
            ],
            marks,
        });
    }
    let mut walk = Walk::default();
    for (node, index) in maps.into_iter().zip(objects) {
        let object = &mut documents[index];
        match read {
            Read::Resource => walk.document(node, object)?,
            Read::Patch => {
                walk.mode = Mode::Patch;
                walk.node(node, object, false)?;
            }
        }
        marks[index] = std::mem::take(&mut walk.marks);
    }
    Ok(Rewritten {
        inexact: walk.notes,
        marks,
    })
}

/// `object`'s annotations as a JSON round trip (a JSON 6902 patch) leaves them, by `marks`,
/// which it empties: afterwards they are JSON text. `Ok(false)` when a [`ThroughJson::Retyped`]
/// one is among them.
pub(super) fn through_json(object: &mut Value, marks: &mut Marks) -> Result<bool, Error> {
    let mut exact = true;
    let mut annotations = object
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut);
    for (key, mark) in std::mem::take(marks) {
        let value = annotations.as_mut().and_then(|a| a.get_mut(&key));
        match (mark, value) {
            (ThroughJson::Retyped, Some(_)) => exact = false,
            (ThroughJson::Timestamp, Some(Value::String(text))) => {
                if let Some(stamp) = Timestamp::parse(text) {
                    *text = written(stamp, text, None)?;
                }
            }
            _ => {}
        }
    }
    Ok(exact)
}

/// Whether `documents` could differ from kustomize's writing at all: a date-like text, or
/// annotations that are not a map of strings. Most files have neither and are not parsed again.
fn needed(text: &str, documents: &[Value]) -> bool {
    let dated = text
        .as_bytes()
        .windows(6)
        .any(|w| w[..4].iter().all(u8::is_ascii_digit) && w[4] == b'-' && w[5].is_ascii_digit());
    let odd = |object: &Value| match json_at(object, "/metadata/annotations") {
        None => false,
        Some(Value::Object(map)) => map.is_empty() || map.values().any(|v| !v.is_string()),
        Some(_) => true,
    };
    dated
        || documents.iter().any(|d| {
            odd(d)
                || d.get("items")
                    .and_then(Value::as_array)
                    .is_some_and(|items| items.iter().any(odd))
        })
}

/// The documents of `text` as [`Node`]s, aliases replaced by what they name.
fn nodes(text: &str) -> Result<Vec<Node>, Error> {
    struct Frame {
        node: Node,
        anchor: usize,
        key: Option<Node>,
    }
    let mut documents = Vec::new();
    let mut stack: Vec<Frame> = Vec::new();
    let mut anchors: HashMap<usize, Node> = HashMap::new();
    for event in Parser::new_from_str(text) {
        let (event, span) = event.map_err(|e| Error::Yaml {
            message: e.to_string(),
            line: None,
        })?;
        let line = span.start.line();
        let (node, anchor) = match event {
            Event::Scalar(text, style, anchor, tag) => (
                Node::Scalar {
                    // An empty value comes as `~` with an empty span; go-yaml's text is "".
                    text: if span.start.index() == span.end.index() {
                        String::new()
                    } else {
                        text.into_owned()
                    },
                    plain: style == ScalarStyle::Plain && tag.is_none(),
                    line,
                },
                anchor,
            ),
            Event::SequenceStart(style, anchor, _) => {
                let node = Node::Seq {
                    items: Vec::new(),
                    flow: style == StructureStyle::Flow,
                };
                stack.push(Frame {
                    node,
                    anchor,
                    key: None,
                });
                continue;
            }
            Event::MappingStart(style, anchor, _) => {
                let node = Node::Map {
                    entries: Vec::new(),
                    flow: style == StructureStyle::Flow,
                };
                stack.push(Frame {
                    node,
                    anchor,
                    key: None,
                });
                continue;
            }
            Event::SequenceEnd | Event::MappingEnd => match stack.pop() {
                Some(frame) => (frame.node, frame.anchor),
                None => continue,
            },
            // serde-saphyr has already refused an unknown alias; an empty scalar keeps the
            // keys and values paired regardless.
            Event::Alias(id) => (
                anchors.get(&id).cloned().unwrap_or(Node::Scalar {
                    text: String::new(),
                    plain: false,
                    line,
                }),
                0,
            ),
            _ => continue,
        };
        if anchor != 0 {
            anchors.insert(anchor, node.clone());
        }
        match stack.last_mut() {
            None => documents.push(node),
            Some(frame) => match &mut frame.node {
                Node::Seq { items, .. } => items.push(node),
                Node::Map { entries, .. } => match frame.key.take() {
                    Some(key) => entries.push((key, node)),
                    None => frame.key = Some(node),
                },
                Node::Scalar { .. } => {}
            },
        }
    }
    Ok(documents)
}

/// A mapping's fields as go-yaml decodes them: its own, then those of its `<<` merges that it
/// does not set itself (the first merge wins).
fn fields(entries: &[(Node, Node)]) -> Vec<(&Node, &Node)> {
    let is_merge =
        |key: &Node| matches!(key, Node::Scalar { text, plain: true, .. } if text == "<<");
    let mut out: Vec<(&Node, &Node)> = entries
        .iter()
        .filter(|(k, _)| !is_merge(k))
        .map(|(k, v)| (k, v))
        .collect();
    let mut seen: HashSet<&str> = out.iter().filter_map(|(k, _)| key_text(k)).collect();
    for (_, merged) in entries.iter().filter(|(k, _)| is_merge(k)) {
        let maps = match merged {
            Node::Seq { items, .. } => items.iter().collect(),
            other => vec![other],
        };
        for map in maps {
            if let Node::Map { entries, .. } = map {
                for (key, value) in fields(entries) {
                    if key_text(key).is_some_and(|k| seen.insert(k)) {
                        out.push((key, value));
                    }
                }
            }
        }
    }
    out
}

/// A scalar key's text (a collection as a key names nothing serde-saphyr kept).
fn key_text(key: &Node) -> Option<&str> {
    match key {
        Node::Scalar { text, .. } => Some(text),
        _ => None,
    }
}

/// kustomize's failure on a timestamp map key (`encoding/json` has no key for a `time.Time`).
fn key_error(text: &str, line: usize) -> Error {
    Error::Unwritable {
        message: format!(
            "json: unsupported type: map[interface {{}}]interface {{}} (kustomize reads the map key `{text}` as a YAML timestamp)"
        ),
        line: Some(line),
    }
}

/// Go's JSON text of a timestamp, or kustomize's failure.
fn written(stamp: Timestamp, text: &str, line: Option<usize>) -> Result<String, Error> {
    stamp.to_json_text().map_err(|e| Error::Unwritable {
        message: format!(
            "json: error calling MarshalJSON for type time.Time: {e} (the YAML timestamp `{text}`)"
        ),
        line,
    })
}

/// One walk over a file's documents, with the path of the node being rewritten.
#[derive(Default)]
struct Walk {
    notes: Vec<String>,
    /// The current document's.
    marks: Marks,
    mode: Mode,
    path: Vec<String>,
}

impl Walk {
    fn document(&mut self, node: &Node, object: &mut Value) -> Result<(), Error> {
        let is_list = object
            .get("kind")
            .and_then(Value::as_str)
            .is_some_and(|k| k.ends_with("List"));
        let items = match node {
            Node::Map { entries, .. } if is_list => fields(entries)
                .into_iter()
                .find(|(k, _)| matches!(k, Node::Scalar { text, .. } if text == "items"))
                .map(|(_, items)| items),
            _ => None,
        };
        match (items, object.get_mut("items")) {
            (Some(Node::Seq { items, .. }), Some(Value::Array(values))) => {
                self.mode = Mode::ListItem;
                for (item, value) in items.iter().zip(values.iter_mut()) {
                    self.node(item, value, false)?;
                }
                self.mode = Mode::Resource;
            }
            _ => self.node(node, object, false)?,
        }
        Ok(())
    }

    /// Whether kustomize reads back the scalar `text` as a timestamp.
    fn timestamp(&self, text: &str, plain: bool, flow: bool) -> Option<Timestamp> {
        // In a flow collection go-yaml's emitter quotes a scalar with a flow indicator.
        let quoted = flow
            && self.mode != Mode::ListItem
            && text.contains([':', ',', '?', '[', ']', '{', '}']);
        if !plain || quoted {
            return None;
        }
        Timestamp::parse(text)
    }

    fn node(&mut self, node: &Node, value: &mut Value, flow: bool) -> Result<(), Error> {
        match node {
            Node::Scalar { text, plain, line } => {
                // serde-saphyr read a plain timestamp as its text; anything else is no timestamp.
                if let (Some(stamp), Value::String(_)) =
                    (self.timestamp(text, *plain, flow), &value)
                {
                    let json = written(stamp, text, Some(*line))?;
                    self.note(text, &json);
                    *value = Value::String(json);
                }
            }
            Node::Seq { items, flow: own } => {
                if let Value::Array(values) = value {
                    for (index, (item, value)) in items.iter().zip(values).enumerate() {
                        self.path.push(index.to_string());
                        self.node(item, value, flow || *own)?;
                        self.path.pop();
                    }
                }
            }
            Node::Map { entries, flow: own } => {
                if let Value::Object(map) = value {
                    self.map(entries, map, flow || *own)?;
                }
            }
        }
        Ok(())
    }

    fn map(
        &mut self,
        entries: &[(Node, Node)],
        map: &mut Map<String, Value>,
        flow: bool,
    ) -> Result<(), Error> {
        let in_metadata = self.path.len() == 1 && self.path[0] == "metadata";
        for (key, node) in fields(entries) {
            let Node::Scalar { text, plain, line } = key else {
                continue;
            };
            if self.timestamp(text, *plain, flow).is_some() {
                return Err(key_error(text, *line));
            }
            if in_metadata && text == "annotations" {
                self.annotations(node, map, flow)?;
                continue;
            }
            if let Some(value) = map.get_mut(text.as_str()) {
                self.path.push(text.clone());
                self.node(node, value, flow)?;
                self.path.pop();
            }
        }
        Ok(())
    }

    /// `metadata.annotations` as kustomize rebuilds it from text (see the module's comment).
    fn annotations(
        &mut self,
        node: &Node,
        metadata: &mut Map<String, Value>,
        flow: bool,
    ) -> Result<(), Error> {
        let (entries, flow) = match node {
            Node::Map { entries, flow: own } => (fields(entries), flow || *own),
            // kustomize crashes (an index out of range in kyaml's `getMapFromMeta`).
            Node::Seq { .. } => {
                return Err(Error::Unwritable {
                    message: "metadata.annotations is a list (kustomize v5.8.2 panics on it)"
                        .to_owned(),
                    line: None,
                });
            }
            Node::Scalar { .. } => (Vec::new(), flow),
        };
        // Every key is written back as a new plain key, so its quotes are gone.
        for (key, _) in &entries {
            if let Node::Scalar { text, line, .. } = key
                && Timestamp::parse(text).is_some()
            {
                return Err(key_error(text, *line));
            }
        }
        if self.mode == Mode::Patch {
            // Rebuilt after the merge: only the text of values changes here; a null deletes, and
            // `null` or `{}` for the whole field is the merge's too.
            if let Some(Value::Object(values)) = metadata.get_mut("annotations") {
                for (key, value) in entries {
                    let (Some(key), Node::Scalar { text, plain, .. }) = (key_text(key), value)
                    else {
                        continue;
                    };
                    if let Some(v) = values.get_mut(key).filter(|v| !v.is_null()) {
                        self.mark(key, text, *plain, flow, v);
                        *v = Value::String(text.clone());
                    }
                }
            }
            return Ok(());
        }
        let read = match metadata.remove("annotations") {
            Some(Value::Object(map)) => map,
            _ => Map::new(),
        };
        let mut rebuilt = Map::new();
        for (key, value) in entries {
            let Some(key) = key_text(key) else {
                continue;
            };
            let written_text = match (self.mode, value, read.get(key)) {
                (Mode::ListItem, Node::Scalar { text, plain, line }, Some(Value::String(s))) => {
                    // In a `List` item the value went through JSON first.
                    match self.timestamp(text, *plain, false) {
                        Some(stamp) => written(stamp, text, Some(*line))?,
                        None => s.clone(),
                    }
                }
                (Mode::ListItem, Node::Scalar { .. }, Some(other))
                    if !other.is_object() && !other.is_array() =>
                {
                    other.to_string()
                }
                (_, Node::Scalar { text, plain, .. }, read) => {
                    if let Some(read) = read {
                        self.mark(key, text, *plain, flow, read);
                    }
                    text.clone()
                }
                // A collection's node has no text.
                _ => String::new(),
            };
            rebuilt.insert(key.to_owned(), Value::String(written_text));
        }
        // An empty map is cleared, as is anything that is not a map.
        if !rebuilt.is_empty() {
            metadata.insert("annotations".to_owned(), Value::Object(rebuilt));
        }
        Ok(())
    }

    /// Marks the annotation `key`, its node's `text` and serde-saphyr's value `read`, when a
    /// JSON round trip would change it.
    fn mark(&mut self, key: &str, text: &str, plain: bool, flow: bool, read: &Value) {
        // A `List` item's annotations are JSON text already.
        let mark = if self.mode == Mode::ListItem {
            return;
        } else if self.timestamp(text, plain, flow).is_some() {
            ThroughJson::Timestamp
        } else if matches!(read, Value::Number(_) | Value::Bool(_) | Value::Null) {
            ThroughJson::Retyped
        } else {
            return;
        };
        self.marks.insert(key.to_owned(), mark);
    }

    /// Notes a timestamp converted where kustomize also selects or names by the text.
    fn note(&mut self, text: &str, json: &str) {
        let path: Vec<&str> = self.path.iter().map(String::as_str).collect();
        if matches!(
            path.as_slice(),
            ["metadata", "name" | "namespace"] | ["metadata", "labels", _]
        ) {
            self.notes.push(format!(
                "{} `{text}` is a YAML timestamp, which kustomize writes as \"{json}\" but selects and names by its text",
                path.join(".")
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::{Resources, parse_resources};
    use super::*;

    fn read(text: &str) -> Resources {
        parse_resources(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    /// A ConfigMap named `cm` with `rest` after its name, as kustomize v5.8.2 wrote it.
    fn written_cm(rest: &str) -> Value {
        let text = format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n{rest}");
        let mut objects = read(&text).objects;
        assert_eq!(objects.len(), 1, "{text}");
        let mut object = objects.remove(0);
        for field in ["apiVersion", "kind"] {
            object.as_object_mut().map(|o| o.remove(field));
        }
        if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            metadata.remove("name");
            if metadata.is_empty() {
                object.as_object_mut().map(|o| o.remove("metadata"));
            }
        }
        object
    }

    /// Input and `kustomize build` output, kustomize v5.8.2 (the output's apiVersion, kind and
    /// metadata.name left out).
    #[test]
    fn kustomize_v5_8_2_block_and_flow() {
        let cases: Vec<(&str, Value)> = vec![
            (
                "data:\n  d: 2001-12-14\n  e: \"2001-12-15\"\n  e2: '2001-12-15'\n  z4: !!str 2001-12-14\n  z5: 2001-12-14 # comment\n  z6: >-\n    2001-12-14\n  z7: |\n    2001-12-14\n  z9: 2001-12-14 \n  n: 2001-12-14 21:59:43.10 -5\n  o: 2001-02-30\n  z2: 2001-12-14T21:59:43\n",
                json!({"data": {"d": "2001-12-14T00:00:00Z", "e": "2001-12-15", "e2": "2001-12-15",
                    "z4": "2001-12-14", "z5": "2001-12-14T00:00:00Z", "z6": "2001-12-14",
                    "z7": "2001-12-14\n", "z9": "2001-12-14T00:00:00Z",
                    "n": "2001-12-14 21:59:43.10 -5", "o": "2001-02-30", "z2": "2001-12-14T21:59:43"}}),
            ),
            (
                "data:\n  multi: 2001-12-14\n    21:59:43\n  f: 2001-12-14T21:59:43.10-05:00\n",
                json!({"data": {"multi": "2001-12-14T21:59:43Z", "f": "2001-12-14T21:59:43.1-05:00"}}),
            ),
            // In a flow collection the emitter quotes a scalar with `:`: only dates convert.
            (
                "data:\n  f1: {k: 2001-12-14 21:59:43.10}\n  f2: {k: 2001-12-14T21:59:43Z}\n  f3: [2001-12-14 21:59:43]\n  f4: {k: 2001-12-14}\n  f5: [2001-12-14, x]\n  f6: {k: 2001-12-14T21:59:43+24:00}\n  b1:\n    k: 2001-12-14 21:59:43.10\n  \"2001-12-15\": qkey\n",
                json!({"data": {"f1": {"k": "2001-12-14 21:59:43.10"}, "f2": {"k": "2001-12-14T21:59:43Z"},
                    "f3": ["2001-12-14 21:59:43"], "f4": {"k": "2001-12-14T00:00:00Z"},
                    "f5": ["2001-12-14T00:00:00Z", "x"], "f6": {"k": "2001-12-14T21:59:43+24:00"},
                    "b1": {"k": "2001-12-14T21:59:43.1Z"}, "2001-12-15": "qkey"}}),
            ),
            (
                "data:\n  a: [{b: [2001-12-14, 2001-12-14 1:2:3]}]\n",
                json!({"data": {"a": [{"b": ["2001-12-14T00:00:00Z", "2001-12-14 1:2:3"]}]}}),
            ),
            // Aliases and merges count where they are used (kyaml's DeAnchor copies them).
            (
                "data:\n  a: {x: &t 2001-12-14T1:2:3Z, y: &d 2001-12-14}\n  b: *t\n  c: *d\n",
                json!({"data": {"a": {"x": "2001-12-14T1:2:3Z", "y": "2001-12-14T00:00:00Z"},
                    "b": "2001-12-14T01:02:03Z", "c": "2001-12-14T00:00:00Z"}}),
            ),
            (
                "data:\n  base: &b {m: 2001-12-14 1:2:3, n: 2001-12-14}\n  merged:\n    <<: *b\n    o: 2001-12-14 1:2:3\n",
                json!({"data": {"base": {"m": "2001-12-14 1:2:3", "n": "2001-12-14T00:00:00Z"},
                    "merged": {"m": "2001-12-14T01:02:03Z", "n": "2001-12-14T00:00:00Z",
                        "o": "2001-12-14T01:02:03Z"}}}),
            ),
            (
                "data:\n  merged:\n    <<: [{m: 2001-12-14}, {m: x, n: 2001-12-14}]\n    m2: 1\n",
                json!({"data": {"merged": {"m": "2001-12-14T00:00:00Z", "m2": 1,
                    "n": "2001-12-14T00:00:00Z"}}}),
            ),
            // Labels are written as they are; annotations are rebuilt from their text.
            (
                "  labels:\n    la: 2001-12-14\n  annotations:\n    an: 2001-12-14\n    aq: \"2001-12-14\"\n    at: 2001-12-14T21:59:43.10-05:00\n",
                json!({"metadata": {"labels": {"la": "2001-12-14T00:00:00Z"},
                    "annotations": {"an": "2001-12-14", "aq": "2001-12-14",
                        "at": "2001-12-14T21:59:43.10-05:00"}}}),
            ),
            (
                "  labels: {a: 2001-12-14, b: 2001-12-14T21:59:43Z}\n  annotations: {a: 2001-12-14, b: 2001-12-14T21:59:43Z}\n",
                json!({"metadata": {"labels": {"a": "2001-12-14T00:00:00Z", "b": "2001-12-14T21:59:43Z"},
                    "annotations": {"a": "2001-12-14", "b": "2001-12-14T21:59:43Z"}}}),
            ),
            (
                "  annotations:\n    a: 1\n    b: true\n    c: 0x10\n    d: ~\n    e: 1.50\n    f: null\n    g: {x: y}\n    h: [1]\n    i: |\n      2001-12-14\n    j: 'x'\n    k: \"\"\n    l:\n",
                json!({"metadata": {"annotations": {"a": "1", "b": "true", "c": "0x10", "d": "~",
                    "e": "1.50", "f": "null", "g": "", "h": "", "i": "2001-12-14\n", "j": "x",
                    "k": "", "l": ""}}}),
            ),
            ("  annotations: {}\n", json!({})),
            ("  annotations:\n", json!({})),
            ("  annotations: x\n", json!({})),
        ];
        for (rest, written) in cases {
            assert_eq!(written_cm(rest), written, "{rest}");
        }
    }

    /// The items of a `List` are written through JSON when read: every plain timestamp converts.
    #[test]
    fn kustomize_v5_8_2_list_items() {
        let text = "apiVersion: v1\nkind: ConfigMapList\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: inlist\n    annotations:\n      an: 2001-12-14\n    labels:\n      la: 2001-12-14\n  data:\n    d: 2001-12-14\n    f1: {k: 2001-12-14 21:59:43.10}\n    f2: [2001-12-14T21:59:43.10Z]\n";
        let objects = read(text).objects;
        assert_eq!(
            objects,
            [json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "inlist", "annotations": {"an": "2001-12-14T00:00:00Z"},
                    "labels": {"la": "2001-12-14T00:00:00Z"}},
                "data": {"d": "2001-12-14T00:00:00Z", "f1": {"k": "2001-12-14T21:59:43.1Z"},
                    "f2": ["2001-12-14T21:59:43.1Z"]}})]
        );
    }

    #[test]
    fn every_document_of_a_stream() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  d: 2001-12-14\n---\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\ndata:\n  d: 2001-12-15\n";
        let objects = read(text).objects;
        let days: Vec<&Value> = objects.iter().map(|o| &o["data"]["d"]).collect();
        assert_eq!(days, ["2001-12-14T00:00:00Z", "2001-12-15T00:00:00Z"]);
    }

    /// A converted name, namespace or label is what the built-in subset cannot follow (kustomize
    /// writes `"2001-12-14T00:00:00Z"` but matches patches by `2001-12-14`).
    #[test]
    fn identity_timestamps_are_inexact() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: 2001-12-14\n  namespace: 2001-12-15\n  labels:\n    day: 2001-12-16\n";
        let read = read(text);
        assert_eq!(read.objects[0]["metadata"]["name"], "2001-12-14T00:00:00Z");
        assert_eq!(
            read.objects[0]["metadata"]["namespace"],
            "2001-12-15T00:00:00Z"
        );
        assert_eq!(read.inexact.len(), 3, "{:?}", read.inexact);
        assert!(read.inexact[0].starts_with("metadata.name `2001-12-14`"));
        let quiet = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: \"2001-12-14\"\n";
        assert!(super::super::parse_resources(quiet).is_ok_and(|r| r.inexact.is_empty()));
    }

    /// kustomize v5.8.2 fails on these.
    #[test]
    fn kustomize_v5_8_2_failures() {
        let cases = [
            ("data:\n  2001-12-14: x\n", 6, "json: unsupported type"),
            ("data:\n  f: {2001-12-14: x}\n", 6, "json: unsupported type"),
            (
                "  labels:\n    2001-12-14: x\n",
                6,
                "json: unsupported type",
            ),
            // Annotation keys are written back without their quotes.
            (
                "  annotations:\n    \"2001-12-14\": x\n",
                6,
                "json: unsupported type",
            ),
            (
                "  annotations: {\"2001-12-14T1:2:3Z\": x}\n",
                5,
                "json: unsupported type",
            ),
            (
                "data:\n  f: 2001-12-14T21:59:43+23:60\n",
                6,
                "Time.MarshalJSON: timezone hour outside of range [0,23]",
            ),
        ];
        for (rest, at, message) in cases {
            let text = format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n{rest}");
            match parse_resources(&text) {
                Err(Error::Unwritable { message: m, line }) => {
                    assert!(m.contains(message), "{rest}: {m}");
                    assert_eq!(line, Some(at), "{rest}");
                }
                other => panic!("{rest}: {other:?}"),
            }
        }
        let list =
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n  annotations: [2001-12-14]\n";
        assert!(matches!(
            parse_resources(list),
            Err(Error::Unwritable { .. })
        ));
    }

    /// A strategic-merge patch keeps its annotation nulls (they delete); its text values and
    /// timestamps are as in a resource.
    #[test]
    fn a_patch_leaves_annotations_to_the_merge() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n  annotations:\n    a: null\n    b: 1\n    p: 2001-12-14\ndata:\n  s: 2001-12-14\n  sf: {a: 2001-12-14T21:59:43Z, b: 2001-12-14}\n";
        let options = serde_saphyr::options! { strict_booleans: true, legacy_octal_numbers: true };
        let mut patch: Value = serde_saphyr::from_str_with_options(text, options).expect("a patch");
        let rewritten =
            rewrite(text, std::slice::from_mut(&mut patch), Read::Patch).expect("rewritten");
        assert!(rewritten.inexact.is_empty());
        let marks = Marks::from([
            ("b".to_owned(), ThroughJson::Retyped),
            ("p".to_owned(), ThroughJson::Timestamp),
        ]);
        assert_eq!(rewritten.marks, [marks]);
        assert_eq!(
            patch["metadata"]["annotations"],
            json!({"a": null, "b": "1", "p": "2001-12-14"})
        );
        assert_eq!(
            patch["data"],
            json!({"s": "2001-12-14T00:00:00Z", "sf": {"a": "2001-12-14T21:59:43Z", "b": "2001-12-14T00:00:00Z"}})
        );
        let null = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n  annotations: null\n";
        let mut patch: Value = serde_saphyr::from_str(null).expect("a patch");
        rewrite(null, std::slice::from_mut(&mut patch), Read::Patch).expect("rewritten");
        assert_eq!(patch["metadata"]["annotations"], Value::Null);
        assert!(patch["metadata"].get("annotations").is_some());
    }

    /// kustomize v5.8.2: a JSON 6902 patch on the object converts annotations that are plain
    /// timestamps (`day: 2001-12-14` → `"2001-12-14T00:00:00Z"`), not quoted or flow ones.
    #[test]
    fn a_json_patch_converts_annotations_still_as_read() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n  annotations:\n    day: 2001-12-14\n    quoted: \"2001-12-14\"\n    number: 0x10\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm2\n  annotations: {day: 2001-12-14, at: 2001-12-14T1:2:3Z}\n";
        let options = serde_saphyr::options! { strict_booleans: true, legacy_octal_numbers: true };
        let mut documents: Vec<Value> =
            serde_saphyr::from_multiple_with_options(text, options).expect("YAML");
        let mut rewritten = rewrite(text, &mut documents, Read::Resource).expect("rewritten");
        assert_eq!(
            documents[0]["metadata"]["annotations"],
            json!({"day": "2001-12-14", "quoted": "2001-12-14", "number": "0x10"})
        );
        // `0x10` would become `16`, which the built-in subset does not compute: inexact.
        let first = through_json(&mut documents[0], &mut rewritten.marks[0]);
        assert!(matches!(first, Ok(false)));
        assert_eq!(
            documents[0]["metadata"]["annotations"]["day"],
            "2001-12-14T00:00:00Z"
        );
        assert_eq!(
            documents[0]["metadata"]["annotations"]["quoted"],
            "2001-12-14"
        );
        assert!(rewritten.marks[0].is_empty());
        assert!(matches!(
            through_json(&mut documents[1], &mut rewritten.marks[1]),
            Ok(true)
        ));
        assert_eq!(
            documents[1]["metadata"]["annotations"],
            json!({"day": "2001-12-14T00:00:00Z", "at": "2001-12-14T1:2:3Z"})
        );
    }

    #[test]
    fn files_without_dates_or_odd_annotations_are_not_read_twice() {
        let plain = [json!({"metadata": {"annotations": {"a": "b"}}})];
        assert!(!needed(
            "kind: ConfigMap\nmetadata: {annotations: {a: b}}\n",
            &plain
        ));
        assert!(needed("d: 2001-1-1\n", &[]));
        assert!(needed(
            "",
            &[json!({"metadata": {"annotations": {"a": 1}}})]
        ));
        assert!(needed("", &[json!({"metadata": {"annotations": {}}})]));
    }
}
