//! `completions <shell>` and `man`: what users of other CLIs expect to find, generated from
//! the one clap definition so they never drift from `--help`. Neither needs a checkout.

use std::io::Write;

use clap::{Args, CommandFactory};

use crate::cli::Cli;
use crate::exit::{self, Failure};

#[derive(Debug, Clone, Args)]
pub struct CompletionsArgs {
    /// The shell: bash, elvish, fish, powershell or zsh. E.g.
    /// `afk-supervisor completions bash > ~/.local/share/bash-completion/completions/afk-supervisor`.
    pub shell: clap_complete::Shell,
}

pub fn completions(args: &CompletionsArgs) -> Result<i32, Failure> {
    let mut cmd = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "afk-supervisor", &mut out);
    emit(&out)
}

pub fn man() -> Result<i32, Failure> {
    let mut out = Vec::new();
    clap_mangen::Man::new(Cli::command())
        .render(&mut out)
        .map_err(|e| Failure::failed(format!("man page: {e}")))?;
    emit(&out)
}

/// Writes to stdout; a reader that went away (`| head`) is not a failure.
fn emit(bytes: &[u8]) -> Result<i32, Failure> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(Failure::failed(format!("stdout: {e}")))
        }
        _ => Ok(exit::OK),
    }
}
