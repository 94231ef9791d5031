//! Readiness and liveness as a tree of named parts, served on `/readyz` and `/healthz` by
//! [`crate::admin`].
//!
//! A part is ready when its flag is set (a leaf) or when every child and check below it is ready
//! (an inner node), so readiness waits for the slowest initial list. Checks are evaluated when
//! asked: an informer reports "not synced" while its watch is failing, and "stalled" (not live)
//! when a subscriber has left events unread longer than the stall bound.

use crate::sync::lock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// What a check says right now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// Serving normally (for readiness).
    pub ready: bool,
    /// Not wedged (for liveness). `false` only when restarting the process could help.
    pub live: bool,
    /// Why not, for the probe bodies and logs.
    pub detail: Option<String>,
}

impl Probe {
    /// Ready and live.
    pub fn ok() -> Self {
        Probe {
            ready: true,
            live: true,
            detail: None,
        }
    }

    /// Live but not ready, with the reason.
    pub fn not_ready(detail: impl Into<String>) -> Self {
        Probe {
            ready: false,
            live: true,
            detail: Some(detail.into()),
        }
    }
}

type CheckFn = dyn Fn() -> Probe + Send + Sync;

/// One node of the health tree.
pub struct Health {
    name: String,
    ready: AtomicBool,
    parts: Mutex<Vec<Arc<Health>>>,
    checks: Mutex<Vec<(String, Arc<CheckFn>)>>,
}

impl std::fmt::Debug for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Health")
            .field("name", &self.name)
            .field("ready", &self.is_ready())
            .finish_non_exhaustive()
    }
}

impl Default for Health {
    fn default() -> Self {
        Health::new("conflux")
    }
}

impl Health {
    /// A root (or detached) node.
    pub fn new(name: impl Into<String>) -> Self {
        Health {
            name: name.into(),
            ready: AtomicBool::new(false),
            parts: Mutex::new(Vec::new()),
            checks: Mutex::new(Vec::new()),
        }
    }

    /// The node's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Marks a leaf ready (or not).
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// A new child that must be ready before this node is.
    pub fn part(&self, name: impl Into<String>) -> Arc<Health> {
        let part = Arc::new(Health::new(name));
        lock(&self.parts).push(part.clone());
        part
    }

    /// Attaches `part` as a child (for a node made elsewhere, such as a leadership term's).
    pub fn attach(&self, part: Arc<Health>) {
        lock(&self.parts).push(part);
    }

    /// Removes the child `part` (the same node, not one of the same name).
    pub fn detach(&self, part: &Arc<Health>) {
        lock(&self.parts).retain(|p| !Arc::ptr_eq(p, part));
    }

    /// Adds a check evaluated at every probe.
    pub fn check(
        &self,
        name: impl Into<String>,
        check: impl Fn() -> Probe + Send + Sync + 'static,
    ) {
        lock(&self.checks).push((name.into(), Arc::new(check)));
    }

    /// Whether this node and everything below it is ready.
    pub fn is_ready(&self) -> bool {
        self.problems(true).is_empty()
    }

    /// Whether nothing below this node is wedged.
    pub fn is_live(&self) -> bool {
        self.problems(false).is_empty()
    }

    /// The parts that are not ready (`readiness`) or not live, as `path: detail` lines.
    pub fn problems(&self, readiness: bool) -> Vec<String> {
        let mut out = Vec::new();
        self.collect(&self.name, readiness, &mut out);
        out
    }

    fn collect(&self, path: &str, readiness: bool, out: &mut Vec<String>) {
        let parts = lock(&self.parts).clone();
        let checks = lock(&self.checks).clone();
        if readiness && parts.is_empty() && checks.is_empty() && !self.ready.load(Ordering::Relaxed)
        {
            out.push(format!("{path}: not ready"));
        }
        for (name, check) in checks {
            let probe = check();
            let bad = if readiness { !probe.ready } else { !probe.live };
            if bad {
                let detail = probe.detail.unwrap_or_else(|| "failing".to_owned());
                out.push(format!("{path}/{name}: {detail}"));
            }
        }
        for part in parts {
            part.collect(&format!("{path}/{}", part.name), readiness, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_waits_for_every_part_and_check() {
        let root = Health::new("root");
        assert!(!root.is_ready(), "a leaf without its flag");
        root.set_ready(true);
        assert!(root.is_ready());

        let root = Health::new("root");
        let copy = root.part("copy");
        let (cms, secrets) = (copy.part("ConfigMap"), copy.part("Secret"));
        let reload = root.part("reload");
        cms.set_ready(true);
        reload.set_ready(true);
        assert_eq!(root.problems(true), ["root/copy/Secret: not ready"]);
        secrets.set_ready(true);
        assert!(root.is_ready());

        let flag = Arc::new(AtomicBool::new(false));
        let seen = flag.clone();
        reload.check("watch", move || {
            if seen.load(Ordering::Relaxed) {
                Probe::ok()
            } else {
                Probe {
                    ready: false,
                    live: false,
                    detail: Some("stalled".into()),
                }
            }
        });
        assert_eq!(root.problems(true), ["root/reload/watch: stalled"]);
        assert!(!root.is_live());
        flag.store(true, Ordering::Relaxed);
        assert!(root.is_ready() && root.is_live());
    }
}
