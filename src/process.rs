//! The process table as `/proc` shows it, and pidfds.
//!
//! The supervisor needs more than `pidfile` judges: the session and process group of every
//! process, to find a worker's leftovers after it ended and to reap the orphans reparented
//! to it as a child subreaper without stealing the children other code waits for.

use std::fs;
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

mod loop_signals;
mod start_window;
pub use start_window::StartWindow;

/// One process as `/proc/<pid>/stat` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proc {
    pub pid: i32,
    pub state: char,
    pub ppid: i32,
    pub pgid: i32,
    pub sid: i32,
    /// Field 22, clock ticks since boot.
    pub start: u64,
}

impl Proc {
    pub fn is_zombie(&self) -> bool {
        self.state == 'Z' || self.state == 'X'
    }

    /// Leads its own session and its process group, as a worker does (the supervisor starts
    /// each worker with `setsid`; what a worker starts stays in its session unless it calls
    /// `setsid` too).
    pub fn leads_session(&self) -> bool {
        self.pid == self.sid && self.pid == self.pgid
    }
}

impl From<&procfs::process::Stat> for Proc {
    fn from(s: &procfs::process::Stat) -> Proc {
        Proc {
            pid: s.pid,
            state: s.state,
            ppid: s.ppid,
            pgid: s.pgrp,
            sid: s.session,
            start: s.starttime,
        }
    }
}

/// The open-files limit the process started with, once [`raise_open_files_limit`] raised
/// it: what every worker gets back before its `execve`.
static OPEN_FILES_AT_START: std::sync::OnceLock<libc::rlimit> = std::sync::OnceLock::new();

/// Raises the soft open-files limit to the hard one: the supervisor holds a pidfd per
/// worker, and a soft limit of 1,024 (a login shell's, a systemd unit's default) would
/// end a fleet of a thousand at its thousandth spawn. The limit it started with is kept
/// for the workers ([`open_files_for_children`]): a program of theirs that uses
/// `select()` must not see descriptors past 1,024. Answers `(from, to)` when it raised.
pub fn raise_open_files_limit() -> Option<(u64, u64)> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 || lim.rlim_cur >= lim.rlim_max {
            return None;
        }
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) != 0 {
            return None;
        }
    }
    let _ = OPEN_FILES_AT_START.set(lim);
    Some((lim.rlim_cur, lim.rlim_max))
}

/// This process's soft open-files limit (0 when it cannot be read).
pub fn open_files_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct passed.
    match unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } {
        0 => lim.rlim_cur,
        _ => 0,
    }
}

/// The open-files limit a worker is started with: the one the supervisor was started
/// with, when it raised its own; `None` when it did not (the child inherits it as is).
pub fn open_files_for_children() -> Option<&'static libc::rlimit> {
    OPEN_FILES_AT_START.get()
}

/// A file the kernel writes as it is read (`/proc`, cgroupfs), whole, up to `limit`
/// bytes. Such a file hands over all it has in one read when the buffer holds it, so a
/// read that comes back short is its end: one `read` per file instead of two (the second
/// to see the end), which a respawn pays several times over.
pub fn read_kernel_file(path: &Path, limit: usize) -> std::io::Result<Vec<u8>> {
    let mut f = fs::File::open(path)?;
    let mut buf = vec![0u8; limit.min(512)];
    let mut len = 0;
    loop {
        let n = match f.read(&mut buf[len..]) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        len += n;
        if n == 0 || len < buf.len() {
            break;
        }
        if buf.len() >= limit {
            break;
        }
        buf.resize((buf.len() * 2).min(limit), 0);
    }
    buf.truncate(len);
    Ok(buf)
}

/// One process, `None` when it does not exist (`/proc/<pid>/stat`, parsed by `procfs`).
/// Read by path in one `read` (every spawn reads its worker's start time here): procfs's
/// `Process` would first open and stat the `/proc/<pid>` directory.
pub fn read(pid: i32) -> Option<Proc> {
    use procfs::FromRead;
    let path = format!("/proc/{pid}/stat");
    let bytes = read_kernel_file(Path::new(&path), 4096).ok()?;
    procfs::process::Stat::from_read(bytes.as_slice())
        .ok()
        .map(|s| Proc::from(&s))
}

