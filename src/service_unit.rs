//! The systemd user unit of a fleet: the template `systemd/afk-supervisor@.service` (built
//! into the binary) with this binary's absolute path, and an instance drop-in per repo that
//! carries the `PATH` git, gh and the agent need and the fleet size.

use std::ffi::OsStr;
use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};

/// The shipped template, byte for byte.
pub const TEMPLATE: &str = include_str!("../systemd/afk-supervisor@.service");

/// The binary path the shipped template names, replaced on install.
const TEMPLATE_BIN: &str = "/usr/local/bin/afk-supervisor";

/// The template's file name.
pub const TEMPLATE_NAME: &str = "afk-supervisor@.service";

/// What the last resort of `PATH` is after the tools' own directories.
const BASE_PATH: [&str; 3] = ["/usr/local/bin", "/usr/bin", "/bin"];

#[derive(Debug, thiserror::Error)]
pub enum UnitError {
    #[error("{what}: {path}: path is not valid UTF-8, which a unit file cannot name")]
    NotUtf8 { what: &'static str, path: PathBuf },
    #[error("{what}: {path}: a unit file cannot name a path with a newline, quote or backslash")]
    Unquotable { what: &'static str, path: PathBuf },
    #[error("git is not on PATH; the fleet cannot run without it")]
    NoGit,
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
}

/// The files of one repo's instance, and where they go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Install {
    /// `afk-supervisor@<escaped repo>.service`.
    pub unit: String,
    pub template_path: PathBuf,
    pub template: String,
    pub dropin_path: PathBuf,
    pub dropin: String,
    /// Tools that were not found (named in the drop-in as a comment, and to the operator).
    pub missing: Vec<String>,
}

/// `systemd-escape --path`: slashes collapsed and trimmed, `/` to `-`, every byte outside
/// `[A-Za-z0-9:_.]` (and a leading `.`) as `\xNN`; the root is `-`.
pub fn escape_path(path: &Path) -> String {
    let text = path.as_os_str().as_encoded_bytes();
    let parts: Vec<&[u8]> = text
        .split(|b| *b == b'/')
        .filter(|p| !p.is_empty())
        .collect();
    if parts.is_empty() {
        return "-".to_string();
    }
    let mut out = String::new();
    for (n, part) in parts.iter().enumerate() {
        if n > 0 {
            out.push('-');
        }
        for (i, b) in part.iter().enumerate() {
            let plain = b.is_ascii_alphanumeric() || matches!(b, b':' | b'_' | b'.');
            if plain && !(n == 0 && i == 0 && *b == b'.') {
                out.push(char::from(*b));
            } else {
                let _ = write!(out, "\\x{b:02x}");
            }
        }
    }
    out
}

/// `$XDG_CONFIG_HOME/systemd/user`, else `$HOME/.config/systemd/user`.
pub fn user_unit_dir(xdg_config_home: Option<&OsStr>, home: Option<&OsStr>) -> Option<PathBuf> {
    let base = match xdg_config_home.filter(|v| Path::new(v).is_absolute()) {
        Some(x) => PathBuf::from(x),
        None => PathBuf::from(home.filter(|h| !h.is_empty())?).join(".config"),
    };
    Some(base.join("systemd/user"))
}

/// The unit name of a repo's instance.
pub fn unit_name(repo: &Path) -> String {
    format!("afk-supervisor@{}.service", escape_path(repo))
}

/// The first executable `program` in `path` (a program with a `/` is taken as it is).
pub fn find_program(program: &str, path: Option<&OsStr>) -> Option<PathBuf> {
    if program.contains('/') {
        let p = PathBuf::from(program);
        return is_executable(&p).then_some(p);
    }
    std::env::split_paths(path?)
        .filter(|d| d.is_absolute())
        .map(|d| d.join(program))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// A path a unit file can carry as it is.
fn unit_path<'a>(what: &'static str, path: &'a Path) -> Result<&'a str, UnitError> {
    let s = path.to_str().ok_or_else(|| UnitError::NotUtf8 {
        what,
        path: path.to_path_buf(),
    })?;
    if s.chars()
        .any(|c| c.is_control() || matches!(c, '"' | '\'' | '\\' | '%' | '$'))
    {
        return Err(UnitError::Unquotable {
            what,
            path: path.to_path_buf(),
        });
    }
    Ok(s)
}

/// What an install writes: the template with `exe`, and the drop-in whose `PATH` holds
/// the directories of this binary, git, gh and the agent (`agent` as configured), then
/// the system ones.
pub fn plan(
    repo: &Path,
    exe: &Path,
    unit_dir: &Path,
    workers: Option<usize>,
    agent: Option<&str>,
    path: Option<&OsStr>,
) -> Result<Install, UnitError> {
    let exe_s = unit_path("this binary", exe)?;
    unit_path("--repo", repo)?;
    let git = find_program("git", path).ok_or(UnitError::NoGit)?;
    let mut tools = vec![("git", Some(git))];
    tools.push(("gh", find_program("gh", path)));
    let mut missing = Vec::new();
    match agent {
        // Named by a relative path: run from the repo by that path (`program::check_agent`),
        // never looked up on PATH, so its directory (`.`) has no place there.
        Some(a) if a.contains('/') && !Path::new(a).is_absolute() => {
            let found = crate::program::find_program(a, path, repo);
            missing.extend(found.err().map(|_| a.to_string()));
        }
        Some(a) => tools.push((a, find_program(a, path))),
        None => {}
    }
    let mut dirs: Vec<String> = Vec::new();
    let mut add = |d: &str| {
        if !dirs.iter().any(|x| x == d) {
            dirs.push(d.to_string());
        }
    };
    if let Some(d) = exe.parent() {
        add(unit_path("this binary's directory", d)?);
    }
    for (name, found) in &tools {
        match found.as_deref().and_then(Path::parent) {
            // A relative directory on a service's PATH would be read from wherever the
            // service runs: never one.
            Some(d) if d.is_absolute() => add(unit_path("a tool's directory", d)?),
            Some(_) => {}
            None => missing.push((*name).to_string()),
        }
    }
    for d in BASE_PATH {
        add(d);
    }
    let template = TEMPLATE.replace(TEMPLATE_BIN, exe_s);
    let unit = unit_name(repo);
    let mut dropin = format!(
        "# {unit}: written by `afk-supervisor systemd install` for {}\n[Service]\n\
         Environment=PATH={}\n",
        repo.display(),
        dirs.join(":")
    );
    if let Some(n) = workers {
        let _ = writeln!(dropin, "Environment=RED_AFK_TARGET={n}");
    }
    if !missing.is_empty() {
        let _ = writeln!(
            dropin,
            "# not found on PATH at install: {}",
            missing.join(", ")
        );
    }
    Ok(Install {
        template_path: unit_dir.join(TEMPLATE_NAME),
        dropin_path: unit_dir.join(format!("{unit}.d/afk-supervisor.conf")),
        unit,
        template,
        dropin,
        missing,
    })
}

impl Install {
    /// Writes both files (atomically, directories created).
    pub fn write(&self) -> Result<(), UnitError> {
        for (path, text) in [
            (&self.template_path, &self.template),
            (&self.dropin_path, &self.dropin),
        ] {
            let err = |source| UnitError::Io {
                path: path.clone(),
                source,
            };
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).map_err(err)?;
            }
            crate::fsutil::atomic_write(path, text.as_bytes()).map_err(err)?;
        }
        Ok(())
    }

