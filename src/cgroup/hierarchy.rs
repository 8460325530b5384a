//! Where the cgroup v2 hierarchy is mounted and which cgroup this process is in: read from
//! `/proc/self/mountinfo` and `/proc/self/cgroup`, never assumed (a hybrid host mounts it
//! at `/sys/fs/cgroup/unified`, a unified one at `/sys/fs/cgroup`, a container elsewhere).

use std::path::PathBuf;

use super::Cgroup;

/// The v2 mount: its mount point and the hierarchy path its root shows (`/` outside a
/// container; a cgroup namespace's mount may show a deeper one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub point: PathBuf,
    pub root: String,
}

/// The first `cgroup2` mount in a `mountinfo` text.
pub fn parse_mount(mountinfo: &str) -> Option<Mount> {
    mountinfo.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        if right.split_whitespace().next()? != "cgroup2" {
            return None;
        }
        let mut f = left.split_whitespace();
        let root = f.nth(3)?;
        let point = f.next()?;
        Some(Mount {
            point: PathBuf::from(unescape(point)),
            root: unescape(root),
        })
    })
}

/// mountinfo writes a space, tab, newline and backslash as `\ooo`.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(u8::is_ascii_digit) {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The v2 path of a `/proc/<pid>/cgroup` text (its `0::` line).
pub fn parse_own(proc_cgroup: &str) -> Option<String> {
    proc_cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(str::to_string)
}

/// The directory of hierarchy path `path` under `mount`; `None` when the path is not
/// below the mount's root (a cgroup outside this namespace's view).
pub fn dir_of(mount: &Mount, path: &str) -> Option<Cgroup> {
    let root = mount.root.trim_end_matches('/');
    let rest = path.strip_prefix(root)?;
    if !(rest.is_empty() || rest.starts_with('/')) {
        return None;
    }
    let rest = rest.trim_start_matches('/');
    Some(Cgroup::at(if rest.is_empty() {
        mount.point.clone()
    } else {
        mount.point.join(rest)
    }))
}

/// Why this process has no cgroup v2 directory to work in.
#[derive(Debug, thiserror::Error)]
pub enum HierarchyError {
    #[error("cannot read {file}: {source}")]
    Read {
        file: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("no cgroup v2 hierarchy is mounted")]
    NoMount,
    #[error("this process is in no cgroup v2 cgroup")]
    NoCgroup,
    #[error("own cgroup {path} is outside the v2 mount at {}", .mount.display())]
    OutsideMount { path: String, mount: PathBuf },
}

/// This process's cgroup directory and the mount it is under, or why there is none.
pub fn own() -> Result<(Mount, Cgroup), HierarchyError> {
    let read = |file: &'static str| {
        std::fs::read_to_string(file).map_err(|source| HierarchyError::Read { file, source })
    };
    let mount = parse_mount(&read("/proc/self/mountinfo")?).ok_or(HierarchyError::NoMount)?;
    let path = parse_own(&read("/proc/self/cgroup")?).ok_or(HierarchyError::NoCgroup)?;
    let dir = dir_of(&mount, &path).ok_or_else(|| HierarchyError::OutsideMount {
        path: path.clone(),
        mount: mount.point.clone(),
    })?;
    Ok((mount, dir))
}

/// The hierarchy path of process `pid`'s cgroup.
pub fn of_pid(pid: i32) -> Option<String> {
    parse_own(&std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_v2_mount_is_found_among_v1_ones() {
        let info = "\
30 24 0:26 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
42 31 0:39 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
";
        let m = parse_mount(info).unwrap();
        assert_eq!(m.point, PathBuf::from("/sys/fs/cgroup/unified"));
        assert_eq!(m.root, "/");
        assert_eq!(parse_mount("42 31 0:39 / /x rw - cgroup cgroup rw\n"), None);
        let spaced = "41 31 0:38 /a\\040b /mnt/c\\040g rw - cgroup2 cgroup2 rw\n";
        let m = parse_mount(spaced).unwrap();
        assert_eq!(m.point, PathBuf::from("/mnt/c g"));
        assert_eq!(m.root, "/a b");
    }

    #[test]
    fn own_path_maps_under_the_mount_root() {
        assert_eq!(
            parse_own("9:name=systemd:/\n0::/user.slice/x.scope\n").as_deref(),
            Some("/user.slice/x.scope")
        );
        assert_eq!(parse_own("9:pids:/\n"), None);
        let m = Mount {
            point: "/sys/fs/cgroup".into(),
            root: "/".into(),
        };
        assert_eq!(
            dir_of(&m, "/").unwrap().dir(),
            PathBuf::from("/sys/fs/cgroup")
        );
        assert_eq!(
            dir_of(&m, "/a/b").unwrap().dir(),
            PathBuf::from("/sys/fs/cgroup/a/b")
        );
        let nested = Mount {
            point: "/cg".into(),
            root: "/lxc/c1".into(),
        };
        assert_eq!(
            dir_of(&nested, "/lxc/c1/w").unwrap().dir(),
            PathBuf::from("/cg/w")
        );
        assert_eq!(dir_of(&nested, "/lxc/c10"), None);
        assert_eq!(dir_of(&nested, "/other"), None);
    }
}
