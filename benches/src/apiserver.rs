//! The API server's own account of the requests it served (`apiserver_request_total` and
//! `apiserver_request_duration_seconds` on `/metrics`): what a component asked of it during a
//! measurement and how long the server took to answer, and when the cluster is quiet.
//!
//! The counts are server-wide (every client, kube-controller-manager included), so a benchmark
//! takes them around a phase in which only the component under test is busy.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use anyhow::Context as _;
use kube::Client;
use tokio::time::Instant;

/// Verbs that change state (the ones [`settle`] waits to stop).
const WRITE_VERBS: [&str; 6] = [
    "POST",
    "PUT",
    "PATCH",
    "DELETE",
    "DELETECOLLECTION",
    "APPLY",
];

/// What a request did: verb and resource, summed over codes, groups, versions and scopes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestKind {
    /// `GET`, `LIST`, `WATCH`, `POST`, `PATCH`, `PUT`, `DELETE`, ...
    pub verb: String,
    /// The resource (`configmaps`), empty for non-resource paths such as `/metrics`.
    pub resource: String,
    /// The subresource (`status`), or empty.
    pub subresource: String,
}

impl RequestKind {
    /// True for verbs that change state.
    pub fn is_write(&self) -> bool {
        WRITE_VERBS.contains(&self.verb.as_str())
    }
}

impl fmt::Display for RequestKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.verb, self.resource)?;
        if !self.subresource.is_empty() {
            write!(f, "/{}", self.subresource)?;
        }
        Ok(())
    }
}

/// Requests of one kind served so far.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Served {
    /// How many (`apiserver_request_total`).
    pub count: u64,
    /// The server's time answering them, summed (`apiserver_request_duration_seconds_sum`; a
    /// WATCH counts until it ends).
    pub seconds: f64,
}

/// Requests served so far, by kind.
pub type RequestCounts = BTreeMap<RequestKind, Served>;

/// Reads the request counts and durations from the API server's `/metrics` (needs a client
/// allowed to read it, such as the test cluster's admin).
pub async fn request_counts(client: &Client) -> anyhow::Result<RequestCounts> {
    let request = http::Request::get("/metrics")
        .body(Vec::new())
        .context("building the /metrics request")?;
    let text = client
        .request_text(request)
        .await
        .context("reading the API server's /metrics")?;
    Ok(parse_request_counts(&text))
}

/// `apiserver_request_total` and `apiserver_request_duration_seconds_sum` samples of a Prometheus
/// text exposition, summed by [`RequestKind`]. Lines that do not parse are skipped.
pub fn parse_request_counts(text: &str) -> RequestCounts {
    let mut counts = RequestCounts::new();
    for line in text.lines() {
        let (rest, is_count) = if let Some(rest) = line.strip_prefix("apiserver_request_total{") {
            (rest, true)
        } else if let Some(rest) = line.strip_prefix("apiserver_request_duration_seconds_sum{") {
            (rest, false)
        } else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let labels = parse_labels(labels);
        let label = |name: &str| labels.get(name).cloned().unwrap_or_default();
        let kind = RequestKind {
            verb: label("verb"),
            resource: label("resource"),
            subresource: label("subresource"),
        };
        let served = counts.entry(kind).or_default();
        if is_count {
            // Counters are integers; the exposition writes them as floats.
            served.count += value.max(0.0).round() as u64;
        } else {
            served.seconds += value.max(0.0);
        }
    }
    counts
}

/// `name="value"` pairs of a label set (the text between the braces), with `\"`, `\\` and `\n`
/// unescaped.
fn parse_labels(text: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        let name: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if name.is_empty() || chars.next() != Some('"') {
            return labels;
        }
        let mut value = String::new();
        while let Some(c) = chars.next() {
            match c {
                '"' => break,
                '\\' => match chars.next() {
                    Some('n') => value.push('\n'),
                    Some(other) => value.push(other),
                    None => break,
                },
                c => value.push(c),
            }
        }
        labels.insert(name.trim().to_owned(), value);
    }
}

/// What was served between two readings (kinds whose count did not grow are left out).
pub fn difference(before: &RequestCounts, after: &RequestCounts) -> RequestCounts {
    after
        .iter()
        .filter_map(|(kind, now)| {
            let then = before.get(kind).copied().unwrap_or_default();
            let count = now.count.saturating_sub(then.count);
            let seconds = (now.seconds - then.seconds).max(0.0);
            (count > 0).then(|| (kind.clone(), Served { count, seconds }))
        })
        .collect()
}

/// The number of writes in `counts`.
pub fn writes(counts: &RequestCounts) -> u64 {
    counts
        .iter()
        .filter(|(kind, _)| kind.is_write())
        .map(|(_, served)| served.count)
        .sum()
}

