/* The least a supervisor can do per respawn, in C: compare.sh's columns `c-pg` and
 * `c-cgroup`. SLOTS workers (`sh WORKER_SH` with SLOT=<i> in its environment) kept
 * running, each restarted as soon as it ends, each in a new session with stdin on
 * /dev/null and its output on LOG, until SIGTERM or SIGINT. Two modes:
 *
 *   pg      clone3(CLONE_VM|CLONE_VFORK|CLONE_PIDFD), the pidfd in one epoll set, a
 *           `waitid` on the pidfd, a SIGTERM to the ended leader's group (the empty
 *           group's ESRCH), one log line per respawn: what afk-supervisor's
 *           process-group mode must do, and nothing else.
 *   cgroup  the same, each attempt in a cgroup of its own under CGROUP_DIR: `mkdir`, the
 *           child started inside it (CLONE_INTO_CGROUP), `cgroup.events` and `cpu.stat`
 *           read when it ended, `rmdir`: what a cgroup per attempt costs in the kernel.
 *
 * compare.sh measures it as it measures the others (schedstat of this one process, the
 * respawns counted from the workers' stamps). On SIGTERM it kills every worker's group,
 * reaps it, removes the attempt cgroups and exits 0.
 *
 *   respawn-floor pg|cgroup SLOTS WORKER_SH LOG [CGROUP_DIR]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif
#ifndef P_PIDFD
#define P_PIDFD 3
#endif

struct slot { int pidfd; int pid; long seq; char slot_var[32]; char **envp; };

extern char **environ;

/* Our environment without any SLOT, then SLOT=<i>: built once per slot. */
static char **slot_env(struct slot *s) {
    size_t n = 0;
    while (environ[n]) n++;
    char **e = calloc(n + 2, sizeof *e);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "SLOT=", 5) != 0) e[k++] = environ[i];
    e[k++] = s->slot_var;
    e[k] = NULL;
    return e;
}

static int cgroup_mode, log_fd, null_fd;
static const char *worker, *cg_base;
static volatile sig_atomic_t stop;

static void on_stop(int sig) { (void)sig; stop = 1; }

static int own_pid;

static void attempt_dir(char *buf, size_t n, int i, long seq) {
    snprintf(buf, n, "%s/floor-%d-slot-%d-%ld", cg_base, own_pid, i, seq);
}

/* Ends every process of an attempt's cgroup and removes it, waiting (up to 5 s) for the
 * kernel to empty it. */
static void kill_cgroup(const char *dir) {
    char path[600], buf[256];
    snprintf(path, sizeof path, "%s/cgroup.kill", dir);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
        if (write(fd, "1", 1) != 1) perror(path);
        close(fd);
    }
    snprintf(path, sizeof path, "%s/cgroup.events", dir);
    for (int tries = 0; tries < 500; tries++) {
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) break;
        ssize_t n = read(fd, buf, sizeof buf - 1);
        close(fd);
        buf[n > 0 ? n : 0] = 0;
        if (strstr(buf, "populated 0")) break;
        usleep(10000);
    }
    if (rmdir(dir) != 0) perror(dir);
}

/* What the child needs: it runs on a stack of its own, on our memory, until its execve. */
struct child_args { char **argv, **envp; };
static char child_stack[64 << 10] __attribute__((aligned(16)));

/* The child: defaults back for the signals we handle, an empty mask, a new session,
 * stdin on /dev/null, stdout and stderr on the log, then the worker. System calls only. */
static void child(void *p) {
    struct child_args *c = p;
    struct { void *handler; unsigned long flags; void *restorer; uint64_t mask; } dfl;
    memset(&dfl, 0, sizeof dfl);
    uint64_t none = 0;
    syscall(SYS_rt_sigaction, SIGTERM, &dfl, NULL, 8);
    syscall(SYS_rt_sigaction, SIGINT, &dfl, NULL, 8);
    syscall(SYS_rt_sigprocmask, SIG_SETMASK, &none, NULL, 8);
    syscall(SYS_setsid);
    syscall(SYS_dup2, null_fd, 0);
    syscall(SYS_dup2, log_fd, 1);
    syscall(SYS_dup2, log_fd, 2);
    syscall(SYS_execve, c->argv[0], c->argv, c->envp);
    syscall(SYS_exit, 127);
}

/* clone3 with the child calling fn(arg) on the stack the arguments name (x86-64): the
 * child never returns into our frames, which its stack does not hold. */
static long clone3_run(struct clone_args *a, void (*fn)(void *), void *arg) {
    long ret;
    register void (*r12)(void *) asm("r12") = fn;
    register void *r13 asm("r13") = arg;
    asm volatile("syscall\n\t"
                 "test %%rax, %%rax\n\t"
                 "jnz 1f\n\t"
                 "mov %%r13, %%rdi\n\t"
                 "call *%%r12\n\t"
                 "ud2\n"
                 "1:\n\t"
                 : "=a"(ret)
                 : "a"((long)SYS_clone3), "D"(a), "S"(sizeof *a), "r"(r12), "r"(r13)
                 : "rcx", "r11", "memory");
    return ret;
}

