//! A worker started the way `posix_spawn(3)` starts a process, with the one step it lacks.
//!
//! `clone3(CLONE_VM | CLONE_VFORK)`: the child runs on the supervisor's memory (on a stack
//! of its own) until its `execve`, and the supervisor's thread waits that long. Nothing of
//! the supervisor's memory is copied, where a `fork` (std's `Command` forks whenever a
//! `pre_exec` is set) copies every page table and the child's `execve` tears the copy down
//! again: that pair was most of a respawn's cost. In cgroup mode `CLONE_INTO_CGROUP` starts
//! the child inside its attempt cgroup, so no code of the worker runs outside it and no
//! migration through `cgroup.procs` is needed.
//!
//! The child runs only [`child`]: plain system calls through libc, no allocation, no lock,
//! nothing that could unwind. Signals are blocked in the supervisor's thread around the
//! clone, and the child resets every handler before it unblocks them, so no handler of the
//! supervisor ever runs in the child (glibc's `posix_spawn` does the same). What std's
//! `Command` and the `pre_exec` guaranteed still holds: a new session, stdin on
//! `/dev/null`, stdout and stderr on the log, an empty signal mask with `SIGPIPE` at its
//! default, and a child whose supervisor died before its `execve` ends with exit 111.
//!
//! x86-64 only (the clone needs a few instructions of assembly to run the child on its own
//! stack); elsewhere, and on kernels without `clone3` (before 5.3) or `CLONE_INTO_CGROUP`
//! (before 5.7), the caller forks instead.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Exit code of a child that lost its supervisor before it became a worker.
pub(super) const EXIT_ORPHANED: i32 = crate::exit::ORPHANED;
/// Exit code of a child whose `execve` failed (its errno is reported to the supervisor).
const EXIT_EXEC_FAILED: i32 = 127;

/// What the caller spawns.
pub(super) struct Plan<'a> {
    pub argv: &'a [String],
    pub cwd: &'a Path,
    pub env: &'a super::environ::WorkerEnv,
    /// Stdout and stderr.
    pub log: RawFd,
    /// cgroup mode: the attempt cgroup's directory, opened read-only.
    pub cgroup: Option<RawFd>,
}

/// The outcome of [`spawn`]: a pid with the child's pidfd (which the clone made, so no
/// `pidfd_open` follows), or that this system cannot start it so (the caller forks
/// instead).
pub(super) enum Started {
    Pid(i32, OwnedFd),
    Unsupported,
}

/// Everything the child reads, prepared by the parent: the child only follows pointers.
#[repr(C)]
struct ChildArgs {
    /// Programs to try in turn (the PATH lookup done ahead, as `execvp` would do it).
    paths: *const *const libc::c_char,
    argv: *const *const libc::c_char,
    /// `/bin/sh` and then `argv` as its arguments: a file without a `#!` line, as
    /// `execvp` runs it.
    sh_argv: *mut *const libc::c_char,
    envp: *const *const libc::c_char,
    cwd: *const libc::c_char,
    null: RawFd,
    log: RawFd,
    parent: libc::pid_t,
    /// The open-files limit the supervisor started with, given back to the worker
    /// ([`crate::process::raise_open_files_limit`]); null when it was not raised.
    nofile: *const libc::rlimit,
    /// Written by the child when it fails before its `execve` succeeds.
    errno: i32,
}

/// `struct clone_args` of `<linux/sched.h>`, up to `cgroup` (`CLONE_ARGS_SIZE_VER2`).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

const CLONE_VM: u64 = 0x100;
const CLONE_PIDFD: u64 = 0x1000;
const CLONE_VFORK: u64 = 0x4000;
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;
/// The first version of `clone_args` (without `set_tid` and `cgroup`), for kernels 5.3-5.6.
const CLONE_ARGS_SIZE_VER0: usize = 64;
/// The child's stack: a few libc calls deep, never more.
const STACK_BYTES: usize = 64 << 10;

/// The child's stack is made of these, so its top is 16-byte aligned, as the ABI wants
/// at a call.
#[repr(C, align(16))]
struct StackChunk([u8; 16]);