/// One line, `VERB resource[/subresource] N (mean M ms)` joined by commas, without `WATCH` (long
/// requests are counted when they end) and non-resource requests (such as the readings of
/// `/metrics`).
pub fn summary(counts: &RequestCounts) -> String {
    let parts: Vec<String> = counts
        .iter()
        .filter(|(kind, _)| kind.verb != "WATCH" && !kind.resource.is_empty())
        .map(|(kind, served)| {
            let mean_ms = served.seconds * 1e3 / served.count.max(1) as f64;
            format!("{kind} {} (mean {mean_ms:.1} ms)", served.count)
        })
        .collect();
    if parts.is_empty() {
        "none".to_owned()
    } else {
        parts.join(", ")
    }
}

/// Waits until the API server has served no write for `quiet` (kube-controller-manager done with
/// new namespaces, a controller done with follow-up reconciles), polling every 250 ms; fails after
/// `timeout`. Returns the counts at that point.
pub async fn settle(
    client: &Client,
    quiet: Duration,
    timeout: Duration,
) -> anyhow::Result<RequestCounts> {
    let deadline = Instant::now() + timeout;
    let mut last = request_counts(client).await?;
    let mut quiet_since = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = request_counts(client).await?;
        if writes(&now) != writes(&last) {
            quiet_since = Instant::now();
        }
        last = now;
        if quiet_since.elapsed() >= quiet {
            return Ok(last);
        }
        if Instant::now() >= deadline {
            anyhow::bail!("the API server still served writes after {timeout:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"# HELP apiserver_request_total [STABLE] Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",contentType="application/json",dry_run="",group="",resource="configmaps",scope="resource",subresource="",verb="GET",version="v1"} 3
apiserver_request_total{code="404",component="apiserver",contentType="application/json",dry_run="",group="",resource="configmaps",scope="resource",subresource="",verb="GET",version="v1"} 2
apiserver_request_total{code="201",component="apiserver",contentType="application/json",dry_run="",group="conflux.dev",resource="configsyncs",scope="resource",subresource="status",verb="PATCH",version="v1alpha1"} 1
apiserver_request_total{code="200",component="",contentType="text/plain",dry_run="",group="",resource="",scope="",subresource="/metrics",verb="GET",version=""} 7
apiserver_request_count{code="200",resource="configmaps",verb="GET"} 99
apiserver_request_duration_seconds_sum{component="apiserver",dry_run="",group="",resource="configmaps",scope="resource",subresource="",verb="GET",version="v1"} 0.05
apiserver_request_duration_seconds_count{component="apiserver",dry_run="",group="",resource="configmaps",scope="resource",subresource="",verb="GET",version="v1"} 5
"#;

    fn kind(verb: &str, resource: &str, subresource: &str) -> RequestKind {
        RequestKind {
            verb: verb.into(),
            resource: resource.into(),
            subresource: subresource.into(),
        }
    }

    #[test]
    fn sums_by_verb_and_resource() {
        let counts = parse_request_counts(SAMPLE);
        let count = |k: RequestKind| counts.get(&k).map(|s| s.count);
        assert_eq!(count(kind("GET", "configmaps", "")), Some(5));
        assert_eq!(count(kind("PATCH", "configsyncs", "status")), Some(1));
        assert_eq!(count(kind("GET", "", "/metrics")), Some(7));
        let seconds = counts
            .get(&kind("GET", "configmaps", ""))
            .map(|s| s.seconds)
            .unwrap_or_default();
        assert!((seconds - 0.05).abs() < 1e-9);
        assert_eq!(counts.len(), 3);
        assert_eq!(writes(&counts), 1);
    }

    #[test]
    fn differences_and_summary() {
        let before = parse_request_counts(SAMPLE);
        let mut after = before.clone();
        let mut add = |k: RequestKind, count: u64, seconds: f64| {
            let served = after.entry(k).or_default();
            served.count += count;
            served.seconds += seconds;
        };
        add(kind("GET", "configmaps", ""), 1, 0.002);
        add(kind("PATCH", "configmaps", ""), 1000, 3.0);
        add(kind("GET", "", "/metrics"), 1, 0.1);
        let grown = difference(&before, &after);
        assert_eq!(grown.len(), 3);
        assert_eq!(
            summary(&grown),
            "GET configmaps 1 (mean 2.0 ms), PATCH configmaps 1000 (mean 3.0 ms)"
        );
        assert_eq!(summary(&RequestCounts::new()), "none");
    }

    #[test]
    fn labels_with_escapes() {
        let labels = parse_labels(r#"a="x\"y",b="1,2""#);
        assert_eq!(labels.get("a").map(String::as_str), Some("x\"y"));
        assert_eq!(labels.get("b").map(String::as_str), Some("1,2"));
    }
}
