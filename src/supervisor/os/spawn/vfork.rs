//! A worker started the way `posix_spawn(3)` starts a process, with the one step it lacks,
//! and without waiting for its `execve`.
//!
//! `clone3(CLONE_VM | CLONE_CHILD_CLEARTID)`: the child runs on the supervisor's memory (on
//! a stack of its own) until its `execve`. Nothing of the supervisor's memory is copied,
//! where a `fork` (std's `Command` forks whenever a `pre_exec` is set) copies every page
//! table and the child's `execve` tears the copy down again: that pair was most of a
//! respawn's cost. In cgroup mode `CLONE_INTO_CGROUP` starts the child inside its attempt
//! cgroup, so no code of the worker runs outside it and no migration through
//! `cgroup.procs` is needed.
//!
//! `posix_spawn` adds `CLONE_VFORK`, which holds the parent until the child's `execve`:
//! a fleet's start spawned its workers one at a time, each spawn waiting for the last
//! child to load its program on a machine busy with the workers already started, and every
//! respawn put the supervisor to sleep and woke it again. Here the parent goes on at once
//! ([`launch`]); what the child reads is kept in a [`Flight`] until the kernel says the
//! child let go of the memory (it clears a word and wakes its futex at the `execve` or the
//! exit). [`InFlight::land`] waits for that and reads the `execve`'s error, if any;
//! [`InFlight::detach`] hands the pid and pidfd over at once and leaves an [`Aloft`] to be
//! asked later, without a system call.
//!
//! The child runs only [`child`]: raw system calls, no allocation, no lock, nothing that
//! could unwind, and nothing that writes `errno` (it would be the supervisor thread's).
//! Signals are blocked in the supervisor's thread around the clone, and the child resets
//! every handler before it unblocks them, so no handler of the supervisor ever runs in the
//! child (glibc's `posix_spawn` does the same). What std's `Command` and the `pre_exec`
//! guaranteed still holds: a new session, stdin on `/dev/null`, stdout and stderr on the
//! log, an empty signal mask with `SIGPIPE` at its default, and a child whose supervisor
//! died before its `execve` ends with exit 111.
//!
//! x86-64 only (the clone and the system calls need a few instructions of assembly);
//! elsewhere, and on kernels without `clone3` (before 5.3) or `CLONE_INTO_CGROUP` (before
//! 5.7), the caller forks instead.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};

/// Exit code of a child that lost its supervisor before it became a worker.
pub(super) const EXIT_ORPHANED: i32 = crate::exit_code::ORPHANED;
/// Exit code of a child whose `execve` failed (its errno is reported to the supervisor).
const EXIT_EXEC_FAILED: i32 = crate::exit_code::EXEC_FAILED;

/// What the caller spawns.
pub(super) struct Plan<'a> {
    pub argv: &'a [String],
    pub cwd: &'a Path,
    pub env: &'a super::environ::WorkerEnv,
    /// Stdout and stderr.
    pub log: RawFd,
    /// cgroup mode: the attempt cgroup's directory, opened read-only.
    pub cgroup: Option<RawFd>,
    /// Return while the child is on its way to its `execve` (the loop's spawns: the next
    /// clone, or the loop's next turn, overlaps it); otherwise the clone itself waits for
    /// it (`CLONE_VFORK`), which a spawn answered in full at once does for one system call
    /// less than a launch and a land.
    pub overlap: bool,
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
    /// Cloned with `CLONE_FILES`: the child's first call gives it a table of its own.
    shared_files: bool,
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
const CLONE_FILES: u64 = 0x400;
const CLONE_PIDFD: u64 = 0x1000;
const CLONE_VFORK: u64 = 0x4000;
const CLONE_CHILD_CLEARTID: u64 = 0x20_0000;
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;
/// The first version of `clone_args` (without `set_tid` and `cgroup`), for kernels 5.3-5.6.
const CLONE_ARGS_SIZE_VER0: usize = 64;
/// The child's stack: a few calls deep, never more.
const STACK_BYTES: usize = 64 << 10;

/// The child's stack is made of these, so its top is 16-byte aligned, as the ABI wants
/// at a call.
#[repr(C, align(16))]
struct StackChunk([u8; 16]);

/// The outcome of [`launch`]: a child on its way to its `execve`, or that this system
/// cannot start it so (the caller forks instead).
pub(super) enum Launched {
    Flying(InFlight),
    Unsupported,
}

