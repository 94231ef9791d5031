//! Kubernetes label selectors, exactly as `k8s.io/apimachinery/pkg/labels` (v0.32.3).
//!
//! [`Selector::parse`] is `labels.Parse`, [`Selector::from_label_selector`] is
//! `metav1.LabelSelectorAsSelector`, [`validate_label_selector`] is
//! `validation.ValidateLabelSelector`; printing, matching and error texts follow upstream byte for
//! byte (`shared/conformance/label-selectors.jsonl`). Matching never allocates.
//!
//! ```
//! use std::collections::BTreeMap;
//! use conflux_watch_index::selector::Selector;
//!
//! let sel = Selector::parse("app in (web, api), tier!=db").unwrap();
//! assert_eq!(sel.to_string(), "app in (api,web),tier!=db");
//! let labels = BTreeMap::from([("app".to_owned(), "web".to_owned())]);
//! assert!(sel.matches(&labels));
//! ```

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::hash::BuildHasher;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::Error;

mod label_selector;
mod parse;
mod printable;
mod validation;

pub use label_selector::validate_label_selector;

/// Read access to a set of labels, the only thing matching needs. Lookups must not allocate.
pub trait Labels {
    /// The value of label `key`, if the label is set.
    fn get(&self, key: &str) -> Option<&str>;
}

impl<S: BuildHasher> Labels for HashMap<String, String, S> {
    fn get(&self, key: &str) -> Option<&str> {
        HashMap::get(self, key).map(String::as_str)
    }
}

impl Labels for BTreeMap<String, String> {
    fn get(&self, key: &str) -> Option<&str> {
        BTreeMap::get(self, key).map(String::as_str)
    }
}

/// `ObjectMeta.labels` in k8s-openapi: no map means no labels.
impl Labels for Option<&BTreeMap<String, String>> {
    fn get(&self, key: &str) -> Option<&str> {
        self.and_then(|m| BTreeMap::get(m, key)).map(String::as_str)
    }
}

/// `ObjectMeta.labels` in k8s-openapi, borrowed as a whole.
impl Labels for Option<BTreeMap<String, String>> {
    fn get(&self, key: &str) -> Option<&str> {
        self.as_ref()
            .and_then(|m| BTreeMap::get(m, key))
            .map(String::as_str)
    }
}

/// Pairs; with a repeated key the first one counts.
impl<K: AsRef<str>, V: AsRef<str>> Labels for [(K, V)] {
    fn get(&self, key: &str) -> Option<&str> {
        self.iter()
            .find(|(k, _)| k.as_ref() == key)
            .map(|(_, v)| v.as_ref())
    }
}

impl<K: AsRef<str>, V: AsRef<str>, const N: usize> Labels for [(K, V); N] {
    fn get(&self, key: &str) -> Option<&str> {
        Labels::get(self.as_slice(), key)
    }
}

impl<K: AsRef<str>, V: AsRef<str>> Labels for Vec<(K, V)> {
    fn get(&self, key: &str) -> Option<&str> {
        Labels::get(self.as_slice(), key)
    }
}

impl<L: Labels + ?Sized> Labels for &L {
    fn get(&self, key: &str) -> Option<&str> {
        (**self).get(key)
    }
}

/// How a requirement relates its key and values (`selection.Operator`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Operator {
    /// `k=v`
    Equals,
    /// `k==v` (kept apart from `=` because it prints back as `==`)
    DoubleEquals,
    /// `k!=v`: also matches when the label is missing.
    NotEquals,
    /// `k in (a,b)`
    In,
    /// `k notin (a,b)`: also matches when the label is missing.
    NotIn,
    /// `k`
    Exists,
    /// `!k`
    DoesNotExist,
    /// `k>N` (string syntax only)
    GreaterThan,
    /// `k<N` (string syntax only)
    LessThan,
}

impl Operator {
    /// Go's `selection.Operator` string: `=`, `==`, `!=`, `in`, `notin`, `exists`, `!`, `gt`, `lt`.
    pub fn as_str(self) -> &'static str {
        match self {
            Operator::Equals => "=",
            Operator::DoubleEquals => "==",
            Operator::NotEquals => "!=",
            Operator::In => "in",
            Operator::NotIn => "notin",
            Operator::Exists => "exists",
            Operator::DoesNotExist => "!",
            Operator::GreaterThan => "gt",
            Operator::LessThan => "lt",
        }
    }
}

