//! Whether the configured agent can be run, checked before anything is claimed or spawned
//! (`docs/SPEC.md` §9, §11.5): the supervisor refuses to start with exit 78 and the
//! built-in worker exits 78, so a missing agent parks a fleet with one line that names the
//! key instead of tripping circuits over a crash loop.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::config::Config;
use crate::layout::Layout;

/// Why the agent cannot be run; each message is one line naming `agent.command` and the
/// file it came from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AgentError {
    #[error(
        "agent.command is not set ({from}): the built-in worker has no agent to run; set [agent] command = [\"/path/to/agent\", ...] there"
    )]
    Missing { from: String },
    #[error("agent.command is empty ({from}): name the agent's program as its first element")]
    Empty { from: String },
    #[error("agent.command[0] = {program:?} ({from}): {why}")]
    NotRunnable {
        program: String,
        from: String,
        why: NotRunnable,
    },
}

/// Why a program cannot be run, as `execvp` would find it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotRunnable {
    #[error("does not exist")]
    Missing,
    /// The `stat` failed (the error's text: `io::Error` is neither `Clone` nor `Eq`).
    #[error("cannot be examined: {0}")]
    Unexaminable(String),
    #[error("is a directory, not a program")]
    Directory,
    #[error("is not a regular file")]
    NotRegular,
    #[error("is not executable (chmod +x it)")]
    NotExecutable,
    #[error("not found on PATH")]
    NotOnPath,
    /// The first candidate on PATH that exists, and why it was refused.
    #[error("{} {why}", path.display())]
    Refused {
        path: PathBuf,
        why: Box<NotRunnable>,
    },
}

/// Where `agent.command` came from, for messages.
fn source_of(config: &Config, layout: &Layout) -> String {
    match &config.file {
        Some(f) => f.display().to_string(),
        None => format!(
            "no config file; {} does not exist",
            layout.repo_config().display()
        ),
    }
}

/// The agent's argv, checked: set, non-empty, and its program an executable file (looked up
/// on `PATH` as `execvp` does; a relative path with a `/` is taken from the repo). Returns the
/// resolved program path.
pub fn check_agent(config: &Config, layout: &Layout) -> Result<PathBuf, AgentError> {
    let source = || source_of(config, layout);
    let Some(argv) = &config.agent.command else {
        return Err(AgentError::Missing { from: source() });
    };
    let Some(program) = argv.first().filter(|p| !p.is_empty()) else {
        return Err(AgentError::Empty { from: source() });
    };
    let path = std::env::var_os("PATH");
    find_program(program, path.as_deref(), layout.repo()).map_err(|why| AgentError::NotRunnable {
        program: program.clone(),
        from: source(),
        why,
    })
}

/// `argv` with its program replaced by `program` (the path [`check_agent`] resolved), made
/// absolute against the working directory should the repo path itself be relative: the
/// agent runs in the worktree, where a relative path would name another file.
pub fn with_program(argv: Option<&[String]>, program: &Path) -> Vec<String> {
    let mut argv = argv.map(<[String]>::to_vec).unwrap_or_default();
    let absolute = std::path::absolute(program).unwrap_or_else(|_| program.to_path_buf());
    if let Some(first) = argv.first_mut()
        && first.contains('/')
    {
        *first = absolute.to_string_lossy().into_owned();
    }
    argv
}

