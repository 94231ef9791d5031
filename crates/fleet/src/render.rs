//! `conflux plan`'s output formats for [`Plan`]s: aligned text tables (coloured on request), one
//! JSON document (schemaVersion 1, docs/plan-json.md) and a graphviz digraph. Rendering only:
//! every edge and finding is decided in [`crate::plan`].
//!
//! ```
//! use conflux_fleet::plan::{Input, Options, plan_flat};
//! use conflux_fleet::render;
//! use conflux_watch_index::selector::Selector;
//!
//! let options = Options {
//!     sync_source_namespaces: Vec::new(),
//!     copy_resourceset_targets: false,
//!     auto_reload_all: false,
//!     watch_selector: Selector::everything(),
//! };
//! let plans = [plan_flat(Input::default(), Vec::new(), &options)];
//! assert!(render::text(&plans, false).starts_with("Copies (0)\n  none\n"));
//! assert_eq!(render::json(&plans, "error", false)["summary"]["failOn"], "error");
//! assert!(render::dot(&plans).starts_with("digraph conflux {"));
//! ```

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Value, json};

use crate::plan::{LEVELS, Plan, Row};

/// ANSI colours of the severities.
const PAINT: [&str; 3] = ["34", "33", "31"];

/// The three sections: text titles and headers, JSON keys, DOT colours.
const TITLES: [&str; 3] = ["Copies", "Watch edges", "Reload edges"];
const HEADERS: [&[&str]; 3] = [
    &["SOURCE", "COPY", "VERDICT", "VIA", "WHY"],
    &["SOURCE", "RECONCILES", "WHEN", "INTERVAL", "REFERENCE"],
    &["CONFIG", "ROLLS", "WHY"],
];
/// The JSON keys of the three edge sections, in `Plan::sections` order.
pub const KEYS: [&str; 3] = ["copies", "watchEdges", "reloadEdges"];
const COLOURS: [&str; 3] = ["darkgreen", "blue", "purple"];

/// The plans as aligned tables (ANSI colours when `colour`), each closed by its summary line;
/// with several plans, a last line counts the findings of all.
pub fn text(plans: &[Plan], colour: bool) -> String {
    let mut out: String = plans.iter().map(|p| plan_text(p, colour)).collect();
    if plans.len() > 1 {
        let rows = || plans.iter().flat_map(|p| &p.rows);
        let count = |l: usize| rows().filter(|r| r.level == l).count();
        let _ = writeln!(
            out,
            "{} clusters: {} errors, {} warnings, {} info",
            plans.len(),
            count(2),
            count(1),
            count(0)
        );
    }
    out
}

