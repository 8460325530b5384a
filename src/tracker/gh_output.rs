//! Why gh's output is not what its call asks for: the one error of every parser of gh's
//! output, `gh.rs`'s and `gh_provenance.rs`'s, in a file of its own so neither parser
//! imports the other.

/// Why gh's output is not the shape its call asks for (the caller adds the command line).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutputError {
    /// Not JSON of the expected shape; serde's words, cut.
    #[error("{0}")]
    Json(String),
    #[error("unknown issue state {0:?}")]
    State(String),
}