/// Resolves `program` like `execvp`: with a `/` it is that path (relative to `base`),
/// else the first executable regular file named so in a `PATH` entry (an empty entry is
/// `base`). The error says what is wrong in a few words.
pub fn find_program(
    program: &str,
    path: Option<&OsStr>,
    base: &Path,
) -> Result<PathBuf, NotRunnable> {
    if program.contains('/') {
        // `./agent.sh` from the repo is `<repo>/agent.sh`: said so when it is refused, since
        // the relative path alone does not say where it was looked for.
        let p: PathBuf = base.join(program).components().collect();
        return match executable(&p) {
            Ok(()) => Ok(p),
            Err(why) if !Path::new(program).is_absolute() => Err(NotRunnable::Refused {
                path: p,
                why: Box::new(why),
            }),
            Err(why) => Err(why),
        };
    }
    // glibc's default when PATH is unset.
    let path = path.unwrap_or(OsStr::new("/bin:/usr/bin"));
    let mut refused: Option<(PathBuf, NotRunnable)> = None;
    for dir in path.as_bytes().split(|b| *b == b':') {
        let dir = if dir.is_empty() {
            base.to_path_buf()
        } else {
            base.join(OsStr::from_bytes(dir))
        };
        let candidate = dir.join(program);
        match executable(&candidate) {
            Ok(()) => return Ok(candidate),
            Err(why) if candidate.exists() && refused.is_none() => {
                refused = Some((candidate, why));
            }
            Err(_) => {}
        }
    }
    Err(match refused {
        Some((path, why)) => NotRunnable::Refused {
            path,
            why: Box::new(why),
        },
        None => NotRunnable::NotOnPath,
    })
}

/// `Ok` when `p` (links followed) is a regular file this process may execute.
fn executable(p: &Path) -> Result<(), NotRunnable> {
    let meta = match std::fs::metadata(p) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(NotRunnable::Missing);
        }
        Err(e) => return Err(NotRunnable::Unexaminable(e.to_string())),
    };
    if meta.is_dir() {
        return Err(NotRunnable::Directory);
    }
    if !meta.is_file() {
        return Err(NotRunnable::NotRegular);
    }
    nix::unistd::access(p, nix::unistd::AccessFlags::X_OK).map_err(|_| NotRunnable::NotExecutable)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn script(dir: &Path, name: &str, mode: u32) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    #[test]
    fn programs_resolve_like_execvp() {
        let d = tempfile::tempdir().unwrap();
        let (a, b) = (d.path().join("a"), d.path().join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        script(&a, "agent", 0o644);
        let good = script(&b, "agent", 0o755);
        let path = format!("{}:{}", a.display(), b.display());
        assert_eq!(
            find_program("agent", Some(OsStr::new(&path)), d.path()),
            Ok(good.clone())
        );
        assert_eq!(
            find_program(good.to_str().unwrap(), None, Path::new("/")),
            Ok(good)
        );
        assert_eq!(
            find_program("b/agent", None, d.path()),
            Ok(d.path().join("b/agent"))
        );
        let only_a = a.display().to_string();
        let e = find_program("agent", Some(OsStr::new(&only_a)), d.path())
            .unwrap_err()
            .to_string();
        // Even root is refused a file with no execute bit at all.
        assert!(e.contains("is not executable"), "{e}");
        assert_eq!(
            find_program("nope", Some(OsStr::new(&only_a)), d.path()).map_err(|e| e.to_string()),
            Err("not found on PATH".into())
        );
        assert_eq!(
            find_program("/no/such/agent", None, d.path()).map_err(|e| e.to_string()),
            Err("does not exist".into())
        );
        assert!(
            find_program("a", Some(OsStr::new("")), d.path())
                .unwrap_err()
                .to_string()
                .contains("is a directory")
        );
    }

    #[test]
    fn the_agent_check_names_the_key_and_the_file() {
        let d = tempfile::tempdir().unwrap();
        let layout = Layout::new(d.path());
        let mut config = Config::default();
        let e = check_agent(&config, &layout).unwrap_err().to_string();
        assert!(
            e.starts_with("agent.command is not set (no config file; ") && !e.contains('\n'),
            "{e}"
        );
        config.file = Some(d.path().join("c.toml"));
        config.agent.command = Some(vec!["/no/such/agent".into()]);
        let e = check_agent(&config, &layout).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "agent.command[0] = \"/no/such/agent\" ({}): does not exist",
                d.path().join("c.toml").display()
            )
        );
        config.agent.command = Some(vec![]);
        assert!(matches!(
            check_agent(&config, &layout),
            Err(AgentError::Empty { .. })
        ));
        config.agent.command = Some(vec!["/bin/sh".into()]);
        assert_eq!(check_agent(&config, &layout), Ok(PathBuf::from("/bin/sh")));
    }
}
