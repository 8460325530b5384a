//! The one error type that reaches the edge of the program, and the one printer of an
//! error's chain: a command's typed error becomes a [`Failure`] with its exit code (by `?`,
//! through the `From` conversions below, or by a constructor where the code depends on the
//! call), and [`chain`] says it in one line.

use std::error::Error;

use crate::exit_code;

/// A failure reported once, at the edge, as one line on stderr with its exit code.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Failure {
    pub code: i32,
    pub message: String,
}

impl Failure {
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
        }
    }

    pub fn failed(message: impl Into<String>) -> Self {
        Failure::new(exit_code::FAILED, message)
    }

    pub fn usage(message: impl Into<String>) -> Self {
        Failure::new(exit_code::USAGE, message)
    }

    pub fn config(message: impl Into<String>) -> Self {
        Failure::new(exit_code::CONFIG, message)
    }

    /// `e` with its causes, as [`chain`] says it, ending the program with `code`.
    pub fn of(code: i32, e: &(dyn Error + 'static)) -> Self {
        Failure::new(code, chain(e))
    }

    /// [`Failure::of`] after what was being done or read (`status --fleet`, a path), for an
    /// error that does not name it itself (an `io::Error`).
    pub fn about(code: i32, what: impl std::fmt::Display, e: &(dyn Error + 'static)) -> Self {
        Failure::new(code, format!("{what}: {}", chain(e)))
    }
}

/// `e` and each of its causes (`Error::source`), joined by `: `, in one line; a cause the
/// text before it already says (most messages name their cause) is not said twice.
pub fn chain(e: &(dyn Error + 'static)) -> String {
    let mut line = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !text.is_empty() && !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        cause = c.source();
    }
    line
}

/// The typed errors a command meets where the exit code follows from the type alone:
/// each becomes its [`Failure`] by `?`.
macro_rules! failures {
    ($($code:ident: $($ty:ty),+;)*) => {
        $($(
            impl From<$ty> for Failure {
                fn from(e: $ty) -> Self {
                    Failure::of(exit_code::$code, &e)
                }
            }
        )+)*
    };
}

failures! {
    FAILED: crate::control::ControlError,
        crate::control::operator::OperatorError,
        crate::event_log::stream::EventsError,
        crate::fleets::FleetsError,
        crate::mcp_server::McpError,
        crate::sweeps::unblock_sweep::UnblockError,
        crate::sweeps::branch_reaper::ReapError;
    USAGE: crate::control::operator::BadUntil;
    CONFIG: crate::config::ConfigError,
        crate::cluster::SetupError,
        crate::program::AgentError,
        crate::sandbox::SandboxError;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    enum Outer {
        #[error("reading {path}: {source}")]
        Says {
            path: &'static str,
            #[source]
            source: std::io::Error,
        },
        #[error("reading {path}")]
        Hides {
            path: &'static str,
            #[source]
            source: std::io::Error,
        },
    }

    /// A cause the outer message already carries is said once; one it leaves out is added,
    /// and so on down the chain.
    #[test]
    fn the_chain_says_each_cause_once() {
        let io = || std::io::Error::other("disk on fire");
        let says = Outer::Says {
            path: "a.toon",
            source: io(),
        };
        assert_eq!(chain(&says), "reading a.toon: disk on fire");
        let hides = Outer::Hides {
            path: "a.toon",
            source: io(),
        };
        assert_eq!(chain(&hides), "reading a.toon: disk on fire");
        let f: Failure = crate::config::ConfigError("x.toml:1:2: bad".into()).into();
        assert_eq!(
            (f.code, f.message.as_str()),
            (exit_code::CONFIG, "x.toml:1:2: bad")
        );
    }
}