    /// The commands an operator runs next, one per line.
    pub fn next_steps(&self) -> String {
        let u = &self.unit;
        format!(
            "systemctl --user daemon-reload\n\
             systemctl --user enable --now '{u}'\n\
             systemctl --user status '{u}'\n\
             journalctl --user -u '{u}' -f\n\
             loginctl enable-linger \"$USER\"   # the fleet outlives your login\n"
        )
    }
}

/// What `systemd uninstall` removed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Removed {
    pub files: Vec<PathBuf>,
}

/// Removes a repo's instance: its drop-in (and the drop-in folder once empty), its
/// `default.target.wants` link (only a symlink), and the template when no other instance
/// is left. Never follows a symlink.
pub fn uninstall(repo: &Path, unit_dir: &Path) -> Result<Removed, UnitError> {
    let unit = unit_name(repo);
    let mut removed = Removed::default();
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| UnitError::Io { path, source }
    };
    let dropin_dir = unit_dir.join(format!("{unit}.d"));
    let dropin = dropin_dir.join("afk-supervisor.conf");
    if is_regular(&dropin) {
        std::fs::remove_file(&dropin).map_err(io(&dropin))?;
        removed.files.push(dropin);
    }
    if is_dir(&dropin_dir) && std::fs::remove_dir(&dropin_dir).is_ok() {
        removed.files.push(dropin_dir);
    }
    let link = unit_dir.join("default.target.wants").join(&unit);
    if std::fs::symlink_metadata(&link).is_ok_and(|m| m.file_type().is_symlink()) {
        std::fs::remove_file(&link).map_err(io(&link))?;
        removed.files.push(link);
    }
    let template = unit_dir.join(TEMPLATE_NAME);
    if is_regular(&template) && !other_instances(unit_dir)? {
        std::fs::remove_file(&template).map_err(io(&template))?;
        removed.files.push(template);
    }
    Ok(removed)
}