pub(super) fn spawn(plan: &Plan<'_>) -> io::Result<Started> {
    if !cfg!(target_arch = "x86_64") {
        return Ok(Started::Unsupported);
    }
    let Some(program) = plan.argv.first().map(String::as_str) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the command is empty",
        ));
    };
    let argv = c_strings(plan.argv.iter().map(|a| a.as_bytes().to_vec()))?;
    let sh_argv = c_strings(
        std::iter::once(b"/bin/sh".to_vec()).chain(plan.argv.iter().map(|a| a.as_bytes().to_vec())),
    )?;
    let paths = c_strings(candidates(program, plan.env).into_iter())?;
    let cwd = c_string(plan.cwd.as_os_str().as_bytes().to_vec())?;
    let null = dev_null()?;
    let (argv_p, mut sh_p, envp_p, paths_p) = (
        pointers(&argv),
        pointers(&sh_argv),
        pointers(plan.env.entries()),
        pointers(&paths),
    );
    let mut args = ChildArgs {
        paths: paths_p.as_ptr(),
        argv: argv_p.as_ptr(),
        sh_argv: sh_p.as_mut_ptr(),
        envp: envp_p.as_ptr(),
        cwd: cwd.as_ptr(),
        null,
        log: plan.log,
        parent: own_pid(),
        nofile: crate::process::open_files_for_children().map_or(std::ptr::null(), |l| l),
        errno: 0,
    };
    // Left uninitialised (zeroing it was a visible share of a spawn): only the child
    // writes it, before it reads anything of it.
    let mut stack: Vec<StackChunk> = Vec::with_capacity(STACK_BYTES / 16);
    // Written by the kernel (close-on-exec, as every pidfd is) when the clone succeeds.
    let mut pidfd: libc::c_int = -1;
    let mut clone = CloneArgs {
        flags: CLONE_VM | CLONE_VFORK | CLONE_PIDFD,
        pidfd: &mut pidfd as *mut libc::c_int as u64,
        exit_signal: libc::SIGCHLD as u64,
        stack: stack.spare_capacity_mut().as_mut_ptr() as u64,
        stack_size: (stack.capacity() * 16) as u64,
        ..CloneArgs::default()
    };
    let mut size = CLONE_ARGS_SIZE_VER0;
    if let Some(fd) = plan.cgroup {
        clone.flags |= CLONE_INTO_CGROUP;
        clone.cgroup = fd as u64;
        size = std::mem::size_of::<CloneArgs>();
    }
    let ret = with_signals_blocked(|| clone3(&mut clone, size, &mut args));
    drop(stack);
    if ret < 0 {
        let errno = -ret as i32;
        return match errno {
            // No clone3, or no CLONE_INTO_CGROUP: this kernel is older than the code.
            libc::ENOSYS | libc::E2BIG => Ok(Started::Unsupported),
            libc::EINVAL if plan.cgroup.is_some() => Ok(Started::Unsupported),
            _ => Err(io::Error::from_raw_os_error(errno)),
        };
    }
    let pid = ret as libc::pid_t;
    // SAFETY: the clone succeeded, so the kernel wrote a new descriptor there, ours alone.
    let pidfd = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(pidfd) };
    // SAFETY: the child has exec'd or exited (CLONE_VFORK); this reads what it wrote.
    let errno = unsafe { std::ptr::read_volatile(&args.errno) };
    if errno != 0 {
        // It exited with EXIT_EXEC_FAILED: reaped here, so no zombie is left for the loop.
        let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
        return Err(io::Error::from_raw_os_error(errno));
    }
    Ok(Started::Pid(pid, pidfd))
}

/// This process's pid, asked for once: it never changes in a process that spawns (no
/// spawn runs in a child forked without an `exec`).
fn own_pid() -> libc::pid_t {
    static PID: std::sync::OnceLock<libc::pid_t> = std::sync::OnceLock::new();
    *PID.get_or_init(|| std::process::id() as libc::pid_t)
}

/// The files `execvp` would try for `program`, in order: the program itself when it names
/// a path, else each PATH directory's (the worker's PATH, as std's `Command` looks it up
/// when the environment is set, else the default search path).
fn candidates(program: &str, env: &super::environ::WorkerEnv) -> Vec<Vec<u8>> {
    if program.contains('/') {
        return vec![program.as_bytes().to_vec()];
    }
    let path = env
        .get("PATH")
        .map_or(b"/bin:/usr/bin".as_slice(), |v| v.as_bytes());
    path.split(|b| *b == b':')
        .map(|dir| {
            let dir = if dir.is_empty() { b".".as_slice() } else { dir };
            [dir, b"/", program.as_bytes()].concat()
        })
        .collect()
}

/// `/dev/null` for the child's stdin, above 0-2 so the child's own `dup2`s cannot
/// overwrite it before it is copied. Opened once for the process (close-on-exec, so only
/// the `dup2` onto 0 reaches a worker): every spawn needs the same one.
fn dev_null() -> io::Result<RawFd> {
    static NULL: std::sync::OnceLock<OwnedFd> = std::sync::OnceLock::new();
    if let Some(fd) = NULL.get() {
        return Ok(fd.as_raw_fd());
    }
    let f = std::fs::File::open("/dev/null")?;
    let fd = super::above_stdio(f).map(OwnedFd::from)?;
    Ok(NULL.get_or_init(|| fd).as_raw_fd())
}

fn c_string(bytes: Vec<u8>) -> io::Result<CString> {
    CString::new(bytes).map_err(|e| {
        let text = String::from_utf8_lossy(&e.into_vec()).replace('\0', "\\0");
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{text:?} contains a NUL byte"),
        )
    })
}

fn c_strings(items: impl Iterator<Item = Vec<u8>>) -> io::Result<Vec<CString>> {
    items.map(c_string).collect()
}