/// Every process visible in `/proc`. Processes that vanish mid-scan are skipped.
pub fn table() -> Vec<Proc> {
    let Ok(all) = procfs::process::all_processes() else {
        return Vec::new();
    };
    all.filter_map(|p| p.ok()?.stat().ok().map(|s| Proc::from(&s)))
        .collect()
}

/// Most processes one tree reading follows: a fork bomb costs a bounded reading.
pub const TREE_LIMIT: usize = 4096;

/// One process with its CPU time in milliseconds: its own (user and system) and that of
/// the children it waited for, so the work of a short-lived compiler step stays counted in
/// its parent once it has exited. `None` when it does not exist.
pub fn read_with_cpu(pid: i32) -> Option<(Proc, u64)> {
    let s = procfs::process::Process::new(pid).ok()?.stat().ok()?;
    let tps = procfs::ticks_per_second().max(1);
    let children = u64::try_from(s.cutime.saturating_add(s.cstime)).unwrap_or(0);
    let ticks = s.utime.saturating_add(s.stime).saturating_add(children);
    Some((Proc::from(&s), ticks.saturating_mul(1000) / tps))
}

/// The live members of the session `leader` leads that descend from it, the leader first,
/// with their CPU time ([`read_with_cpu`]): found by following `/proc/<pid>/task/*/children`
/// down from the leader, so a reading costs a few reads per member of the tree and nothing
/// per other process on the host. A descendant that left the session (`setsid`) is not
/// counted (the stray search follows those); one whose parent died meanwhile was
/// reparented to the supervisor and is not found either, until it is gone.
pub fn session_tree_with_cpu(leader: i32) -> Vec<(Proc, u64)> {
    let mut out = Vec::new();
    let mut next = vec![leader];
    let mut seen = std::collections::HashSet::new();
    while let Some(pid) = next.pop() {
        if out.len() >= TREE_LIMIT || !seen.insert(pid) {
            continue;
        }
        let Some((p, cpu)) = read_with_cpu(pid) else {
            continue;
        };
        if p.sid != leader || p.is_zombie() {
            continue;
        }
        out.push((p, cpu));
        let Ok(tasks) = procfs::process::Process::new(pid).and_then(|p| p.tasks()) else {
            continue;
        };
        for t in tasks.flatten() {
            if let Ok(kids) = t.children() {
                next.extend(kids.into_iter().filter_map(|k| i32::try_from(k).ok()));
            }
        }
    }
    out
}

/// A process as other tools record it: its pid and its start time in clock ticks since
/// boot (`/proc/<pid>/stat` field 22, the `.start` token beside a pid file). Together they
/// name one process, never a later one that was given the same pid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProcId {
    pub pid: i32,
    pub start: u64,
}

impl ProcId {
    /// The live (not zombie) process with this pid, if it is the one that started then.
    pub fn is_live(self) -> bool {
        read(self.pid).is_some_and(|p| p.start == self.start && !p.is_zombie())
    }

    /// The process now holding `pid`, as an identity.
    pub fn of(pid: i32) -> Option<ProcId> {
        read(pid).map(|p| ProcId {
            pid,
            start: p.start,
        })
    }

    /// Sends `sig` to this process, only if it is still the one that started at `start`.
    pub fn signal(self, sig: nix::sys::signal::Signal) -> bool {
        self.is_live() && nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid), sig).is_ok()
    }

    /// SIGKILL to the group this process leads, or to it alone when it leads none; only if
    /// it is still the process that started at `start`.
    pub fn kill_tree(self) -> bool {
        self.signal_tree(nix::sys::signal::Signal::SIGKILL)
    }

    /// `sig` to the group this process leads, or to it alone when it leads none; only if
    /// it is still the process that started at `start`.
    pub fn signal_tree(self, sig: nix::sys::signal::Signal) -> bool {
        let Some(p) = read(self.pid).filter(|p| p.start == self.start && !p.is_zombie()) else {
            return false;
        };
        let pid = nix::unistd::Pid::from_raw(self.pid);
        if p.pgid == self.pid {
            nix::sys::signal::killpg(pid, sig).is_ok()
        } else {
            nix::sys::signal::kill(pid, sig).is_ok()
        }
    }
}

