//! The `${VAR}` expression language of fluxcd/pkg `envsubst` (docs/design.md section 2.1), strict and
//! not, byte-for-byte.
//!
//! ```
//! use std::collections::HashMap;
//! use conflux_postbuild_subst::envsubst::{eval, Mode};
//!
//! let vars = HashMap::from([("app".to_string(), "web".to_string())]);
//! let text = eval("name: ${app}-${env:=dev} $${literal}", &vars, Mode::NonStrict)?;
//! assert_eq!(text, "name: web-dev ${literal}");
//!
//! let err = eval("${missing}", &vars, Mode::Strict).unwrap_err();
//! assert_eq!(err.to_string(), r#"variable not set (strict mode): "missing""#);
//! # Ok::<(), conflux_postbuild_subst::Error>(())
//! ```
//!
//! Behaviour worth knowing (all of it upstream's):
//! - only `${…}` is an expression; `$var` is literal; `$$` outside braces is an escaped `$`;
//! - the first `}` closes an expression; arguments may nest `${…}` and are evaluated before the
//!   operator looks at the variable;
//! - values are inserted verbatim, never re-expanded;
//! - offsets and lengths are in bytes. A substring that splits a multi-byte character yields
//!   bytes that are not UTF-8: [`eval`] turns each such byte into U+FFFD (as Go prints such a
//!   string as JSON), [`eval_bytes`] returns the exact bytes;
//! - a NUL byte ends the template (upstream's scanner reads byte 0 as end of input).
//!
//! Where we deliberately differ: a negative substring length, which panics upstream, is an error
//! ([`SubstitutionErrorKind::NegativeSubstringLength`]); evaluation is one linear pass (upstream's
//! `$$` handling is quadratic).

mod evaluator;
mod functions;
mod glob;
mod text;

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;

use crate::Error;

/// Whether a missing variable is an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Mode {
    /// A missing variable is the empty string (Flux's default).
    #[default]
    NonStrict,
    /// A missing variable is an error unless a default operator (`:=`, `:-`, `=`, `:+`, `:?`)
    /// handles it (kustomize-controller `--feature-gates=StrictPostBuildSubstitutions=true`,
    /// `flux envsubst --strict`). Set-but-empty is fine.
    Strict,
}

/// What went wrong in a template. `Display` is upstream's message, exactly.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SubstitutionErrorKind {
    /// `${` not followed by a name (`${}`, `${ v}`, `${!v}`).
    #[error("unable to parse variable name")]
    ParseVariableName,
    /// A name followed by something that is no operator (`${v }`, `${v-d}`, `${v`).
    #[error("missing closing brace")]
    MissingClosingBrace,
    /// A malformed operator or a missing `}` after its arguments.
    #[error("bad substitution")]
    BadSubstitution,
    /// An operator argument is missing or unterminated (`${v:=x`, `${f#}`).
    #[error("unable to parse substitution within function")]
    ParseFunctionArgument,
    /// Strict mode: the variable is not defined.
    #[error("variable not set (strict mode): \"{0}\"")]
    VariableNotSet(String),
    /// `${v:offset:length}` with a negative length: upstream Go panics with this slice error.
    #[error("bad substitution: negative substring length: {0}")]
    NegativeSubstringLength(String),
}

/// Where variables come from: a name to its value, `None` when it is not defined. One evaluation
/// looks each name up at most once in the common case (recent lookups are remembered), so the
/// source should answer the same for the same name during an evaluation.
pub trait VarSource {
    /// The value of `name`, or `None` when it is not defined.
    fn lookup(&self, name: &str) -> Option<Cow<'_, str>>;
}

impl<S: BuildHasher> VarSource for HashMap<String, String, S> {
    fn lookup(&self, name: &str) -> Option<Cow<'_, str>> {
        self.get(name).map(|value| Cow::Borrowed(value.as_str()))
    }
}

impl VarSource for BTreeMap<String, String> {
    fn lookup(&self, name: &str) -> Option<Cow<'_, str>> {
        self.get(name).map(|value| Cow::Borrowed(value.as_str()))
    }
}

impl<T: VarSource + ?Sized> VarSource for &T {
    fn lookup(&self, name: &str) -> Option<Cow<'_, str>> {
        (**self).lookup(name)
    }
}

/// Variables from a closure, for example the process environment:
/// `VarFn(|name: &str| std::env::var(name).ok())`.
#[derive(Debug, Clone, Copy)]
pub struct VarFn<F>(pub F);

impl<F: Fn(&str) -> Option<String>> VarSource for VarFn<F> {
    fn lookup(&self, name: &str) -> Option<Cow<'_, str>> {
        (self.0)(name).map(Cow::Owned)
    }
}

/// A variable used by a template without being defined, outside a default operator: it
/// silently becomes the empty string in non-strict mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UndefinedVariable {
    /// The variable name.
    pub name: String,
    /// Byte offset of the expression's `$` in the template.
    pub offset: usize,
}

/// Substitutes every `${…}` of `template` (`envsubst.Eval`). Bytes that are not UTF-8 (only a
/// substring splitting a character produces them) become U+FFFD; see [`eval_bytes`].
pub fn eval(template: &str, vars: &(impl VarSource + ?Sized), mode: Mode) -> Result<String, Error> {
    eval_bytes(template, vars, mode).map(text::into_string_go_lossy)
}

/// Like [`eval`], but returns the exact bytes upstream produces (Go strings are bytes).
pub fn eval_bytes(
    template: &str,
    vars: &(impl VarSource + ?Sized),
    mode: Mode,
) -> Result<Vec<u8>, Error> {
    evaluator::Evaluator::new(template, vars, mode)
        .run()
        .map(|(out, _)| out)
}

/// Evaluates `template` in non-strict mode and lists the variables it uses without defining
/// them (outside default operators), in order of use. Never fails on a missing variable; a
/// template that does not parse is still an error.
pub fn undefined_variables(
    template: &str,
    vars: &(impl VarSource + ?Sized),
) -> Result<Vec<UndefinedVariable>, Error> {
    evaluator::Evaluator::new(template, vars, Mode::NonStrict)
        .collect_undefined()
        .run()
        .map(|(_, undefined)| undefined)
}