/// A child cloned and not yet known to have run its `execve`: what it reads stays at one
/// address until [`InFlight::land`] has seen it let go of the supervisor's memory.
pub(super) struct InFlight {
    flight: Box<Flight>,
    pidfd: OwnedFd,
}

/// Everything the child reads, and the word the kernel clears when it no longer does.
struct Flight {
    args: ChildArgs,
    /// Nonzero until the child's `execve` (or its exit) gives the supervisor's memory back:
    /// then the kernel writes 0 here and wakes its futex (`CLONE_CHILD_CLEARTID`).
    released: AtomicU32,
    /// The child, once cloned (0 before): a `Flight` is never freed before it let go.
    pid: libc::pid_t,
    /// The child's stack (its capacity; never any element), given back to
    /// [`SPARE_STACKS`] once the child let go.
    stack: Vec<StackChunk>,
    // Only read by the child, through `args`; held here so that they outlive it.
    _strings: [Vec<CString>; 3],
    _cwd: CString,
    _env: super::environ::WorkerEnv,
    _pointers: [Vec<*const libc::c_char>; 4],
}

/// What [`Flight::released`] holds until the kernel clears it.
const HELD: u32 = 1;

/// Clones the child and returns while it is still on its way to its `execve`: the clone
/// of the next worker overlaps this one's `execve`, where `CLONE_VFORK` held the
/// supervisor until each child had run its own (a fleet's start-up spawned one worker at
/// a time, each waiting for the last one to load its program, on a machine busy starting
/// the workers before it). [`InFlight::land`] waits for the `execve` and says whether it
/// failed.
pub(super) fn launch(plan: &Plan<'_>) -> io::Result<Launched> {
    if !cfg!(target_arch = "x86_64") {
        return Ok(Launched::Unsupported);
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
    let env = plan.env.clone();
    // The pointers name heap buffers, which stay where they are when their owners move
    // into the box.
    let (argv_p, mut sh_p, envp_p, paths_p) = (
        pointers(&argv),
        pointers(&sh_argv),
        pointers(env.entries()),
        pointers(&paths),
    );
    let args = ChildArgs {
        paths: paths_p.as_ptr(),
        argv: argv_p.as_ptr(),
        sh_argv: sh_p.as_mut_ptr(),
        envp: envp_p.as_ptr(),
        cwd: cwd.as_ptr(),
        null,
        log: plan.log,
        parent: own_pid(),
        nofile: crate::process::open_files_for_children().map_or(std::ptr::null(), |l| l),
        shared_files: share_files(),
        errno: 0,
    };
    let mut flight = Box::new(Flight {
        args,
        released: AtomicU32::new(HELD),
        pid: 0,
        stack: spare_stack(),
        _strings: [argv, sh_argv, paths],
        _cwd: cwd,
        _env: env,
        _pointers: [argv_p, sh_p, envp_p, paths_p],
    });
    // Written by the kernel (close-on-exec, as every pidfd is) when the clone succeeds.
    let mut pidfd: libc::c_int = -1;
    let mut clone = CloneArgs {
        flags: CLONE_VM | CLONE_PIDFD | CLONE_CHILD_CLEARTID,
        pidfd: &mut pidfd as *mut libc::c_int as u64,
        child_tid: flight.released.as_ptr() as u64,
        exit_signal: libc::SIGCHLD as u64,
        stack: flight.stack.spare_capacity_mut().as_mut_ptr() as u64,
        stack_size: (flight.stack.capacity() * 16) as u64,
        ..CloneArgs::default()
    };
    if !plan.overlap {
        clone.flags |= CLONE_VFORK;
    }
    if flight.args.shared_files {
        clone.flags |= CLONE_FILES;
    }
    let mut size = CLONE_ARGS_SIZE_VER0;
    if let Some(fd) = plan.cgroup {
        clone.flags |= CLONE_INTO_CGROUP;
        clone.cgroup = fd as u64;
        size = std::mem::size_of::<CloneArgs>();
    }
    let args: *mut ChildArgs = &mut flight.args;
    let ret = with_signals_blocked(|| clone3(&mut clone, size, args));
    if ret < 0 {
        let errno = -ret as i32;
        return match errno {
            // No clone3, or no CLONE_INTO_CGROUP: this kernel is older than the code.
            libc::ENOSYS | libc::E2BIG => Ok(Launched::Unsupported),
            libc::EINVAL if plan.cgroup.is_some() => Ok(Launched::Unsupported),
            _ => Err(io::Error::from_raw_os_error(errno)),
        };
    }
    flight.pid = ret as libc::pid_t;
    // SAFETY: the clone succeeded, so the kernel wrote a new descriptor there, ours alone.
    let pidfd = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(pidfd) };
    Ok(Launched::Flying(InFlight { flight, pidfd }))
}