/// Sends `sig` to process group `pgid`: for a group this process created and still holds
/// (a command it runs and has not reaped), whose id therefore cannot have been reused.
pub fn signal_own_group(pgid: i32, sig: nix::sys::signal::Signal) -> bool {
    nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), sig).is_ok()
}

/// Is any process other than a zombie still in process group `pgid`?
pub fn group_has_live_member(table: &[Proc], pgid: i32) -> bool {
    table.iter().any(|p| p.pgid == pgid && !p.is_zombie())
}

/// Most bytes of `/proc/<pid>/environ` read: the kernel caps one process's environment
/// near a quarter of its stack limit, so more than this is not an environment to trust.
const ENVIRON_LIMIT: u64 = 8 << 20;

/// The environment a process started with (`/proc/<pid>/environ`), `None` when it is gone
/// or not ours to read.
pub fn environ(pid: i32) -> Option<Vec<u8>> {
    let f = fs::File::open(format!("/proc/{pid}/environ")).ok()?;
    let mut bytes = Vec::new();
    f.take(ENVIRON_LIMIT).read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

/// The value of `key` in a raw environment block.
pub fn env_value<'a>(environ: &'a [u8], key: &str) -> Option<&'a [u8]> {
    environ.split(|b| *b == 0).find_map(|kv| {
        kv.strip_prefix(key.as_bytes())
            .and_then(|rest| rest.strip_prefix(b"="))
    })
}

/// Whether `pid` started with exactly `key=value` in its environment.
pub fn environ_has(pid: i32, key: &str, value: &str) -> bool {
    environ(pid).is_some_and(|e| env_value(&e, key) == Some(value.as_bytes()))
}

/// A live process of one repo's fleet: a worker or anything a worker started. Every such
/// process inherited the SPEC §6 variables the supervisor gave its worker, and
/// `RED_AFK_RETIRE_FILE` names the repo's supervisor lane, so the environment says whose
/// it is even after the supervisor that spawned it died and it was reparented elsewhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetMember {
    pub proc: Proc,
    pub slot: Option<usize>,
    pub worker_id: Option<String>,
}

/// Every live process, other than this one and its own session, whose environment ties it
/// to the supervisor lane `lane`. Reads the whole process table and each candidate's
/// environment: for start-up and stop, never per event.
pub fn fleet_members(lane: &Path) -> Vec<FleetMember> {
    members_where(lane, |_| true)
}

/// [`fleet_members`] that lead their own session, as a worker does: only a session
/// leader's environment is read, so a host of many processes (shells, services, their
/// threads of children) costs a reading of its table and of the few leaders in it, not of
/// every environment on it.
pub fn fleet_leaders(lane: &Path) -> Vec<FleetMember> {
    members_where(lane, Proc::leads_session)
}

fn members_where(lane: &Path, keep: impl Fn(&Proc) -> bool) -> Vec<FleetMember> {
    let Ok(lane_meta) = fs::metadata(lane) else {
        return Vec::new();
    };
    let me = std::process::id() as i32;
    let my_sid = own_sid();
    table()
        .into_iter()
        .filter(|p| p.pid != me && p.sid != my_sid && !p.is_zombie() && keep(p))
        .filter_map(|p| {
            let env = environ(p.pid)?;
            let retire = env_value(&env, crate::afk_env::RETIRE_FILE)?;
            let retire = Path::new(std::ffi::OsStr::from_bytes(retire));
            // The same directory, however its path was spelled.
            let dir = fs::metadata(retire.parent()?).ok()?;
            if (dir.dev(), dir.ino()) != (lane_meta.dev(), lane_meta.ino()) {
                return None;
            }
            let text = |k| env_value(&env, k).and_then(|v| std::str::from_utf8(v).ok());
            Some(FleetMember {
                proc: p,
                slot: text(crate::afk_env::SLOT).and_then(|s| s.parse().ok()),
                worker_id: text(crate::afk_env::WORKER_ID).map(str::to_string),
            })
        })
        .collect()
}

