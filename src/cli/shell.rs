//! `completions <shell>` and `man`: what users of other CLIs expect to find, generated from
//! the one clap definition so they never drift from `--help`. Neither needs a checkout.
//!
//! The man page is one page: every command is a section of it, since no
//! `afk-supervisor-<cmd>(1)` page is installed for a reference to name.

use std::io::Write;

use clap::{Args, CommandFactory};

use crate::cli::Cli;
use crate::cli::Failure;
use crate::exit_code;

#[derive(Debug, Clone, Args)]
pub struct CompletionsArgs {
    /// The shell: bash, elvish, fish, powershell or zsh. E.g.
    /// `afk-supervisor completions bash > ~/.local/share/bash-completion/completions/afk-supervisor`.
    pub shell: clap_complete::Shell,
}

/// The program's name, which the completion scripts complete.
const BIN: &str = "afk-supervisor";

pub fn completions(args: &CompletionsArgs) -> Result<i32, Failure> {
    let mut cmd = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, BIN, &mut out);
    if args.shell == clap_complete::Shell::Bash {
        out = bash_states_agree(&out);
    }
    emit(&out)
}

/// clap_complete's bash script names the state of `afk-supervisor logs` two ways: the loop
/// that reads the words sets `afk__supervisor__subcmd__logs` (the bin name's `-` as `__`),
/// the `case` that offers the options matches `afk__subcmd__supervisor__subcmd__logs` (the
/// `-` as a subcommand separator), so no option of any subcommand ever completed
/// (clap-rs/clap#6421). The labels are spelled as the loop spells them; a fixed generator
/// leaves nothing to replace.
fn bash_states_agree(script: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(script);
    let escaped = BIN.replace('-', "__");
    let split = BIN.replace('-', "__subcmd__");
    text.replace(&split, &escaped).into_bytes()
}

pub fn man() -> Result<i32, Failure> {
    let cmd = Cli::command();
    let page = clap_mangen::Man::new(cmd.clone());
    let mut out = Vec::new();
    let rendered = (|| {
        page.render_title(&mut out)?;
        page.render_name_section(&mut out)?;
        page.render_synopsis_section(&mut out)?;
        page.render_description_section(&mut out)?;
        page.render_options_section(&mut out)?;
        out.extend_from_slice(commands_section(&cmd).as_bytes());
        out.extend_from_slice(exit_status_section().as_bytes());
        page.render_version_section(&mut out)
    })();
    rendered.map_err(|e| Failure::about(exit_code::FAILED, "man page", &e))?;
    emit(&out)
}

/// `COMMANDS`: each command (and each of its subcommands) a subsection with what it does,
/// its usage and its own options.
fn commands_section(root: &clap::Command) -> String {
    let mut out = String::from(".SH COMMANDS\n");
    for sub in root.get_subcommands() {
        command_entry(sub, BIN, &mut out);
    }
    out
}

fn command_entry(cmd: &clap::Command, parent: &str, out: &mut String) {
    let path = format!("{parent} {}", cmd.get_name());
    out.push_str(&format!(".SS \"{}\"\n", roff_escape(&path)));
    let about = cmd
        .get_long_about()
        .or(cmd.get_about())
        .map(|a| a.to_string())
        .unwrap_or_default();
    push_text(&about, out);
    let mut usage = cmd.clone().bin_name(path.clone());
    out.push_str(".PP\n");
    push_text(&usage.render_usage().to_string(), out);
    for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
        out.push_str(".TP\n");
        out.push_str(&arg_heading(arg));
        out.push('\n');
        let help = arg
            .get_long_help()
            .or(arg.get_help())
            .map(|h| h.to_string())
            .unwrap_or_default();
        push_text(&help, out);
    }
    for sub in cmd.get_subcommands() {
        command_entry(sub, &path, out);
    }
}

/// `\fB\-n\fR, \fB\-\-tail\fR \fIN\fR` or `\fIN\fR` for a positional.
fn arg_heading(arg: &clap::Arg) -> String {
    let values: Vec<String> = arg
        .get_value_names()
        .map(|v| v.iter().map(|n| n.to_string()).collect())
        .unwrap_or_else(|| vec![arg.get_id().as_str().to_uppercase()]);
    let value = values
        .iter()
        .map(|v| format!("\\fI{}\\fR", roff_escape(v)))
        .collect::<Vec<_>>()
        .join(" ");
    if arg.is_positional() {
        return value;
    }
    let mut names = Vec::new();
    if let Some(s) = arg.get_short() {
        names.push(format!("\\fB\\-{}\\fR", roff_escape(&s.to_string())));
    }
    if let Some(l) = arg.get_long() {
        names.push(format!("\\fB\\-\\-{}\\fR", roff_escape(l)));
    }
    let mut line = names.join(", ");
    if arg.get_action().takes_values() {
        line.push(' ');
        line.push_str(&value);
    }
    line
}

/// `EXIT STATUS`: the one table ([`exit_code::Exit::ALL`]), laid out as `--help`'s footer.
fn exit_status_section() -> String {
    let mut out = String::from(".SH \"EXIT STATUS\"\n.nf\n");
    for e in exit_code::Exit::ALL {
        out.push_str(&roff_line(&format!("{:<4} {}", e.code(), e.meaning())));
        out.push('\n');
    }
    out.push_str(".fi\n");
    out
}

/// Paragraphs of plain text: a blank line starts a new one.
fn push_text(text: &str, out: &mut String) {
    for line in text.trim().lines() {
        if line.trim().is_empty() {
            out.push_str(".PP\n");
        } else {
            out.push_str(&roff_line(line));
            out.push('\n');
        }
    }
}

/// One line of text that roff takes as text: escaped, and never read as a request.
fn roff_line(line: &str) -> String {
    let escaped = roff_escape(line);
    match escaped.starts_with('.') || escaped.starts_with('\'') {
        true => format!("\\&{escaped}"),
        false => escaped,
    }
}

fn roff_escape(s: &str) -> String {
    s.replace('\\', "\\e").replace('-', "\\-")
}

/// Writes to stdout; a reader that went away (`| head`) is not a failure.
fn emit(bytes: &[u8]) -> Result<i32, Failure> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(Failure::about(exit_code::FAILED, "stdout", &e))
        }
        _ => Ok(exit_code::OK),
    }
}