impl InFlight {
    pub(super) fn pid(&self) -> libc::pid_t {
        self.flight.pid
    }

    /// Waits until the child has run its `execve` (or ended), then frees what it read: its
    /// pid and pidfd, or the `execve`'s error (the child, which exited, reaped here).
    pub(super) fn land(self) -> io::Result<(libc::pid_t, OwnedFd)> {
        self.flight.wait_released();
        if let Some(Err(e)) = self.flight.outcome() {
            // It exited with EXIT_EXEC_FAILED: reaped here, so no zombie is left for the loop.
            let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(self.pid()), None);
            return Err(e);
        }
        Ok((self.pid(), self.pidfd))
    }

    /// The child's pid and pidfd at once, without waiting for its `execve`: what it reads
    /// goes on in the [`Aloft`], which says later whether the `execve` ran. A child that
    /// already let go is handed back, for [`InFlight::land`].
    pub(super) fn detach(self) -> Result<(libc::pid_t, OwnedFd, Aloft), InFlight> {
        if self.flight.outcome().is_some() {
            // Let go already: `land` answers in full, without waiting.
            return Err(self);
        }
        Ok((self.flight.pid, self.pidfd, Aloft(self.flight)))
    }
}

/// What a detached child reads until its `execve`, kept until it let go ([`Aloft::landed`]).
/// Dropped before that, it waits, as a [`Flight`] does.
pub(super) struct Aloft(Box<Flight>);

impl Aloft {
    /// `None` while the child may still read it; then `Ok` if its `execve` ran, or the
    /// `execve`'s error (the child exits [`EXIT_EXEC_FAILED`], and is left to whoever
    /// waits for it: its end is reported as any worker's is). No system call.
    pub(super) fn landed(&self) -> Option<io::Result<()>> {
        self.0.outcome()
    }

    /// Frees what the child read, for a child known to have ended (it reads nothing any
    /// more, whether or not the kernel cleared the word: a core dump skips the clear).
    pub(super) fn ended(mut self) {
        self.0.pid = 0;
    }

    /// Returns once the child let go ([`Aloft::landed`] is then `Some`).
    pub(super) fn wait(&self) {
        self.0.wait_released();
    }
}

impl Flight {
    /// `None` while the child may still read this; then `Ok` if its `execve` ran, or the
    /// `execve`'s error. No system call.
    fn outcome(&self) -> Option<io::Result<()>> {
        if self.released.load(Ordering::Acquire) != 0 {
            return None;
        }
        // SAFETY: the child's last write to `errno` came before the kernel's clear (at its
        // exit or execve), which the acquire load above saw.
        let errno = unsafe { std::ptr::read_volatile(&self.args.errno) };
        Some(match errno {
            0 => Ok(()),
            e => Err(io::Error::from_raw_os_error(e)),
        })
    }

    /// Returns once the child no longer reads this (at once before a clone).
    fn wait_released(&self) {
        if self.pid == 0 {
            return;
        }
        let word = &self.released;
        while word.load(Ordering::Acquire) != 0 {
            // Not a private futex: the kernel's wake at the clear is a shared one. Woken
            // early, by a signal or a spurious wake, it only looks again. A child that
            // died without the clear (a core dump skips it) is let go of by its exit.
            let tick = libc::timespec {
                tv_sec: 0,
                tv_nsec: 50_000_000,
            };
            // SAFETY: waits on a word of ours, alive for the call, with a valid timeout.
            unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    word.as_ptr(),
                    libc::FUTEX_WAIT,
                    HELD,
                    &tick as *const libc::timespec,
                );
            }
            if word.load(Ordering::Acquire) != 0
                && crate::process::child_exit(self.pid, false).is_some()
            {
                return;
            }
        }
    }
}