/// When a process started, in seconds since the epoch, from its start token (clock ticks
/// since boot) and the boot time in `/proc/stat`.
pub fn start_epoch(start_ticks: u64) -> Option<u64> {
    let hz = Some(start_window::clock_ticks_per_second()).filter(|h| *h > 0)?;
    let stat = fs::read_to_string("/proc/stat").ok()?;
    let btime: u64 = stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    btime.checked_add(start_ticks / hz)
}

/// `pidfd_open(2)`: a descriptor that becomes readable when the process ends, whoever its
/// parent is. `None` when the process is gone or the kernel lacks the call.
pub fn pidfd_open(pid: i32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return None;
    }
    let fd = i32::try_from(fd).ok()?;
    // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `PIDFD_SIGNAL_PROCESS_GROUP` (Linux 6.9): signal the process group of the pidfd's
/// process, named by the group's kernel object rather than its number.
const PIDFD_SIGNAL_PROCESS_GROUP: libc::c_uint = 1 << 2;

/// A descriptor that refers to one process for as long as it is held: never to a later
/// process that happens to get the same pid. Readable once the process has ended.
#[derive(Debug)]
pub struct Pidfd {
    fd: OwnedFd,
    /// The group this process led was found empty. An empty group stays empty: nothing
    /// can join a group without a member (`setpgid` refuses), and its id, once free, names
    /// a new group the kernel does not take for this one. So a group that answered `ESRCH`
    /// to a signal is not asked again whether it has members.
    group_gone: std::sync::atomic::AtomicBool,
}

impl Pidfd {
    /// `None` when the process is gone or the kernel lacks pidfds.
    pub fn open(pid: i32) -> Option<Pidfd> {
        pidfd_open(pid).map(Pidfd::from_fd)
    }

    /// A pidfd the kernel made otherwise (`clone3` with `CLONE_PIDFD`).
    pub fn from_fd(fd: OwnedFd) -> Pidfd {
        Pidfd {
            fd,
            group_gone: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Sends `sig` (`None`: only checks) to every process in the group that this process
    /// leads, or led: the kernel finds the members through the group itself, so this is
    /// safe after the leader was reaped and even if its pid number is in use again. An
    /// `ESRCH` error means the group is empty.
    pub fn signal_group(&self, sig: Option<nix::sys::signal::Signal>) -> std::io::Result<()> {
        use std::sync::atomic::Ordering::Relaxed;
        if self.group_gone.load(Relaxed) {
            return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
        }
        let sig = sig.map_or(0, |s| s as libc::c_int);
        // SAFETY: pidfd_send_signal takes a descriptor we own, a signal number, a null
        // siginfo (the kernel fills in a plain kill) and flags.
        let r = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.fd.as_raw_fd(),
                sig,
                std::ptr::null::<libc::siginfo_t>(),
                PIDFD_SIGNAL_PROCESS_GROUP,
            )
        };
        if r == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ESRCH) {
            self.group_gone.store(true, Relaxed);
        }
        Err(e)
    }

    /// Whether the group this process leads (or led) still has any member.
    pub fn group_alive(&self) -> bool {
        !matches!(self.signal_group(None), Err(e) if e.raw_os_error() == Some(libc::ESRCH))
    }
}

impl AsFd for Pidfd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for Pidfd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Whether this kernel signals process groups through pidfds (Linux 6.9 and later). Where
/// it does, a worker is reaped as soon as it ends and its group is found empty by asking
/// the kernel; elsewhere the leader's zombie pins the group id and `/proc` is read.
pub fn pidfd_groups() -> bool {
    static SUPPORTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    // A kernel that knows the flag answers for our own pidfd: 0 when we lead a group,
    // ESRCH when we do not (a group with no members is named by our pid). One that does
    // not know it refuses the flag with EINVAL.
    *SUPPORTED.get_or_init(|| {
        Pidfd::open(std::process::id() as i32).is_some_and(|fd| match fd.signal_group(None) {
            Ok(()) => true,
            Err(e) => e.raw_os_error() == Some(libc::ESRCH),
        })
    })
}

