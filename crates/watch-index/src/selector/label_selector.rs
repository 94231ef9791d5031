//! `metav1.LabelSelector`: conversion (`LabelSelectorAsSelector`, `pkg/apis/meta/v1/helpers.go`)
//! and validation (`ValidateLabelSelector`, `pkg/apis/meta/v1/validation`), apimachinery v0.32.3.
//!
//! The two disagree on purpose, as upstream does: conversion stops at the first bad requirement
//! and checks the operator before the key; validation reports every problem.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::validation::{go_quote, invalid, is_qualified_name, is_valid_label_value};
use super::{Operator, Requirement, Selector};

/// `LabelSelectorAsSelector`, with the error message as `Err`.
pub(super) fn as_selector(selector: Option<&LabelSelector>) -> Result<Selector, String> {
    let Some(ls) = selector else {
        return Ok(Selector::nothing());
    };
    let labels = ls.match_labels.as_ref();
    let expressions = ls.match_expressions.as_deref().unwrap_or_default();
    let mut requirements = Vec::with_capacity(labels.map_or(0, |l| l.len()) + expressions.len());
    // Go walks matchLabels in random map order; with several bad entries any one may be
    // reported. Key order is one of those orders.
    for (k, v) in labels.into_iter().flatten() {
        requirements.push(Requirement::new(
            k.clone(),
            Operator::Equals,
            vec![v.clone()],
        )?);
    }
    for expr in expressions {
        let operator = match expr.operator.as_str() {
            "In" => Operator::In,
            "NotIn" => Operator::NotIn,
            "Exists" => Operator::Exists,
            "DoesNotExist" => Operator::DoesNotExist,
            other => {
                return Err(format!(
                    "{} is not a valid label selector operator",
                    go_quote(other)
                ));
            }
        };
        requirements.push(Requirement::new(
            expr.key.clone(),
            operator,
            expr.values.clone().unwrap_or_default(),
        )?);
    }
    // `Selector.Add` sorts by key; stable, as Go's sort is for up to 12 requirements.
    requirements.sort_by(|a, b| a.key.as_bytes().cmp(b.key.as_bytes()));
    Ok(Selector {
        requirements,
        nothing: false,
    })
}

/// `validation.ValidateLabelSelector(selector, LabelSelectorValidationOptions{}, path)`: the
/// `Error()` text of every problem, in upstream's order (`matchLabels` in key order, where Go's
/// order is random). `path` is the selector's field path, such as `spec.selector`. A `None`
/// (nil) selector is valid. Takes `&LabelSelector` or `Option<&LabelSelector>`.
///
/// ```
/// use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
/// use conflux_watch_index::selector::validate_label_selector;
///
/// let ls: LabelSelector = serde_json::from_str(r#"{"matchExpressions":[{"key":"x","operator":"Gt"}]}"#).unwrap();
/// assert_eq!(
///     validate_label_selector(&ls, "spec.selector"),
///     [r#"spec.selector.matchExpressions[0].operator: Invalid value: "Gt": not a valid selector operator"#]
/// );
/// ```
pub fn validate_label_selector<'a>(
    selector: impl Into<Option<&'a LabelSelector>>,
    path: &str,
) -> Vec<String> {
    let mut errs = Vec::new();
    let Some(ls) = selector.into() else {
        return errs;
    };
    let child = |name: &str| {
        if path.is_empty() {
            name.to_owned()
        } else {
            format!("{path}.{name}")
        }
    };
    let labels_path = child("matchLabels");
    for (k, v) in ls.match_labels.iter().flatten() {
        for msg in is_qualified_name(k) {
            errs.push(invalid(&labels_path, k, &msg));
        }
        for msg in is_valid_label_value(v) {
            errs.push(invalid(&labels_path, v, &msg));
        }
    }
    let expressions_path = child("matchExpressions");
    for (i, expr) in ls.match_expressions.iter().flatten().enumerate() {
        let at = format!("{expressions_path}[{i}]");
        let values = expr.values.as_deref().unwrap_or_default();
        match expr.operator.as_str() {
            "In" | "NotIn" => {
                if values.is_empty() {
                    errs.push(format!(
                        "{at}.values: Required value: must be specified when `operator` is 'In' or 'NotIn'"
                    ));
                }
            }
            "Exists" | "DoesNotExist" => {
                if !values.is_empty() {
                    errs.push(format!(
                        "{at}.values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
                    ));
                }
            }
            other => errs.push(invalid(
                &format!("{at}.operator"),
                other,
                "not a valid selector operator",
            )),
        }
        for msg in is_qualified_name(&expr.key) {
            errs.push(invalid(&format!("{at}.key"), &expr.key, &msg));
        }
        for (j, value) in values.iter().enumerate() {
            for msg in is_valid_label_value(value) {
                errs.push(invalid(&format!("{at}.values[{j}]"), value, &msg));
            }
        }
    }
    errs
}