impl fmt::Display for Operator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One condition of a selector: a key, an operator and its values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    key: String,
    operator: Operator,
    values: Vec<String>,
    /// The value of a `>`/`<` requirement as a number, parsed once when it is built.
    bound: i64,
}

impl Requirement {
    /// `labels.NewRequirement` with a nil field path: every check, every error, in Go's order.
    fn new(key: String, operator: Operator, values: Vec<String>) -> Result<Self, String> {
        use validation::{
            aggregate, invalid, invalid_list, is_qualified_name, is_valid_label_value,
        };
        let mut errs = Vec::new();
        let key_errs = is_qualified_name(&key);
        if !key_errs.is_empty() {
            errs.push(invalid("key", &key, &key_errs.join("; ")));
        }
        let mut bound = 0;
        match operator {
            Operator::In | Operator::NotIn => {
                if values.is_empty() {
                    errs.push(invalid_list(
                        "values",
                        &values,
                        "for 'in', 'notin' operators, values set can't be empty",
                    ));
                }
            }
            Operator::Equals | Operator::DoubleEquals | Operator::NotEquals => {
                if values.len() != 1 {
                    errs.push(invalid_list(
                        "values",
                        &values,
                        "exact-match compatibility requires one single value",
                    ));
                }
            }
            Operator::Exists | Operator::DoesNotExist => {
                if !values.is_empty() {
                    errs.push(invalid_list(
                        "values",
                        &values,
                        "values set must be empty for exists and does not exist",
                    ));
                }
            }
            Operator::GreaterThan | Operator::LessThan => {
                if values.len() != 1 {
                    errs.push(invalid_list(
                        "values",
                        &values,
                        "for 'Gt', 'Lt' operators, exactly one value is required",
                    ));
                }
                for (i, v) in values.iter().enumerate() {
                    match parse_go_int(v) {
                        Some(n) => bound = n,
                        None => errs.push(invalid(
                            &format!("values[{i}]"),
                            v,
                            "for 'Gt', 'Lt' operators, the value must be an integer",
                        )),
                    }
                }
            }
        }
        for (i, v) in values.iter().enumerate() {
            let value_errs = is_valid_label_value(v);
            if !value_errs.is_empty() {
                errs.push(invalid(
                    &format!("values[{i}][{key}]"),
                    v,
                    &value_errs.join("; "),
                ));
            }
        }
        match aggregate(errs) {
            Some(e) => Err(e),
            None => Ok(Requirement {
                key,
                operator,
                values,
                bound,
            }),
        }
    }

    /// The label key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The operator.
    pub fn operator(&self) -> Operator {
        self.operator
    }

    /// The values: sorted and deduplicated when parsed from a string, as given when converted
    /// from a `LabelSelector`. Empty for `exists` and `!`.
    pub fn values(&self) -> &[String] {
        &self.values
    }

    /// `Requirement.Matches`. Does not allocate.
    pub fn matches<L: Labels + ?Sized>(&self, labels: &L) -> bool {
        let value = labels.get(&self.key);
        match self.operator {
            Operator::In | Operator::Equals | Operator::DoubleEquals => {
                value.is_some_and(|v| self.values.iter().any(|x| x == v))
            }
            Operator::NotIn | Operator::NotEquals => {
                value.is_none_or(|v| !self.values.iter().any(|x| x == v))
            }
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
            Operator::GreaterThan | Operator::LessThan => {
                let Some(n) = value.and_then(parse_go_int) else {
                    return false;
                };
                if self.operator == Operator::GreaterThan {
                    n > self.bound
                } else {
                    n < self.bound
                }
            }
        }
    }
}

impl fmt::Display for Requirement {
    /// Go's `Requirement.String()`: values print sorted, duplicates kept.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.operator == Operator::DoesNotExist {
            f.write_str("!")?;
        }
        f.write_str(&self.key)?;
        let (op, parens) = match self.operator {
            Operator::Exists | Operator::DoesNotExist => return Ok(()),
            Operator::Equals => ("=", false),
            Operator::DoubleEquals => ("==", false),
            Operator::NotEquals => ("!=", false),
            Operator::In => (" in ", true),
            Operator::NotIn => (" notin ", true),
            Operator::GreaterThan => (">", false),
            Operator::LessThan => ("<", false),
        };
        f.write_str(op)?;
        if parens {
            f.write_str("(")?;
        }
        let mut sorted: Vec<&str> = self.values.iter().map(String::as_str).collect();
        sorted.sort_unstable();
        f.write_str(&sorted.join(","))?;
        if parens {
            f.write_str(")")?;
        }
        Ok(())
    }
}

