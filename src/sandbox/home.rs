//! The private `HOME` of one attempt: made empty, then seeded with copies of the agent
//! CLI's own config and login from the operator's home, and nothing else (never
//! `~/.config/gh`, `~/.ssh`, `~/.git-credentials`, shell rc files). Copies, not links: the
//! agent writes its state there and must not write the operator's.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::agent_profile::ProfileKind;

/// The largest file copied in: CLI config and login files are kilobytes.
const MAX_SEED_BYTES: u64 = 16 << 20;

/// What each profile's CLI keeps in its home, relative to it: copied in when present
/// (`agent.home_files` replaces the list).
pub fn profile_files(profile: ProfileKind) -> &'static [&'static str] {
    match profile {
        ProfileKind::Claude => &[
            ".claude.json",
            ".claude/settings.json",
            ".claude/.credentials.json",
        ],
        ProfileKind::Codex => &[".codex/config.toml", ".codex/auth.json"],
        ProfileKind::Generic => &[],
    }
}

/// Where one seed file comes from: under `operator_home`, except Codex's own directory,
/// which `CODEX_HOME` moves when the operator set it.
fn source_of(rel: &str, operator_home: &Path, codex_home: Option<&Path>) -> PathBuf {
    match (rel.strip_prefix(".codex/"), codex_home) {
        (Some(rest), Some(c)) => c.join(rest),
        _ => operator_home.join(rel),
    }
}

/// Makes `home` (owner-only) and copies each of `files` (relative paths without `..`)
/// that exists as a regular file in the operator's home; returns the ones copied. A file
/// that cannot be read is one line on stderr, not a failed attempt: the agent then says
/// what it lacks.
pub fn seed(
    home: &Path,
    files: &[String],
    operator_home: Option<&Path>,
    codex_home: Option<&Path>,
) -> io::Result<Vec<String>> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(home)?;
    let mut copied = Vec::new();
    let Some(op) = operator_home else {
        return Ok(copied);
    };
    for rel in files {
        if !is_plain_relative(rel) {
            continue;
        }
        let from = source_of(rel, op, codex_home);
        let Ok(meta) = fs::metadata(&from) else {
            continue;
        };
        if !meta.is_file() || meta.len() > MAX_SEED_BYTES {
            eprintln!(
                "agent home: {} left out (not a regular file of at most {MAX_SEED_BYTES} bytes)",
                from.display()
            );
            continue;
        }
        let to = home.join(rel);
        if let Some(parent) = to.parent() {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)?;
        }
        match copy_private(&from, &to) {
            Ok(()) => copied.push(rel.clone()),
            Err(e) => eprintln!("agent home: {} not copied: {e}", from.display()),
        }
    }
    Ok(copied)
}

/// Copies `from` to a new owner-only file `to` (never through a link at `to`).
fn copy_private(from: &Path, to: &Path) -> io::Result<()> {
    let mut src = fs::File::open(from)?;
    let mut dst = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(to)?;
    io::copy(&mut io::Read::take(&mut src, MAX_SEED_BYTES), &mut dst)?;
    dst.set_permissions(fs::Permissions::from_mode(0o600))
}

/// A relative path with no `..`, no empty and no absolute part.
fn is_plain_relative(rel: &str) -> bool {
    !rel.is_empty() && !rel.starts_with('/') && rel.split('/').all(|c| !c.is_empty() && c != "..")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_named_files_are_copied_and_privately() {
        let op = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        fs::create_dir_all(op.path().join(".claude")).unwrap();
        fs::create_dir_all(op.path().join(".config/gh")).unwrap();
        fs::write(op.path().join(".claude/settings.json"), "{}").unwrap();
        fs::write(op.path().join(".config/gh/hosts.yml"), "oauth_token: x").unwrap();
        let home = out.path().join("home");
        let files: Vec<String> = profile_files(ProfileKind::Claude)
            .iter()
            .map(|s| s.to_string())
            .chain(["../escape".to_string(), "/etc/passwd".to_string()])
            .collect();
        let copied = seed(&home, &files, Some(op.path()), None).unwrap();
        assert_eq!(copied, [".claude/settings.json"]);
        assert!(!home.join(".config").exists());
        let mode = fs::metadata(home.join(".claude/settings.json"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn codex_files_come_from_codex_home_when_set() {
        assert_eq!(
            source_of(".codex/auth.json", Path::new("/h"), Some(Path::new("/c"))),
            PathBuf::from("/c/auth.json")
        );
        assert_eq!(
            source_of(".codex/auth.json", Path::new("/h"), None),
            PathBuf::from("/h/.codex/auth.json")
        );
    }
}