/* Starts slot i's worker; CLONE_VFORK holds us until its execve. */
static void spawn(struct slot *s, int i, int ep) {
    char dir[512];
    int cg = -1;
    s->seq++;
    if (cgroup_mode) {
        attempt_dir(dir, sizeof dir, i, s->seq);
        if (mkdir(dir, 0755) != 0) { perror(dir); exit(1); }
        cg = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (cg < 0) { perror(dir); exit(1); }
    }
    char *argv[] = {"/bin/sh", (char *)worker, NULL};
    struct child_args c = {argv, s->envp};
    int pidfd = -1;
    struct clone_args a;
    memset(&a, 0, sizeof a);
    a.flags = CLONE_VM | CLONE_VFORK | CLONE_PIDFD | (cgroup_mode ? CLONE_INTO_CGROUP : 0);
    a.pidfd = (uint64_t)(uintptr_t)&pidfd;
    a.exit_signal = SIGCHLD;
    a.stack = (uint64_t)(uintptr_t)child_stack;
    a.stack_size = sizeof child_stack;
    a.cgroup = cgroup_mode ? (uint64_t)cg : 0;
    /* No handler of ours may run in the child, which shares our memory: signals stay
     * blocked until it has set SIGTERM and SIGINT back to their defaults. */
    sigset_t all, old;
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, &old);
    long pid = clone3_run(&a, child, &c);
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (pid < 0) { errno = (int)-pid; perror("clone3"); exit(1); }
    if (cg >= 0) close(cg);
    s->pid = (int)pid;
    s->pidfd = pidfd;
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, pidfd, &ev) != 0) { perror("epoll_ctl"); exit(1); }
}

static void read_file(const char *dir, const char *name) {
    char path[600], buf[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) { perror(path); exit(1); }
    if (read(fd, buf, sizeof buf) < 0) { perror(path); exit(1); }
    close(fd);
}

/* Slot i's worker ended: reaped, its group signalled, a line logged, its cgroup read
 * and removed. */
static void ended(struct slot *s, int i, int ep) {
    siginfo_t si;
    memset(&si, 0, sizeof si);
    if (syscall(SYS_waitid, P_PIDFD, s->pidfd, &si, WEXITED, NULL) != 0) { perror("waitid"); exit(1); }
    epoll_ctl(ep, EPOLL_CTL_DEL, s->pidfd, NULL);
    syscall(SYS_pidfd_send_signal, s->pidfd, SIGTERM, NULL, 0);
    close(s->pidfd);
    if (cgroup_mode) {
        char dir[512];
        attempt_dir(dir, sizeof dir, i, s->seq);
        read_file(dir, "cgroup.events");
        read_file(dir, "cpu.stat");
        if (rmdir(dir) != 0) { perror(dir); exit(1); }
    }
    char line[160];
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    int n = snprintf(line, sizeof line, "%lld.%03ld slot.exit slot=%d pid=%d: exit %d\n",
                     (long long)t.tv_sec, t.tv_nsec / 1000000, i, s->pid, si.si_status);
    if (write(log_fd, line, (size_t)n) != n) { perror("log"); exit(1); }
}

int main(int argc, char **argv) {
    if (argc < 5 || (strcmp(argv[1], "pg") != 0 && strcmp(argv[1], "cgroup") != 0) ||
        (strcmp(argv[1], "cgroup") == 0 && argc < 6)) {
        fprintf(stderr, "usage: respawn-floor pg|cgroup SLOTS WORKER_SH LOG [CGROUP_DIR]\n");
        return 2;
    }
    cgroup_mode = strcmp(argv[1], "cgroup") == 0;
    own_pid = (int)getpid();
    int slots = atoi(argv[2]);
    worker = argv[3];
    cg_base = cgroup_mode ? argv[5] : NULL;
    log_fd = open(argv[4], O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (slots < 1 || log_fd < 0 || null_fd < 0) { perror("open"); return 1; }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct slot *s = calloc((size_t)slots, sizeof *s);
    for (int i = 0; i < slots; i++) {
        snprintf(s[i].slot_var, sizeof s[i].slot_var, "SLOT=%d", i);
        s[i].envp = slot_env(&s[i]);
        spawn(&s[i], i, ep);
    }
    struct epoll_event evs[64];
    while (!stop) {
        int n = epoll_wait(ep, evs, 64, -1);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) { perror("epoll_wait"); return 1; }
        for (int k = 0; k < n && !stop; k++) {
            int i = (int)evs[k].data.u32;
            ended(&s[i], i, ep);
            spawn(&s[i], i, ep);
        }
    }
    for (int i = 0; i < slots; i++) {
        kill(-s[i].pid, SIGKILL);
        siginfo_t si;
        syscall(SYS_waitid, P_PIDFD, s[i].pidfd, &si, WEXITED, NULL);
        if (cgroup_mode) {
            char dir[512];
            attempt_dir(dir, sizeof dir, i, s[i].seq);
            kill_cgroup(dir);
        }
    }
    return 0;
}