/// Go's `strconv.ParseInt(s, 10, 64)`: optional sign, then ASCII digits, no underscores, in
/// range. Does not allocate.
fn parse_go_int(s: &str) -> Option<i64> {
    let (negative, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() {
        return None;
    }
    let mut magnitude: u64 = 0;
    for b in digits.bytes() {
        if !b.is_ascii_digit() {
            return None;
        }
        magnitude = magnitude
            .checked_mul(10)?
            .checked_add(u64::from(b - b'0'))?;
    }
    if negative {
        if magnitude > i64::MIN.unsigned_abs() {
            return None;
        }
        Some(0i64.wrapping_sub_unsigned(magnitude))
    } else {
        i64::try_from(magnitude).ok()
    }
}

/// A label selector: requirements ANDed together, or the selector that matches nothing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selector {
    requirements: Vec<Requirement>,
    /// `labels.Nothing()`, what a nil `LabelSelector` becomes.
    nothing: bool,
}

impl Selector {
    /// `labels.Parse`: the string syntax (`k=v`, `k in (a,b)`, `!k`, `k>3`, ...). The empty
    /// string selects everything. Errors carry upstream's exact message.
    pub fn parse(input: &str) -> Result<Self, Error> {
        let mut requirements = parse::parse(input).map_err(Error::Selector)?;
        requirements.sort_by(|a, b| a.key.as_bytes().cmp(b.key.as_bytes()));
        Ok(Selector {
            requirements,
            nothing: false,
        })
    }

    /// `metav1.LabelSelectorAsSelector`. Takes `&LabelSelector` or `Option<&LabelSelector>`:
    /// `None` (a nil selector) matches nothing, an empty one matches everything. `Gt`/`Lt` are
    /// not operators here.
    ///
    /// ```
    /// use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    /// use conflux_watch_index::selector::Selector;
    ///
    /// let ls: LabelSelector = serde_json::from_str(
    ///     r#"{"matchLabels":{"app":"web"},"matchExpressions":[{"key":"tier","operator":"Exists"}]}"#,
    /// ).unwrap();
    /// assert_eq!(Selector::from_label_selector(&ls).unwrap().to_string(), "app=web,tier");
    /// assert!(Selector::from_label_selector(None).unwrap().is_nothing());
    /// ```
    pub fn from_label_selector<'a>(
        selector: impl Into<Option<&'a LabelSelector>>,
    ) -> Result<Self, Error> {
        label_selector::as_selector(selector.into()).map_err(Error::Selector)
    }

    /// `labels.Everything()`: no requirements, matches every label set.
    pub fn everything() -> Self {
        Selector::default()
    }

    /// `labels.Nothing()`: matches no label set, prints as `""`, and is not empty.
    pub fn nothing() -> Self {
        Selector {
            requirements: Vec::new(),
            nothing: true,
        }
    }

    /// `Selector.Empty()`: true only for a selector without requirements (not for
    /// [`Selector::nothing`]).
    pub fn is_empty(&self) -> bool {
        !self.nothing && self.requirements.is_empty()
    }

    /// True for [`Selector::nothing`].
    pub fn is_nothing(&self) -> bool {
        self.nothing
    }

    /// The requirements, sorted by key (bytes); equal keys keep their input order. Empty for
    /// [`Selector::nothing`].
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// `Selector.Matches`: every requirement holds. Does not allocate.
    pub fn matches<L: Labels + ?Sized>(&self, labels: &L) -> bool {
        !self.nothing && self.requirements.iter().all(|r| r.matches(labels))
    }
}

impl fmt::Display for Selector {
    /// Go's `Selector.String()`, the canonical form: requirements joined by `,`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for Selector {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Selector::parse(s)
    }
}

/// `validation.IsQualifiedName`, the label-key check: the messages, empty when `key` is valid.
pub fn validate_key(key: &str) -> Vec<String> {
    validation::is_qualified_name(key)
}

