//! `conflux plan --base REV`: a pull request's review. The fleet is planned twice, at the base
//! revision and as the working tree is, and only what changed is reported: findings that appear
//! or disappear, and copies, watch edges and reload edges added or removed. A finding is the
//! same when its cluster, severity, code, object, file and message are (its line may move).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::plan::{LEVELS, Plan};
use crate::render::{KEYS, finding, tagged};
use crate::scratch::TempDir;
use crate::{Error, Result};

/// What changed between the base's plans and the working tree's.
#[derive(Debug, Default)]
pub struct Review {
    /// The base revision, as given.
    pub base: String,
    /// Findings of the working tree the base does not have (JSON, as `conflux plan -o json`).
    pub new: Vec<Value>,
    /// Findings of the base the working tree no longer has.
    pub resolved: Vec<Value>,
    /// Per section (copies, watch edges, reload edges): edges added, as (JSON, text cells).
    pub added: [Vec<(Value, Vec<String>)>; 3],
    /// Per section: edges removed.
    pub removed: [Vec<(Value, Vec<String>)>; 3],
}

/// Section titles, in [`KEYS`] order.
const TITLES: [&str; 3] = ["Copies", "Watch edges", "Reload edges"];

fn findings(plans: &[Plan]) -> Vec<Value> {
    plans
        .iter()
        .flat_map(|p| p.rows.iter().map(move |r| finding(p, r)))
        .collect()
}

fn without_line(finding: &Value) -> Value {
    let mut key = finding.clone();
    if let Some(map) = key.as_object_mut() {
        map.remove("line");
    }
    key
}

fn edges(plans: &[Plan], section: usize) -> Vec<(Value, Vec<String>)> {
    plans
        .iter()
        .flat_map(|p| {
            p.sections[section].iter().map(move |e| {
                let mut cells = e.cells.clone();
                if let Some(name) = &p.name {
                    cells.insert(0, name.clone());
                }
                (tagged(p, e.json.clone()), cells)
            })
        })
        .collect()
}

/// What changed from `base` (the plans at `revision`) to `head`.
pub fn review(revision: &str, base: &[Plan], head: &[Plan]) -> Review {
    let (before, after) = (findings(base), findings(head));
    let keys = |list: &[Value]| list.iter().map(without_line).collect::<Vec<_>>();
    let (before_keys, after_keys) = (keys(&before), keys(&after));
    // The findings of `list` (keyed by `keys`) whose key `other` lacks.
    let only = |list: &[Value], keys: &[Value], other: &[Value]| -> Vec<Value> {
        list.iter()
            .zip(keys)
            .filter(|(_, k)| !other.contains(k))
            .map(|(f, _)| f.clone())
            .collect()
    };
    let mut review = Review {
        base: revision.to_owned(),
        new: only(&after, &after_keys, &before_keys),
        resolved: only(&before, &before_keys, &after_keys),
        ..Review::default()
    };
    for section in 0..3 {
        let (old, new) = (edges(base, section), edges(head, section));
        review.added[section] = new
            .iter()
            .filter(|(json, _)| !old.iter().any(|(o, _)| o == json))
            .cloned()
            .collect();
        review.removed[section] = old
            .iter()
            .filter(|(json, _)| !new.iter().any(|(n, _)| n == json))
            .cloned()
            .collect();
    }
    review
}

impl Review {
    /// Whether a new finding is at least as severe as `threshold` (0 info, 1 warning, 2 error).
    pub fn fails(&self, threshold: usize) -> bool {
        self.new.iter().any(|f| level(f) >= threshold)
    }

    /// The review as one JSON document (docs/plan-json.md, "Review").
    pub fn json(&self, threshold: usize) -> Value {
        let mut document = json!({
            "schemaVersion": 1,
            "base": self.base,
            "newFindings": self.new,
            "resolvedFindings": self.resolved,
        });
        for (i, key) in KEYS.iter().enumerate() {
            let pick = |list: &[(Value, Vec<String>)]| -> Vec<Value> {
                list.iter().map(|(json, _)| json.clone()).collect()
            };
            document[*key] =
                json!({"added": pick(&self.added[i]), "removed": pick(&self.removed[i])});
        }
        document["summary"] = json!({
            "new": counts(&self.new),
            "resolved": counts(&self.resolved),
            "failOn": LEVELS[threshold.min(2)],
            "failed": self.fails(threshold),
        });
        document
    }

