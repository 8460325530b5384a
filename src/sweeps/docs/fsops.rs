//! Reading a doc from the primary checkout and writing it into the sweep's worktree
//! without ever following a symlink: a symlinked doc (or a doc under a symlinked dir)
//! could point anywhere on the machine, and publishing or overwriting that is not the
//! sweep's call to make.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// What is at a repo-relative path, judged component by component without following
/// symlinks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    Absent,
    Regular,
    Symlink,
    /// A dir on the way is a symlink: the file is not really in the repo.
    UnderSymlink,
    /// A dir, fifo, socket or device.
    Other,
}

impl Entry {
    /// For reports: why the sweep will not copy it.
    pub fn unpublishable(self) -> Option<&'static str> {
        match self {
            Entry::Symlink => Some("symlink"),
            Entry::UnderSymlink => Some("under a symlinked dir"),
            Entry::Other => Some("not a regular file"),
            Entry::Absent | Entry::Regular => None,
        }
    }
}

/// Joins a `/`-separated repo-relative path (already validated by `classify`) under `root`.
pub fn join(root: &Path, rel: &str) -> PathBuf {
    rel.split('/').fold(root.to_path_buf(), |p, c| p.join(c))
}

/// Inspects `root/rel` without following symlinks, not even in the parent dirs.
pub fn inspect(root: &Path, rel: &str) -> io::Result<Entry> {
    let parts: Vec<&str> = rel.split('/').collect();
    let mut p = root.to_path_buf();
    for (i, part) in parts.iter().enumerate() {
        p.push(part);
        let meta = match fs::symlink_metadata(&p) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Entry::Absent),
            Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => return Ok(Entry::Absent),
            Err(e) => return Err(e),
        };
        let last = i + 1 == parts.len();
        let ft = meta.file_type();
        if ft.is_symlink() {
            return Ok(if last {
                Entry::Symlink
            } else {
                Entry::UnderSymlink
            });
        }
        if last {
            return Ok(if ft.is_file() {
                Entry::Regular
            } else {
                Entry::Other
            });
        }
        if !ft.is_dir() {
            return Ok(Entry::Absent);
        }
    }
    Ok(Entry::Absent)
}

/// Copies the regular file `src_root/rel` to `dst_root/rel` byte for byte with its
/// permission bits (git records the executable bit). Fails rather than follow a symlink
/// on either side; a symlink already at the destination (tracked on the base) is replaced
/// by the file, a symlinked dir on the way is an error.
pub fn copy_regular(src_root: &Path, dst_root: &Path, rel: &str) -> io::Result<()> {
    if inspect(src_root, rel)? != Entry::Regular {
        return Err(io::Error::other(format!(
            "{rel}: no longer a regular file in the work tree"
        )));
    }
    let mut src = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(join(src_root, rel))?;
    let meta = src.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::other(format!("{rel}: not a regular file")));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    src.read_to_end(&mut bytes)?;

    let dst = prepare_destination(dst_root, rel)?;
    let mut out: File = OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&dst)?;
    out.write_all(&bytes)?;
    out.set_permissions(fs::Permissions::from_mode(
        meta.permissions().mode() & 0o777,
    ))?;
    out.sync_all()
}