fn is_regular(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_file())
}

fn is_dir(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_dir())
}

/// Whether another instance is still installed or enabled.
fn other_instances(unit_dir: &Path) -> Result<bool, UnitError> {
    let is_instance = |name: &str| {
        name.starts_with("afk-supervisor@") && name != TEMPLATE_NAME && name.contains(".service")
    };
    for dir in [
        unit_dir.to_path_buf(),
        unit_dir.join("default.target.wants"),
    ] {
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(source) => return Err(UnitError::Io { path: dir, source }),
        };
        for entry in entries.flatten() {
            if is_instance(&entry.file_name().to_string_lossy()) {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 52, item 7: an agent named by a relative path (`./agent.sh`, run from the repo)
    /// puts no `.` (nor any relative directory) on the unit's PATH, and is found from the
    /// repo, not from where `install` runs.
    #[test]
    fn a_relative_agent_puts_nothing_relative_on_path() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let repo = d.path().join("repo");
        std::fs::create_dir_all(&repo).unwrap();
        let agent = repo.join("agent.sh");
        std::fs::write(&agent, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = std::env::var_os("PATH");
        let exe = Path::new("/opt/afk/bin/afk-supervisor");
        let units = d.path().join("units");
        for a in ["./agent.sh", "agent.sh/../agent.sh"] {
            let planned = plan(&repo, exe, &units, None, Some(a), path.as_deref()).unwrap();
            let line = planned
                .dropin
                .lines()
                .find_map(|l| l.strip_prefix("Environment=PATH="))
                .unwrap();
            let relative: Vec<&str> = line.split(':').filter(|d| !d.starts_with('/')).collect();
            assert!(relative.is_empty(), "{a}: {line}");
        }
        // Tests run in the crate's directory, where `./.ci/run` is an executable file too:
        // found from there or from the repo, its directory is relative either way.
        let here = Path::new(env!("CARGO_MANIFEST_DIR"));
        let planned = plan(here, exe, &units, None, Some("./.ci/run"), path.as_deref()).unwrap();
        assert!(!planned.dropin.contains(":./"), "{}", planned.dropin);
        assert!(!planned.dropin.contains(":.:"), "{}", planned.dropin);
        let found = plan(
            &repo,
            exe,
            &units,
            None,
            Some("./agent.sh"),
            path.as_deref(),
        )
        .unwrap();
        assert!(
            !found.missing.contains(&"./agent.sh".to_string()),
            "{:?}",
            found.missing
        );
        let nope = plan(&repo, exe, &units, None, Some("./nope.sh"), path.as_deref()).unwrap();
        assert!(
            nope.missing.contains(&"./nope.sh".to_string()),
            "{:?}",
            nope.missing
        );
    }

    #[test]
    fn escapes_paths_like_systemd_escape() {
        assert_eq!(escape_path(Path::new("/")), "-");
        assert_eq!(
            escape_path(Path::new("/home/me/src/my-repo")),
            "home-me-src-my\\x2drepo"
        );
        assert_eq!(escape_path(Path::new("//a//b c/")), "a-b\\x20c");
        assert_eq!(escape_path(Path::new("/.hidden/x.y")), "\\x2ehidden-x.y");
    }

    #[test]
    fn unit_dir_honours_xdg_config_home() {
        assert_eq!(
            user_unit_dir(Some(OsStr::new("/x/cfg")), Some(OsStr::new("/h"))),
            Some(PathBuf::from("/x/cfg/systemd/user"))
        );
        assert_eq!(
            user_unit_dir(Some(OsStr::new("rel")), Some(OsStr::new("/h"))),
            Some(PathBuf::from("/h/.config/systemd/user"))
        );
        assert_eq!(user_unit_dir(None, None), None);
    }

    #[test]
    fn the_template_names_the_placeholder_binary_in_start_and_stop() {
        assert_eq!(TEMPLATE.matches(TEMPLATE_BIN).count(), 2);
        assert!(TEMPLATE.contains("KillMode=process"));
        assert!(TEMPLATE.contains("Type=notify"));
        // The supervisor divides the unit's cgroup into one per worker.
        assert!(TEMPLATE.lines().any(|l| l == "Delegate=yes"));
    }
}