    /// The review as plain text.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "changes against {}: {}", self.base, self.headline());
        for (title, list) in [("new", &self.new), ("resolved", &self.resolved)] {
            for f in list {
                let _ = writeln!(
                    out,
                    "  {title:<9} {:<8} {:<26} {}{}  {}",
                    text(f, "severity"),
                    text(f, "code"),
                    text(f, "object"),
                    location(f).map(|l| format!("  {l}")).unwrap_or_default(),
                    text(f, "message")
                );
            }
        }
        for (i, title) in TITLES.iter().enumerate() {
            for (sign, list) in [("+", &self.added[i]), ("-", &self.removed[i])] {
                for (_, cells) in list {
                    let _ = writeln!(out, "  {sign} {title}: {}", cells.join("  "));
                }
            }
        }
        out
    }

    /// The review as Markdown, for a pull request comment.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "### conflux plan: changes against `{}`\n\n{}\n",
            self.base,
            self.headline()
        );
        for (title, list) in [
            ("New findings", &self.new),
            ("Resolved findings", &self.resolved),
        ] {
            if list.is_empty() {
                continue;
            }
            let _ = writeln!(
                out,
                "#### {title}\n\n| severity | code | object | where | message |\n|---|---|---|---|---|"
            );
            for f in list {
                let _ = writeln!(
                    out,
                    "| {} | `{}` | `{}` | {} | {} |",
                    text(f, "severity"),
                    text(f, "code"),
                    text(f, "object"),
                    location(f).map(|l| format!("`{l}`")).unwrap_or_default(),
                    cell(text(f, "message"))
                );
            }
            out.push('\n');
        }
        for (i, title) in TITLES.iter().enumerate() {
            if self.added[i].is_empty() && self.removed[i].is_empty() {
                continue;
            }
            let _ = writeln!(out, "#### {title}\n\n| | edge |\n|---|---|");
            for (sign, list) in [("added", &self.added[i]), ("removed", &self.removed[i])] {
                for (_, cells) in list {
                    let _ = writeln!(out, "| {sign} | {} |", cell(&cells.join(" · ")));
                }
            }
            out.push('\n');
        }
        out
    }

    fn headline(&self) -> String {
        let edges: usize = (0..3)
            .map(|i| self.added[i].len() + self.removed[i].len())
            .sum();
        let new = counts(&self.new);
        format!(
            "{} new findings ({} errors, {} warnings, {} info), {} resolved, {edges} edges added or removed",
            self.new.len(),
            new["errors"],
            new["warnings"],
            new["info"],
            self.resolved.len()
        )
    }
}

fn text<'v>(value: &'v Value, key: &str) -> &'v str {
    value.get(key).and_then(Value::as_str).unwrap_or_default()
}

fn level(finding: &Value) -> usize {
    LEVELS
        .iter()
        .position(|l| *l == text(finding, "severity"))
        .unwrap_or(0)
}

fn location(finding: &Value) -> Option<String> {
    let file = finding.get("file").and_then(Value::as_str)?;
    Some(match finding.get("line").and_then(Value::as_u64) {
        Some(line) => format!("{file}:{line}"),
        None => file.to_owned(),
    })
}

/// Text safe in a Markdown table cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

fn counts(findings: &[Value]) -> Value {
    let mut n = [0usize; 3];
    findings.iter().for_each(|f| n[level(f)] += 1);
    json!({"errors": n[2], "warnings": n[1], "info": n[0]})
}

/// The directory `path` (in a Git working tree) as it is at `revision`, extracted into a
/// scratch directory removed on drop (`git archive`, so only committed files, as Flux sees
/// them).
#[derive(Debug)]
pub struct BaseTree {
    scratch: TempDir,
    path: PathBuf,
}

impl BaseTree {
    /// Extracts the repository holding `path` at `revision`.
    pub fn extract(path: &Path, revision: &str) -> Result<BaseTree> {
        let git = |args: &[&str]| -> Result<String> {
            let out = Command::new("git")
                .arg("-C")
                .arg(path)
                .args(args)
                .output()
                .map_err(|source| Error::Run {
                    program: "git".into(),
                    source,
                })?;
            if !out.status.success() {
                return Err(Error::Base {
                    revision: revision.to_owned(),
                    reason: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
                });
            }
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
        };
        let prefix = git(&["rev-parse", "--show-prefix"])?;
        git(&["rev-parse", "--verify", &format!("{revision}^{{commit}}")])?;
        let scratch = TempDir::new()?;
        let tree = BaseTree {
            path: scratch.path.join(&prefix),
            scratch,
        };
        let mut archive = Command::new("git")
            .arg("-C")
            .arg(path)
            .args(["archive", "--format=tar", revision])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|source| Error::Run {
                program: "git".into(),
                source,
            })?;
        let tar = Command::new("tar")
            .arg("-x")
            .arg("-C")
            .arg(&tree.scratch.path)
            .stdin(archive.stdout.take().map_or(Stdio::null(), Stdio::from))
            .status()
            .map_err(|source| Error::Run {
                program: "tar".into(),
                source,
            })?;
        let archived = archive.wait().map_err(|source| Error::Run {
            program: "git".into(),
            source,
        })?;
        if !tar.success() || !archived.success() {
            return Err(Error::Base {
                revision: revision.to_owned(),
                reason: "git archive | tar -x failed".into(),
            });
        }
        std::fs::create_dir_all(&tree.path).map_err(|e| Error::io(tree.path.display(), e))?;
        Ok(tree)
    }

    /// The directory given, as it is at the base revision.
    pub fn path(&self) -> &Path {
        &self.path
    }
}