pub use loop_signals::{
    LOOP_SIGNALS, LoopSignalFd, leave_loop_signals_to_the_loop, signal_bit,
    with_loop_signals_blocked,
};

/// How our own child ended, without blocking: `None` while it runs. With `reap` the child
/// is reaped; without, it stays a zombie (keeping its pid and group id from reuse).
pub fn child_exit(pid: i32, reap: bool) -> Option<ExitKind> {
    use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
    let mut flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG;
    if !reap {
        flags |= WaitPidFlag::WNOWAIT;
    }
    loop {
        return match waitid(Id::Pid(nix::unistd::Pid::from_raw(pid)), flags) {
            Ok(WaitStatus::Exited(_, code)) => Some(ExitKind::Code(code)),
            Ok(WaitStatus::Signaled(_, sig, _)) => Some(ExitKind::Signal(sig as i32)),
            Ok(WaitStatus::StillAlive) => None,
            Ok(_) => None,
            Err(nix::errno::Errno::EINTR) => continue,
            // Not our child (any more): it ended and someone reaped it.
            Err(_) => Some(ExitKind::Unknown),
        };
    }
}

/// A zombie child of ours, seen without reaping it: the first one the kernel lists.
pub fn peek_zombie_child() -> Option<(i32, ExitKind)> {
    use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    loop {
        return match waitid(Id::All, flags) {
            Ok(WaitStatus::Exited(pid, code)) => Some((pid.as_raw(), ExitKind::Code(code))),
            Ok(WaitStatus::Signaled(pid, sig, _)) => {
                Some((pid.as_raw(), ExitKind::Signal(sig as i32)))
            }
            Err(nix::errno::Errno::EINTR) => continue,
            _ => None,
        };
    }
}

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitKind {
    Code(i32),
    Signal(i32),
    /// Not our child (an adopted worker): that it ended is known, not how.
    Unknown,
}

impl std::fmt::Display for ExitKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExitKind::Code(c) => write!(f, "exit {c}"),
            ExitKind::Signal(s) => {
                let name = nix::sys::signal::Signal::try_from(*s)
                    .map(|s| s.as_str().to_string())
                    .unwrap_or_else(|_| format!("signal {s}"));
                write!(f, "killed by {name}")
            }
            ExitKind::Unknown => write!(f, "ended (exit status unknown)"),
        }
    }
}