/// The null-terminated array of pointers C wants; valid while `strings` lives.
fn pointers<'a>(strings: impl IntoIterator<Item = &'a CString>) -> Vec<*const libc::c_char> {
    strings
        .into_iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// Runs `f` with every signal blocked in this thread, then restores the mask.
fn with_signals_blocked<T>(f: impl FnOnce() -> T) -> T {
    let mut all = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    let mut old = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigfillset initialises `all`; pthread_sigmask initialises `old` before it is
    // used, and restores exactly what it saved.
    unsafe {
        libc::sigfillset(all.as_mut_ptr());
        libc::pthread_sigmask(libc::SIG_SETMASK, all.as_ptr(), old.as_mut_ptr());
        let out = f();
        libc::pthread_sigmask(libc::SIG_SETMASK, old.as_ptr(), std::ptr::null_mut());
        out
    }
}

/// `clone3` with the child running [`child`] on the stack `clone` names. Returns the
/// child's pid, or minus the errno.
#[cfg(target_arch = "x86_64")]
fn clone3(clone: &mut CloneArgs, size: usize, args: &mut ChildArgs) -> i64 {
    let ret: i64;
    // SAFETY: the kernel starts the child with its stack pointer at the top of the stack
    // `clone` names (alive until this returns: CLONE_VFORK holds this thread until the
    // child's execve or exit). The child calls `child`, which never returns; the parent
    // takes the jump. r12 and r13 carry `child`'s argument and address across the syscall,
    // which keeps every register but rax, rcx and r11.
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "mov rdi, r12",
            "call r13",
            "ud2",
            "2:",
            inlateout("rax") libc::SYS_clone3 => ret,
            in("rdi") clone as *mut CloneArgs,
            in("rsi") size,
            in("r12") args as *mut ChildArgs,
            in("r13") child as extern "C" fn(*mut ChildArgs) -> ! as usize,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

#[cfg(not(target_arch = "x86_64"))]
fn clone3(_: &mut CloneArgs, _: usize, _: &mut ChildArgs) -> i64 {
    -(libc::ENOSYS as i64)
}

/// The child, between the clone and its `execve`, on the supervisor's memory: system calls
/// only, through pointers the parent prepared.
extern "C" fn child(args: *mut ChildArgs) -> ! {
    // SAFETY: `args` points at the parent's ChildArgs, alive and untouched while the parent
    // waits (CLONE_VFORK); every pointer in it is a NUL-terminated string or a
    // null-terminated array of them. Only async-signal-safe libc calls follow.
    unsafe {
        let a = &mut *args;
        // Every handler the supervisor set would run its code on its memory: back to the
        // default before any signal is unblocked (an ignored signal stays ignored, as
        // across any exec, but SIGPIPE, which the Rust runtime ignores).
        for sig in 1..=libc::SIGRTMAX() {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
                continue;
            }
            let handled = old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN;
            if handled || sig == libc::SIGPIPE {
                let mut dfl: libc::sigaction = std::mem::zeroed();
                dfl.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(sig, &dfl, std::ptr::null_mut());
            }
        }
        if libc::setsid() < 0 {
            fail(a);
        }
        // A supervisor that died before this point recorded nothing of this child: it ends
        // instead of becoming a worker nobody can account for.
        if libc::getppid() != a.parent {
            libc::_exit(EXIT_ORPHANED);
        }
        if libc::dup2(a.null, 0) < 0 || libc::dup2(a.log, 1) < 0 || libc::dup2(a.log, 2) < 0 {
            fail(a);
        }
        if libc::chdir(a.cwd) < 0 {
            fail(a);
        }
        // Its own limits (no CLONE_THREAD): the supervisor's stay raised.
        if !a.nofile.is_null() && libc::setrlimit(libc::RLIMIT_NOFILE, a.nofile) < 0 {
            fail(a);
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::pthread_sigmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        // execvp's search: past a missing or unusable candidate to the next; EACCES is
        // reported if nothing else worked.
        let mut denied = false;
        let mut p = a.paths;
        while !(*p).is_null() {
            libc::execve(*p, a.argv, a.envp);
            match errno() {
                libc::ENOEXEC => {
                    // `/bin/sh FILE ARGS…`, FILE the one found.
                    *a.sh_argv.add(1) = *p;
                    libc::execve(*a.sh_argv, a.sh_argv.cast_const(), a.envp);
                    fail(a);
                }
                libc::EACCES => denied = true,
                libc::ENOENT | libc::ENOTDIR | libc::ELOOP | libc::ENAMETOOLONG => {}
                _ => fail(a),
            }
            p = p.add(1);
        }
        if denied {
            a.errno = libc::EACCES;
        } else {
            a.errno = libc::ENOENT;
        }
        libc::_exit(EXIT_EXEC_FAILED);
    }
}

/// Reports errno to the waiting parent and ends the child.
///
/// # Safety
/// Only in [`child`].
unsafe fn fail(a: &mut ChildArgs) -> ! {
    a.errno = errno();
    if a.errno == 0 {
        a.errno = libc::EIO;
    }
    // SAFETY: ends this child only; the parent resumes.
    unsafe { libc::_exit(EXIT_EXEC_FAILED) }
}

fn errno() -> i32 {
    // SAFETY: the calling thread's errno (in the child, the parent thread's slot, which the
    // parent does not read while it waits).
    unsafe { *libc::__errno_location() }
}
