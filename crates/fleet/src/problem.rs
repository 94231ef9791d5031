//! What reading a fleet or building one of its paths could not do exactly: each becomes a finding
//! of `conflux plan` rather than a silent guess.

/// One problem found while reading the fleet (not while auditing its objects).
#[derive(Debug, Clone)]
pub struct Problem {
    /// 1 warning, 2 error.
    pub level: usize,
    /// A stable reason code.
    pub code: &'static str,
    /// The object or path concerned.
    pub object: String,
    /// The file, relative to the repository root, when known.
    pub file: Option<String>,
    /// The line in `file` where it is, when known (else the line of the object's `kind:`).
    pub line: Option<usize>,
    /// What is wrong.
    pub message: String,
}