impl Drop for Flight {
    /// A flight dropped before it landed (its caller failed in between) still waits: the
    /// child may be reading it. Its stack then serves the next.
    fn drop(&mut self) {
        self.wait_released();
        let stack = std::mem::take(&mut self.stack);
        let mut spare = SPARE_STACKS.lock().unwrap_or_else(|p| p.into_inner());
        if stack.capacity() == STACK_BYTES / 16 && spare.len() < SPARE_STACKS_MAX {
            spare.push(stack);
        }
    }
}

/// Stacks of children that let go, for the next: a fresh 64 KiB block for every spawn sent
/// malloc through a consolidation of its free lists each time. As many are kept as a batch
/// has in flight.
static SPARE_STACKS: std::sync::Mutex<Vec<Vec<StackChunk>>> = std::sync::Mutex::new(Vec::new());
/// `children::IN_FLIGHT`, which this module, below it, cannot name.
const SPARE_STACKS_MAX: usize = 32;

/// A stack for a child: a spare one, else a new block, left uninitialised (zeroing it was a
/// visible share of a spawn): only the child writes it, before it reads anything of it.
fn spare_stack() -> Vec<StackChunk> {
    let spare = SPARE_STACKS.lock().unwrap_or_else(|p| p.into_inner()).pop();
    spare.unwrap_or_else(|| Vec::with_capacity(STACK_BYTES / 16))
}