/// A cell: text and an optional ANSI colour.
type Cell = (String, Option<&'static str>);

/// Appends an aligned table; the last column is not padded.
fn table(out: &mut String, title: &str, headers: &[&str], rows: Vec<Vec<Cell>>, colour: bool) {
    let paint = |text: &str, code: Option<&str>| match code {
        Some(code) if colour => format!("\x1b[{code}m{text}\x1b[0m"),
        _ => text.to_owned(),
    };
    let title = paint(&format!("{title} ({})", rows.len()), Some("1"));
    let _ = writeln!(out, "{title}");
    if rows.is_empty() {
        out.push_str("  none\n\n");
        return;
    }
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (width, (cell, _)) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let header = headers.iter().map(|h| (h.to_string(), None)).collect();
    for row in std::iter::once(header).chain(rows) {
        let last = row.len().saturating_sub(1);
        for (i, ((cell, code), width)) in row.iter().zip(&widths).enumerate() {
            let pad = (width - cell.chars().count()) * usize::from(i < last);
            let _ = write!(out, "  {}{}", paint(cell, *code), " ".repeat(pad));
        }
        out.push('\n');
    }
    out.push('\n');
}

/// One plan as text: its cluster's title, the three sections, the findings and the summary line.
fn plan_text(plan: &Plan, colour: bool) -> String {
    let mut out = String::new();
    if let Some(name) = &plan.name {
        let title = format!("Cluster {}", if name.is_empty() { "." } else { name });
        let title = if colour {
            format!("\x1b[1;4m{title}\x1b[0m")
        } else {
            title
        };
        let _ = writeln!(out, "{title}\n");
    }
    for ((title, headers), edges) in TITLES.iter().zip(HEADERS).zip(&plan.sections) {
        let rows = edges.iter().map(|e| {
            let paint = |i: usize| (i == 2).then_some(if e.good { "32" } else { "31" });
            let cells = e.cells.iter().enumerate();
            cells.map(|(i, c)| (c.clone(), paint(i))).collect()
        });
        table(&mut out, title, headers, rows.collect(), colour);
    }
    let findings = plan.rows.iter().map(|r| {
        let severity = (LEVELS[r.level].to_owned(), Some(PAINT[r.level]));
        let (code, object) = ((r.code.to_owned(), None), (r.object.clone(), None));
        let file = match (&r.file, r.line) {
            (Some(file), Some(line)) => format!("{file}:{line}"),
            (Some(file), None) => file.clone(),
            _ => "-".to_owned(),
        };
        let file = (file, None);
        vec![severity, code, object, file, (r.message.clone(), None)]
    });
    let headers = ["SEVERITY", "CODE", "OBJECT", "FILE", "MESSAGE"];
    table(&mut out, "Findings", &headers, findings.collect(), colour);
    let _ = writeln!(out, "{}\n", summary_line(plan));
    out
}

/// `clusters/staging: 12 objects (3 generated by ResourceSets or ExternalSecrets): 0 errors, 1 warnings, 2 info;
/// by code: …`.
fn summary_line(plan: &Plan) -> String {
    let count = |l: usize| plan.rows.iter().filter(|r| r.level == l).count();
    let (total, generated) = (plan.documents + plan.generated, plan.generated);
    let (errors, warnings, info) = (count(2), count(1), count(0));
    let mut codes: BTreeMap<&str, usize> = BTreeMap::new();
    for r in plan.rows.iter().filter(|r| r.level > 0) {
        *codes.entry(r.code).or_default() += 1;
    }
    let codes: Vec<String> = codes.iter().map(|(c, n)| format!("{c} {n}")).collect();
    let prefix = plan.name.as_deref().map(|n| {
        if n.is_empty() {
            ".: ".to_owned()
        } else {
            format!("{n}: ")
        }
    });
    let mut line = format!(
        "{}{total} objects ({generated} generated by ResourceSets or ExternalSecrets): {errors} errors, {warnings} warnings, {info} info",
        prefix.unwrap_or_default()
    );
    if !codes.is_empty() {
        let _ = write!(line, " ({})", codes.join(", "));
    }
    line
}

/// `value` with the plan's cluster (`cluster`), when it has one.
pub(crate) fn tagged(plan: &Plan, mut value: Value) -> Value {
    if let (Some(name), Some(map)) = (&plan.name, value.as_object_mut()) {
        map.insert("cluster".into(), json!(name));
    }
    value
}

/// One finding of `plan` in the JSON document's shape (`findings`).
pub(crate) fn finding(plan: &Plan, row: &Row) -> Value {
    tagged(
        plan,
        json!({"severity": LEVELS[row.level.min(2)], "code": row.code, "domain": row.domain,
               "object": row.object, "file": row.file, "line": row.line, "message": row.message}),
    )
}

/// The plans as one JSON document (docs/plan-json.md): `fail_on` names the `--fail-on` severity
/// and `failed` says whether a finding reached it.
pub fn json(plans: &[Plan], fail_on: &str, failed: bool) -> Value {
    let documents: usize = plans.iter().map(|p| p.documents).sum();
    let generated: usize = plans.iter().map(|p| p.generated).sum();
    let mut document = json!({
        "schemaVersion": 1,
        "inputs": {"documents": documents, "generated": generated},
    });
    for (i, key) in KEYS.iter().enumerate() {
        let edges = plans
            .iter()
            .flat_map(|p| p.sections[i].iter().map(move |e| tagged(p, e.json.clone())));
        document[*key] = edges.collect();
    }
    let findings = plans
        .iter()
        .flat_map(|p| p.rows.iter().map(move |r| finding(p, r)));
    document["findings"] = findings.collect();
    let clusters = plans.iter().filter(|p| p.name.is_some()).map(|p| {
        let mut s = counts(p.rows.iter());
        s["documents"] = json!(p.documents);
        s["generated"] = json!(p.generated);
        json!({"name": p.name, "summary": s, "kustomizations": p.kustomizations})
    });
    document["clusters"] = clusters.collect();
    let mut total = counts(plans.iter().flat_map(|p| p.rows.iter()));
    total["failOn"] = json!(fail_on);
    total["failed"] = json!(failed);
    document["summary"] = total;
    document
}

/// `{"errors": n, "warnings": n, "info": n}` of some rows.
fn counts<'r>(rows: impl Iterator<Item = &'r Row>) -> Value {
    let mut n = [0usize; 3];
    rows.for_each(|r| n[r.level.min(2)] += 1);
    json!({"errors": n[2], "warnings": n[1], "info": n[0]})
}