/// Creates the parent dirs of `dst_root/rel` (refusing symlinked ones) and clears the way
/// for a new file there.
fn prepare_destination(dst_root: &Path, rel: &str) -> io::Result<PathBuf> {
    let parts: Vec<&str> = rel.split('/').collect();
    let mut p = dst_root.to_path_buf();
    for part in &parts[..parts.len().saturating_sub(1)] {
        p.push(part);
        match fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_dir() => {}
            Ok(_) => {
                return Err(io::Error::other(format!(
                    "{}: in the way of {rel} (not a real dir)",
                    p.display()
                )));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => fs::create_dir(&p)?,
            Err(e) => return Err(e),
        }
    }
    let dst = join(dst_root, rel);
    match fs::symlink_metadata(&dst) {
        Ok(m) if m.file_type().is_dir() => Err(io::Error::other(format!(
            "{}: a dir is in the way",
            dst.display()
        ))),
        Ok(_) => {
            fs::remove_file(&dst)?;
            Ok(dst)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(dst),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    #[test]
    fn inspect_never_follows_symlinks() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        fs::create_dir_all(r.join(".red/adr")).unwrap();
        fs::write(r.join(".red/adr/1.md"), "x").unwrap();
        fs::write(r.join("outside.md"), "secret").unwrap();
        symlink(r.join("outside.md"), r.join(".red/adr/link.md")).unwrap();
        fs::create_dir(r.join("elsewhere")).unwrap();
        fs::write(r.join("elsewhere/2.md"), "y").unwrap();
        symlink(r.join("elsewhere"), r.join(".red/contexts")).unwrap();
        fs::create_dir(r.join(".red/adr/dir.md")).unwrap();

        assert_eq!(inspect(r, ".red/adr/1.md").unwrap(), Entry::Regular);
        assert_eq!(inspect(r, ".red/adr/link.md").unwrap(), Entry::Symlink);
        assert_eq!(
            inspect(r, ".red/contexts/2.md").unwrap(),
            Entry::UnderSymlink
        );
        assert_eq!(inspect(r, ".red/adr/dir.md").unwrap(), Entry::Other);
        assert_eq!(inspect(r, ".red/adr/gone.md").unwrap(), Entry::Absent);
        assert_eq!(inspect(r, ".red/adr/1.md/sub").unwrap(), Entry::Absent);
        assert_eq!(inspect(r, ".red/nope/x.md").unwrap(), Entry::Absent);
    }

    #[test]
    fn copy_is_byte_exact_and_keeps_the_exec_bit() {
        let d = tempfile::tempdir().unwrap();
        let (src, dst) = (d.path().join("src"), d.path().join("dst"));
        fs::create_dir_all(src.join(".red/adr/deep")).unwrap();
        fs::create_dir_all(&dst).unwrap();
        let bytes: Vec<u8> = (0..=255u8).chain(b"\r\n\0end".iter().copied()).collect();
        let f = src.join(".red/adr/deep/1.md");
        fs::write(&f, &bytes).unwrap();
        fs::set_permissions(&f, fs::Permissions::from_mode(0o755)).unwrap();
        copy_regular(&src, &dst, ".red/adr/deep/1.md").unwrap();
        let out = dst.join(".red/adr/deep/1.md");
        assert_eq!(fs::read(&out).unwrap(), bytes);
        assert_eq!(
            fs::metadata(&out).unwrap().permissions().mode() & 0o777,
            0o755
        );
        // Overwrites an existing file.
        fs::write(&f, "new").unwrap();
        copy_regular(&src, &dst, ".red/adr/deep/1.md").unwrap();
        assert_eq!(fs::read(&out).unwrap(), b"new");
    }

    #[test]
    fn copy_refuses_symlinks_on_either_side() {
        let d = tempfile::tempdir().unwrap();
        let (src, dst, out) = (
            d.path().join("src"),
            d.path().join("dst"),
            d.path().join("out"),
        );
        for p in [&src, &dst, &out] {
            fs::create_dir_all(p.join(".red")).unwrap();
        }
        fs::write(out.join("victim.md"), "keep").unwrap();
        symlink(out.join("victim.md"), src.join(".red/CONTEXT.md")).unwrap();
        assert!(copy_regular(&src, &dst, ".red/CONTEXT.md").is_err());

        fs::create_dir_all(src.join(".red/adr")).unwrap();
        fs::write(src.join(".red/adr/1.md"), "doc").unwrap();
        symlink(&out, dst.join(".red/adr")).unwrap();
        assert!(copy_regular(&src, &dst, ".red/adr/1.md").is_err());
        assert!(!out.join("1.md").exists());

        // A symlink at the destination itself is replaced, its target untouched.
        fs::write(src.join(".red/CONTEXT-MAP.md"), "map").unwrap();
        symlink(out.join("victim.md"), dst.join(".red/CONTEXT-MAP.md")).unwrap();
        copy_regular(&src, &dst, ".red/CONTEXT-MAP.md").unwrap();
        assert_eq!(fs::read(out.join("victim.md")).unwrap(), b"keep");
        assert_eq!(fs::read(dst.join(".red/CONTEXT-MAP.md")).unwrap(), b"map");
        assert!(
            !fs::symlink_metadata(dst.join(".red/CONTEXT-MAP.md"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
    }
}