/// Whether the child may share the supervisor's descriptor table until its own
/// `unshare(CLONE_FILES)` (which then copies it on the child's time, not inside the
/// supervisor's clone). Only where no seccomp filter is in force (`/proc/self/status`
/// says `Seccomp: 0`, read once): a filter may refuse `unshare` (container runtimes' default
/// profiles do without CAP_SYS_ADMIN), and a child that could not unshare would fail every
/// spawn. Elsewhere the clone copies the table, as a clone without `CLONE_FILES` does.
fn share_files() -> bool {
    static SHARE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SHARE.get_or_init(|| {
        std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
            s.lines()
                .any(|l| l.split_whitespace().eq(["Seccomp:", "0"]))
        })
    })
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
fn clone3(clone: &mut CloneArgs, size: usize, args: *mut ChildArgs) -> i64 {
    let ret: i64;
    // SAFETY: the kernel starts the child with its stack pointer at the top of the stack
    // `clone` names (in a `Flight`, kept until the child's execve or exit has let go of
    // it). The child calls `child`, which never returns; the parent
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
            in("r12") args,
            in("r13") child as extern "C" fn(*mut ChildArgs) -> ! as usize,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

#[cfg(not(target_arch = "x86_64"))]
fn clone3(_: &mut CloneArgs, _: usize, _: *mut ChildArgs) -> i64 {
    -(libc::ENOSYS as i64)
}

/// The child, between the clone and its `execve`, on the supervisor's memory while the
/// supervisor's threads run on: raw system calls only, through pointers the parent
/// prepared. Not libc's wrappers: they set `errno`, and the child has no thread-local
/// storage of its own (no `CLONE_SETTLS`), so each failed call (a missing PATH candidate,
/// a signal libc reserves) would write the `errno` of the supervisor's thread under it,
/// and mio reads that one to tell "would block" from a failure.
extern "C" fn child(args: *mut ChildArgs) -> ! {
    // SAFETY: `args` points into the parent's `Flight`, alive and untouched until this
    // child has exec'd or exited; every pointer in it is a NUL-terminated string or a
    // null-terminated array of them.
    unsafe {
        let a = &mut *args;
        // A table of its own before it changes any descriptor: where the clone shared the
        // supervisor's (`CLONE_FILES`, see `share_files`), the copy of every descriptor the
        // supervisor holds is made here, on the child's time, not inside the supervisor's
        // clone. What it needs (the log, /dev/null) is held open by the parent until its
        // `execve`.
        if a.shared_files {
            check(a, sys(libc::SYS_unshare, CLONE_FILES as usize, 0, 0, 0));
        }
        // Every handler the supervisor set would run its code on its memory: back to the
        // default before any signal is unblocked (an ignored signal stays ignored, as
        // across any exec, but SIGPIPE, which the Rust runtime ignores).
        for sig in 1..=KERNEL_SIGNALS {
            let mut old = KernelSigaction::default();
            if sys(
                libc::SYS_rt_sigaction,
                sig,
                0,
                &mut old as *mut _ as usize,
                8,
            ) != 0
            {
                continue;
            }
            let handled = old.handler != SIG_DFL && old.handler != SIG_IGN;
            if handled || sig == libc::SIGPIPE as usize {
                let dfl = KernelSigaction::default();
                sys(libc::SYS_rt_sigaction, sig, &dfl as *const _ as usize, 0, 8);
            }
        }
        check(a, sys(libc::SYS_setsid, 0, 0, 0, 0));
        // A supervisor that died before this point recorded nothing of this child: it ends
        // instead of becoming a worker nobody can account for.
        if sys(libc::SYS_getppid, 0, 0, 0, 0) != a.parent as isize {
            exit(EXIT_ORPHANED);
        }
        for (from, to) in [(a.null, 0), (a.log, 1), (a.log, 2)] {
            check(a, sys(libc::SYS_dup2, from as usize, to, 0, 0));
        }
        check(a, sys(libc::SYS_chdir, a.cwd as usize, 0, 0, 0));
        // Its own limits (no CLONE_THREAD): the supervisor's stay raised.
        if !a.nofile.is_null() {
            let nofile = libc::RLIMIT_NOFILE as usize;
            check(a, sys(libc::SYS_setrlimit, nofile, a.nofile as usize, 0, 0));
        }
        let empty: u64 = 0;
        sys(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK as usize,
            &empty as *const u64 as usize,
            0,
            8,
        );
        // execvp's search: past a missing or unusable candidate to the next; EACCES is
        // reported if nothing else worked.
        let mut denied = false;
        let mut p = a.paths;
        while !(*p).is_null() {
            let e = -sys(
                libc::SYS_execve,
                *p as usize,
                a.argv as usize,
                a.envp as usize,
                0,
            );
            match e as i32 {
                libc::ENOEXEC => {
                    // `/bin/sh FILE ARGS…`, FILE the one found.
                    *a.sh_argv.add(1) = *p;
                    let sh = *a.sh_argv as usize;
                    let e = sys(libc::SYS_execve, sh, a.sh_argv as usize, a.envp as usize, 0);
                    check(a, e);
                    fail(a, libc::EIO);
                }
                libc::EACCES => denied = true,
                libc::ENOENT | libc::ENOTDIR | libc::ELOOP | libc::ENAMETOOLONG => {}
                e => fail(a, e),
            }
            p = p.add(1);
        }
        fail(a, if denied { libc::EACCES } else { libc::ENOENT });
    }
}

/// Signals 1 to 64, as the kernel numbers them.
const KERNEL_SIGNALS: usize = 64;
const SIG_DFL: usize = 0;
const SIG_IGN: usize = 1;

/// `struct sigaction` as `rt_sigaction` takes it on x86-64 (not libc's layout).
#[repr(C)]
#[derive(Default)]
struct KernelSigaction {
    handler: usize,
    flags: u64,
    restorer: usize,
    mask: u64,
}

/// A system call: its result, or minus the errno. Nothing else is touched.
#[cfg(target_arch = "x86_64")]
unsafe fn sys(n: libc::c_long, a: usize, b: usize, c: usize, d: usize) -> isize {
    let ret: isize;
    // SAFETY: the caller passes arguments valid for system call `n`; `syscall` keeps every
    // register but rax, rcx and r11, and uses no stack.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") n as isize => ret,
            in("rdi") a,
            in("rsi") b,
            in("rdx") c,
            in("r10") d,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn sys(_: libc::c_long, _: usize, _: usize, _: usize, _: usize) -> isize {
    -(libc::ENOSYS as isize)
}

/// Ends the child with the errno of a failed call (`ret` below 0).
///
/// # Safety
/// Only in [`child`].
unsafe fn check(a: &mut ChildArgs, ret: isize) {
    if ret < 0 {
        // SAFETY: in the child, as the caller promises.
        unsafe { fail(a, -ret as i32) }
    }
}

/// Reports `errno` to the parent and ends the child.
///
/// # Safety
/// Only in [`child`].
unsafe fn fail(a: &mut ChildArgs, errno: i32) -> ! {
    // SAFETY: the parent reads it only once the kernel's clear at this exit has been seen.
    unsafe { std::ptr::write_volatile(&mut a.errno, errno) };
    exit(EXIT_EXEC_FAILED)
}

fn exit(code: i32) -> ! {
    // SAFETY: exit_group ends this child (its own thread group) and returns to no one.
    unsafe {
        sys(libc::SYS_exit_group, code as usize, 0, 0, 0);
    }
    // Unreachable: exit_group does not return.
    loop {
        std::hint::spin_loop();
    }
}
