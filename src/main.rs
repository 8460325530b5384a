use std::process::ExitCode;

fn main() -> ExitCode {
    let code = afk_supervisor::cli::main(std::env::args_os());
    ExitCode::from(u8::try_from(code).unwrap_or(afk_supervisor::exit_code::FAILED as u8))
}
