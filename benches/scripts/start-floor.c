/* The floor of "start all" for compare.sh's idle workload: N workers (`sh worker.sh`,
 * each stamping `date +%s%N` into DIR/<slot>) started by the cheapest launcher there is,
 * a loop of clone(CLONE_VM) calls that waits for nothing, then the time from the first
 * clone to the last worker's stamp. Built and run by start-floor.sh.
 *
 *   start-floor N WORKER_SH STAMP_DIR   -> "<clone loop ms> <last stamp ms>"
 */
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

struct job { char *argv[3]; char *envp[2]; char slot[32]; };

static int child(void *arg) {
    struct job *j = arg;
    setsid();
    execve("/bin/sh", j->argv, j->envp);
    _exit(127);
}

int main(int argc, char **argv) {
    if (argc != 4) { fprintf(stderr, "usage: start-floor N WORKER_SH STAMP_DIR\n"); return 2; }
    int n = atoi(argv[1]);
    struct job *jobs = calloc(n, sizeof *jobs);
    pid_t *pids = calloc(n, sizeof *pids);
    if (!jobs || !pids) return 1;
    for (int i = 0; i < n; i++) {
        snprintf(jobs[i].slot, sizeof jobs[i].slot, "RED_AFK_SLOT=%d", i);
        jobs[i].argv[0] = "/bin/sh"; jobs[i].argv[1] = argv[2]; jobs[i].argv[2] = NULL;
        jobs[i].envp[0] = jobs[i].slot; jobs[i].envp[1] = NULL;
    }
    long long t0 = now_ns();
    for (int i = 0; i < n; i++) {
        char *stack = malloc(65536);
        if (!stack) return 1;
        pids[i] = clone(child, stack + 65536, CLONE_VM | SIGCHLD, &jobs[i]);
        if (pids[i] < 0) { perror("clone"); return 1; }
    }
    long long t1 = now_ns();
    long long last = 0;
    for (int i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%d", argv[3], i);
        long long stamp = 0;
        for (int tries = 0; tries < 60000 && stamp == 0; tries++) {
            FILE *f = fopen(path, "r");
            if (f) { if (fscanf(f, "%lld", &stamp) != 1) stamp = 0; fclose(f); }
            if (stamp == 0) usleep(1000);
        }
        if (stamp == 0) { fprintf(stderr, "worker %d never stamped\n", i); return 1; }
        if (stamp > last) last = stamp;
    }
    printf("%.1f %.1f\n", (t1 - t0) / 1e6, (last - t0) / 1e6);
    for (int i = 0; i < n; i++) kill(pids[i], SIGKILL);
    for (int i = 0; i < n; i++) waitpid(pids[i], NULL, __WALL);
    return 0;
}