/// This process's session id.
pub fn own_sid() -> i32 {
    nix::unistd::getsid(None).map_or(0, |p| p.as_raw())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shell that starts a member of its group, says its pid, and becomes a `sleep`.
    const LEADER_WITH_MEMBER: &str = "sleep 300 & echo $!; exec sleep 300";

    /// Starts `cmd` (a shell running [`LEADER_WITH_MEMBER`]): the leader, and its member's pid.
    fn leader_with_member(cmd: &mut std::process::Command) -> (std::process::Child, i32) {
        let mut child = cmd.stdout(std::process::Stdio::piped()).spawn().unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        (child, line.trim().parse().unwrap())
    }

    /// Whole in one read or several (a file longer than the first buffer), cut at the limit.
    #[test]
    fn a_kernel_file_is_read_whole_and_no_further_than_its_limit() {
        let me = read_kernel_file(Path::new("/proc/self/stat"), 4096).unwrap();
        let text = String::from_utf8(me).unwrap();
        assert!(
            text.starts_with(&format!("{} (", std::process::id())),
            "{text}"
        );
        assert!(text.ends_with('\n'), "{text}");
        let dir = tempfile::tempdir().unwrap();
        let long: Vec<u8> = (0..5000u32).map(|i| b'a' + (i % 26) as u8).collect();
        let f = dir.path().join("long");
        fs::write(&f, &long).unwrap();
        assert_eq!(read_kernel_file(&f, 1 << 20).unwrap(), long);
        assert_eq!(read_kernel_file(&f, 1000).unwrap(), &long[..1000]);
        assert!(read_kernel_file(&dir.path().join("gone"), 10).is_err());
    }

    #[test]
    fn own_identity_session_and_group() {
        let me = std::process::id() as i32;
        let p = read(me).unwrap();
        assert_eq!(p.ppid, nix::unistd::getppid().as_raw());
        assert_eq!(p.pgid, nix::unistd::getpgrp().as_raw());
        assert_eq!(p.sid, own_sid());
        let id = ProcId::of(me).unwrap();
        assert!(id.is_live());
        assert!(
            !ProcId {
                pid: me,
                start: id.start + 1
            }
            .is_live(),
            "a reused pid"
        );
        assert!(read(i32::MAX).is_none());
    }

    #[test]
    fn own_process_is_in_the_table() {
        let me = std::process::id() as i32;
        let t = table();
        let p = t.iter().find(|p| p.pid == me).expect("self in /proc");
        assert_eq!(p.sid, own_sid());
        assert!(group_has_live_member(&t, p.pgid));
    }

    /// A lane's members are found by the retire file their environment names, wherever
    /// they are; its leaders are those that lead their own session, as a worker does, and
    /// not what a worker started in its session.
    #[test]
    fn a_lanes_leaders_are_the_members_that_lead_their_own_session() {
        let lane = tempfile::tempdir().unwrap();
        let (mut leader, member) = leader_with_member(
            std::process::Command::new("setsid")
                .args(["sh", "-c", LEADER_WITH_MEMBER])
                .env(crate::afk_env::RETIRE_FILE, lane.path().join("retire")),
        );
        let leader_pid = leader.id() as i32;
        let pids = |found: Vec<FleetMember>| {
            let mut p: Vec<i32> = found.into_iter().map(|m| m.proc.pid).collect();
            p.sort_unstable();
            p
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let mut both = vec![leader_pid, member];
        both.sort_unstable();
        while pids(fleet_members(lane.path())) != both {
            assert!(std::time::Instant::now() < deadline, "{both:?} never found");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(pids(fleet_leaders(lane.path())), vec![leader_pid]);
        let elsewhere = tempfile::tempdir().unwrap();
        assert!(fleet_members(elsewhere.path()).is_empty());
        for pid in [member, leader_pid] {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        leader.wait().unwrap();
    }

    #[test]
    fn pidfd_of_a_running_child() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        assert!(pidfd_open(child.id() as i32).is_some());
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// The group outlives its reaped leader, is signalled through the leader's pidfd, and
    /// is seen empty once its last member is gone.
    #[test]
    fn a_group_is_signalled_and_seen_empty_through_its_reaped_leaders_pidfd() {
        use std::os::unix::process::CommandExt;
        if !pidfd_groups() {
            assert!(
                std::env::var_os("CI").is_none(),
                "this kernel cannot signal process groups through pidfds"
            );
            eprintln!("SKIPPED on this machine: no PIDFD_SIGNAL_PROCESS_GROUP");
            return;
        }
        let (mut child, member) = leader_with_member(
            std::process::Command::new("sh")
                .args(["-c", LEADER_WITH_MEMBER])
                .process_group(0),
        );
        let leader = child.id() as i32;
        let fd = Pidfd::open(leader).unwrap();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(leader),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        assert_eq!(child_exit_blocking(leader), ExitKind::Signal(9));
        assert!(fd.group_alive(), "the member keeps the group");
        fd.signal_group(Some(nix::sys::signal::Signal::SIGKILL))
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while fd.group_alive() {
            assert!(
                std::time::Instant::now() < deadline,
                "member {member} survived"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(read(member).is_none_or(|p| p.is_zombie()));
        // Found empty once, remembered: the kernel is not asked again.
        assert!(fd.group_gone.load(std::sync::atomic::Ordering::Relaxed));
        let again = fd.signal_group(Some(nix::sys::signal::Signal::SIGTERM));
        assert_eq!(again.map_err(|e| e.raw_os_error()), Err(Some(libc::ESRCH)));
        // Reaped above through waitid; `wait` now only confirms nothing is left.
        assert!(child.wait().is_err());
    }

    fn child_exit_blocking(pid: i32) -> ExitKind {
        loop {
            if let Some(k) = child_exit(pid, true) {
                return k;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}