/// `validation.IsValidLabelValue`: the messages, empty when `value` is valid.
pub fn validate_value(value: &str) -> Vec<String> {
    validation::is_valid_label_value(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn go_int_parsing() {
        assert_eq!(parse_go_int("+4"), Some(4));
        assert_eq!(parse_go_int("-7"), Some(-7));
        assert_eq!(parse_go_int("007"), Some(7));
        assert_eq!(parse_go_int("9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_go_int("-9223372036854775808"), Some(i64::MIN));
        for bad in [
            "",
            "+",
            "-",
            "3.0",
            " 3",
            "1_000",
            "0x10",
            "9223372036854775808",
            "-9223372036854775809",
            "١",
        ] {
            assert_eq!(parse_go_int(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn operators_match_like_upstream() {
        let web = labels(&[("app", "web"), ("n", "5")]);
        let none = labels(&[]);
        let cases = [
            ("app=web", true, false),
            ("app==web", true, false),
            ("app!=web", false, true),
            ("app in (api,web)", true, false),
            ("app notin (api,web)", false, true),
            ("app", true, false),
            ("!app", false, true),
            ("n>4", true, false),
            ("n<5", false, false),
            ("n>-1", false, false),
        ];
        for (input, on_web, on_none) in cases {
            let Ok(sel) = Selector::parse(input) else {
                // `n>-1` is rejected: `-1` is not a valid label value.
                assert_eq!(input, "n>-1");
                continue;
            };
            assert_eq!(sel.matches(&web), on_web, "{input} on web");
            assert_eq!(sel.matches(&none), on_none, "{input} on no labels");
        }
    }

    #[test]
    fn label_values_parse_like_strconv() {
        let sel = Selector::parse("n>3").unwrap();
        assert!(sel.matches(&[("n", "+4")]));
        assert!(sel.matches(&[("n", "007")]));
        assert!(!sel.matches(&[("n", "3.0")]));
        assert!(!sel.matches(&[("n", "")]));
        let lt = Selector::parse("n<0").unwrap();
        assert!(lt.matches(&[("n", "-7")]));
    }

    #[test]
    fn integer_bounds_at_the_edges_of_i64() {
        let max = Selector::parse("n>9223372036854775807").unwrap();
        assert!(!max.matches(&[("n", "9223372036854775807")]));
        assert!(
            !max.matches(&[("n", "9223372036854775808")]),
            "out of range: no match"
        );
        let lt = Selector::parse("n<9223372036854775807").unwrap();
        assert!(lt.matches(&[("n", "-9223372036854775808")]));
        assert!(!lt.matches(&[("n", "-9223372036854775809")]));
        assert!(!lt.matches(&[("m", "1")]), "a missing label never compares");
    }

    #[test]
    fn requirements_expose_key_operator_values() {
        let sel = Selector::parse("x notin (b,a,b),!y,z>07").unwrap();
        let got: Vec<(&str, &str, Vec<&str>)> = sel
            .requirements()
            .iter()
            .map(|r| {
                (
                    r.key(),
                    r.operator().as_str(),
                    r.values().iter().map(String::as_str).collect(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("x", "notin", vec!["a", "b"]),
                ("y", "!", vec![]),
                ("z", "gt", vec!["07"]),
            ]
        );
    }

    #[test]
    fn pairs_use_the_first_occurrence_of_a_key() {
        let sel = Selector::parse("app=web").unwrap();
        assert!(sel.matches(&[("app", "web"), ("app", "api")]));
        assert!(!sel.matches(&[("app", "api"), ("app", "web")]));
    }

    #[test]
    fn label_containers() {
        let sel = Selector::parse("app=web").unwrap();
        let map = labels(&[("app", "web")]);
        let hash: HashMap<String, String> = map.clone().into_iter().collect();
        assert!(sel.matches(&map));
        assert!(sel.matches(&hash));
        assert!(sel.matches(&Some(&map)));
        assert!(!sel.matches(&None::<&BTreeMap<String, String>>));
        assert!(sel.matches(&vec![("app".to_owned(), "web".to_owned())]));
        assert!(sel.matches(&[("app", "web")][..]));
    }

    #[test]
    fn everything_and_nothing() {
        let all = Selector::everything();
        assert!(all.is_empty() && all.matches(&labels(&[])));
        let none = Selector::nothing();
        assert!(!none.is_empty() && !none.matches(&labels(&[])));
        assert_eq!(none.to_string(), "");
        assert_eq!(Selector::parse(" \t\r\n").unwrap(), all);
    }

    #[test]
    fn canonical_form_sorts_keys_and_values() {
        let sel = Selector::parse("b notin (z, y), a, !c, x in (in)").unwrap();
        assert_eq!(sel.to_string(), "a,b notin (y,z),!c,x in (in)");
    }
}