/// The plans as a graphviz digraph: copies, watch edges and reload edges (red and dashed when
/// not good), a subgraph per cluster when there are several.
pub fn dot(plans: &[Plan]) -> String {
    let quote = |s: &str| Value::String(s.to_owned()).to_string();
    let mut out = String::from("digraph conflux {\n  rankdir=LR;\n");
    out.push_str("  node [fontname=\"Helvetica\", fontsize=10];\n");
    let several = plans.len() > 1;
    for (index, plan) in plans.iter().enumerate() {
        // Node names are per cluster: two clusters' objects never merge.
        let id = |node: &str| match (&plan.name, several) {
            (Some(name), true) => format!("{name}: {node}"),
            _ => node.to_owned(),
        };
        let mut nodes = BTreeMap::new();
        let mut edges = String::new();
        for (colour, section) in COLOURS.iter().zip(&plan.sections) {
            for e in section {
                let [from, to, state, ..] = e.cells.as_slice() else {
                    continue;
                };
                for node in [from, to] {
                    let shape = match node.split('/').next().unwrap_or_default() {
                        "ConfigMap" | "Secret" => "note",
                        "Deployment" | "StatefulSet" | "DaemonSet" | "CronJob" => "component",
                        _ => "box",
                    };
                    nodes.insert(node.clone(), shape);
                }
                let (colour, style) = [("red", "dashed"), (*colour, "solid")][usize::from(e.good)];
                let attrs = format!("label={}, color={colour}, style={style}", quote(state));
                let (from, to) = (quote(&id(from)), quote(&id(to)));
                let _ = writeln!(edges, "  {from} -> {to} [{attrs}];");
            }
        }
        if several {
            let label = plan.name.as_deref().unwrap_or_default();
            let _ = writeln!(
                out,
                "  subgraph cluster_{index} {{\n  label={};",
                quote(label)
            );
        }
        for (node, shape) in nodes {
            let error = plan.rows.iter().any(|r| r.level == 2 && r.object == node);
            let colour = if error { ", color=red" } else { "" };
            let label = if several {
                format!(", label={}", quote(&node))
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "  {} [shape={shape}{colour}{label}];",
                quote(&id(&node))
            );
        }
        out.push_str(&edges);
        if several {
            out.push_str("  }\n");
        }
    }
    out + "}\n"
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{Edge, row};

    /// A plan with one copy (good or not) and one finding about its target.
    fn plan(name: Option<&str>, good: bool) -> Plan {
        let copy = Edge {
            cells: ["Secret/a/s", "Secret/b/s", "copied", "copyFrom", "-"]
                .map(String::from)
                .into(),
            good,
            json: json!({"source": "Secret/a/s", "target": "Secret/b/s"}),
        };
        let mut finding = row(
            2,
            "copy",
            "CopyRefused",
            "Secret/b/s".into(),
            "no consent".into(),
        );
        finding.file = Some("b.yaml".into());
        finding.line = Some(3);
        Plan {
            name: name.map(str::to_owned),
            sections: [vec![copy], Vec::new(), Vec::new()],
            rows: vec![finding],
            documents: 2,
            generated: 1,
            kustomizations: Vec::new(),
        }
    }

    #[test]
    fn text_aligns_columns_and_pads_all_but_the_last() {
        let out = text(&[plan(None, true)], false);
        let copies = "Copies (1)\n  SOURCE      COPY        VERDICT  VIA       WHY\n  \
                      Secret/a/s  Secret/b/s  copied   copyFrom  -\n\n";
        assert!(out.starts_with(copies), "{out}");
        assert!(out.contains("Watch edges (0)\n  none\n\n"), "{out}");
        assert!(
            out.contains("  error     CopyRefused  Secret/b/s  b.yaml:3  no consent\n"),
            "{out}"
        );
        assert!(out.ends_with(
            "3 objects (1 generated by ResourceSets or ExternalSecrets): 1 errors, 0 warnings, 0 info (CopyRefused 1)\n\n"
        ));
    }

    #[test]
    fn text_of_several_clusters_names_each_and_counts_all() {
        let out = text(
            &[plan(Some("clusters/a"), true), plan(Some(""), false)],
            false,
        );
        assert!(out.starts_with("Cluster clusters/a\n\n"), "{out}");
        assert!(out.contains("\nCluster .\n\n"), "{out}");
        assert!(out.contains("\nclusters/a: 3 objects"), "{out}");
        assert!(out.contains("\n.: 3 objects"), "{out}");
        assert!(
            out.ends_with("\n2 clusters: 2 errors, 0 warnings, 0 info\n"),
            "{out}"
        );
    }

    #[test]
    fn colour_paints_titles_verdicts_and_severities() {
        let out = text(&[plan(Some("c"), false)], true);
        assert!(out.starts_with("\x1b[1;4mCluster c\x1b[0m\n\n\x1b[1mCopies (1)\x1b[0m\n"));
        assert!(
            out.contains("\x1b[31mcopied\x1b[0m"),
            "a bad verdict is red: {out}"
        );
        assert!(out.contains("\x1b[31merror\x1b[0m"), "{out}");
        assert!(text(&[plan(None, true)], true).contains("\x1b[32mcopied\x1b[0m"));
    }

    #[test]
    fn json_tags_each_item_with_its_cluster_and_sums_up() {
        let document = json(&[plan(Some("a"), true), plan(None, true)], "warning", true);
        assert_eq!(document["schemaVersion"], 1);
        assert_eq!(document["inputs"], json!({"documents": 4, "generated": 2}));
        assert_eq!(document["copies"][0]["cluster"], "a");
        assert!(document["copies"][1].get("cluster").is_none());
        assert_eq!(document["watchEdges"], json!([]));
        let finding = &document["findings"][0];
        assert_eq!(finding["severity"], "error");
        assert_eq!(
            (&finding["file"], &finding["line"]),
            (&json!("b.yaml"), &json!(3))
        );
        assert_eq!(document["clusters"].as_array().map(Vec::len), Some(1));
        assert_eq!(document["clusters"][0]["summary"]["documents"], 2);
        let summary =
            json!({"errors": 2, "warnings": 0, "info": 0, "failOn": "warning", "failed": true});
        assert_eq!(document["summary"], summary);
    }

    #[test]
    fn dot_draws_nodes_by_kind_and_bad_edges_red() {
        let out = dot(&[plan(None, false)]);
        assert!(
            out.contains("  \"Secret/b/s\" [shape=note, color=red];\n"),
            "{out}"
        );
        assert!(out.contains(
            "  \"Secret/a/s\" -> \"Secret/b/s\" [label=\"copied\", color=red, style=dashed];\n"
        ));
        let several = dot(&[plan(Some("a"), true), plan(Some("b"), true)]);
        assert!(
            several.contains("  subgraph cluster_1 {\n  label=\"b\";\n"),
            "{several}"
        );
        assert!(several.contains("\"b: Secret/a/s\" [shape=note, label=\"Secret/a/s\"];"));
        assert!(
            several.contains("color=darkgreen, style=solid"),
            "{several}"
        );
        assert!(several.ends_with("  }\n}\n"));
    }
}
