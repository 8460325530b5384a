#!/usr/bin/env bash
# Side-by-side supervisor benchmark: afk-supervisor, supervisord, s6 and a floor of plain
# `while :; do sh worker; done` loops, the same shell-script workers for each, in one run.
#
#   bash benches/scripts/compare.sh 2>&1 | tee /tmp/bench-compare.txt
#   SIZES="64 256 1000" IDLE_S=30 RESPAWNS=500 SUPERVISORS="afk afk-bg supervisord s6 floor" bash benches/scripts/compare.sh
#   SIZES=64 IDLE_S=10 RESPAWNS=200 SUPERVISORS="afk floor" bash benches/scripts/compare.sh   # quick
#
# It ends with the goals of issue 25 (item 4) as a table, each `met` or `MISSED`: CPU per
# respawn at most 2x the floor's, start of 64 workers in at most 100 ms, idle CPU at 1,000
# workers at most 10 ms per 30 s. A goal whose figures the run left out says `not run`.
#
# For every size N of SIZES, an idle fleet of N workers (`exec sleep 100000`): the
# supervisor's RSS and PSS (KiB), threads, CPU time (utime+stime) over IDLE_S s idle,
# start-all (launch -> every worker's first stamp) and stop-all (stop requested -> every
# worker gone and the supervisor exited). Then RESPAWN_SLOTS (16) workers living 0.2 s and
# exiting 1: respawn delay p50/p90/max (a worker's end stamp -> its successor's start stamp
# in the same slot) and the supervisor's CPU per respawn over RESPAWNS respawns.
# "The supervisor" is afk-supervisor's process, supervisord's python process, s6-svscan plus
# all its s6-supervise children (summed), and for the floor the loop shells (summed).
# Each supervisor leads its own session (setsid), as under systemd or in a tmux pane; the
# column afk-bg is afk-supervisor started as a plain background job of this script instead
# (not a process-group leader), which today makes it take its /proc-reading fallback path.
# The column afk-pg is afk-supervisor with `isolation.mode = "process-group"`: the isolation
# the others have (a process group per worker, no cgroup), where the afk column takes the
# default (a cgroup per attempt where the host delegates one), so afk/afk-pg is what the
# cgroups cost.
# CPU is utime+stime from /proc/PID/stat (clock ticks, all threads, not reaped children's)
# and, finer, the sum of the threads' /proc/PID/task/TID/schedstat (blind to threads that
# ended in between).
# The columns c-pg and c-cgroup are the least a supervisor can do per respawn, in C
# (respawn-floor.c, built with cc): clone3 with a pidfd in one epoll set, a waitid, a signal
# to the ended group and one log line; c-cgroup adds a cgroup per attempt (mkdir, the child
# started inside it, cgroup.events and cpu.stat read, rmdir) under a directory it makes in
# this script's own cgroup v2 (left out, with a note, where that cannot be made). They set
# the floor of each isolation mode apart from the floor of plain `sh` loops.
# afk-supervisor runs with fast_death_s = 0 in the respawn workload (no circuit); s6 waits 1 s
# before restarting a service that died within 1 s, which is reported as it is.
#
# Other knobs: START_TIMEOUT (120 s), STOP_TIMEOUT (60 s), RESPAWN_TIMEOUT (180 s), SETTLE_S (2 s),
# AFK_BIN (skip the build and use that binary), KEEP_TMP=1 (keep the temp dir, print its path).
# The release binary is built with cargo and found from its JSON output, so CARGO_TARGET_DIR
# is honoured. supervisord comes from PyPI into a virtualenv in the temp dir; s6 from Debian
# (apt-get install s6) when s6-svscan is missing. Only processes this script starts are
# touched: each is tracked by pid and carries BENCH_TAG=<this run> in its environment, which
# the exit trap uses to kill anything left. Every wait has a deadline.
set -euo pipefail
cd "$(dirname "$0")/../.."
SIZES=${SIZES:-"64 256 1000"}
IDLE_S=${IDLE_S:-30}
RESPAWNS=${RESPAWNS:-500}
RESPAWN_SLOTS=${RESPAWN_SLOTS:-16}
SUPERVISORS=${SUPERVISORS:-"afk afk-bg afk-pg supervisord s6 floor c-pg c-cgroup"}
START_TIMEOUT=${START_TIMEOUT:-120}
STOP_TIMEOUT=${STOP_TIMEOUT:-60}
RESPAWN_TIMEOUT=${RESPAWN_TIMEOUT:-180}
SETTLE_S=${SETTLE_S:-2}
BEGIN=$SECONDS

PY=$(python3 -c 'import sys; print(sys.executable)') # the real interpreter, not a shim
HELPER=$PWD/benches/scripts/compare.py
h() { "$PY" "$HELPER" "$@"; }
log() { echo "[compare +$((SECONDS - BEGIN))s] $*" >&2; }

if [ -z "${AFK_BIN:-}" ]; then
  log "building the release binary (cargo build --release)"
  AFK_BIN=$(cargo build --release --message-format=json-render-diagnostics | h exe afk-supervisor)
fi
[ -x "$AFK_BIN" ] || { echo "no afk-supervisor binary at $AFK_BIN" >&2; exit 1; }

TMP=$(mktemp -d -t afk-compare.XXXXXX)
TAG="afk-compare-$$-$RANDOM$RANDOM"
ROOT="" # the pid of the supervisor (or floor launcher) currently running
CG_FLOOR="" # the cgroup v2 directory c-cgroup makes its attempts in
cleanup() {
  set +e
  [ -n "$ROOT" ] && kill -KILL "$ROOT" 2>/dev/null
  kill_tagged
  wait 2>/dev/null
  [ -n "$CG_FLOOR" ] && rmdir "$CG_FLOOR"/floor-* "$CG_FLOOR" 2>/dev/null
  if [ -n "${KEEP_TMP:-}" ]; then echo "tmp kept: $TMP" >&2; else rm -rf "$TMP"; fi
}
kill_tagged() { # SIGKILL every live process of this run (by pid, found by BENCH_TAG); bounded
  local pids
  for _ in $(seq 1 50); do
    pids=$(h tagged "$TAG" 2>/dev/null) || pids=""
    [ -z "$pids" ] && return 0
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    sleep 0.1
  done
  echo "warning: processes of this run would not die: $pids" >&2
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

RESULTS=$TMP/results
NOTES=$TMP/notes
: >"$RESULTS"
: >"$NOTES"
res() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$RESULTS"; } # SECTION FIGURE SUP VALUE
note() { echo "$*" >>"$NOTES"; }

# ---- what the others need -------------------------------------------------------------
want() { case " $SUPERVISORS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
if want supervisord; then
  log "installing supervisor from PyPI into $TMP/venv"
  "$PY" -m venv "$TMP/venv"
  "$TMP/venv/bin/pip" install -q --disable-pip-version-check supervisor
fi
if want s6 && ! command -v s6-svscan >/dev/null; then
  log "installing s6 (apt-get install s6)"
  { apt-get update -qq && apt-get install -y -qq s6; } >"$TMP/apt.log" 2>&1 ||
    { cat "$TMP/apt.log" >&2; echo "cannot install s6" >&2; exit 1; }
fi

if want c-pg || want c-cgroup; then
  cc -O2 -o "$TMP/respawn-floor" benches/scripts/respawn-floor.c ||
    { echo "cannot build benches/scripts/respawn-floor.c (needs cc)" >&2; exit 1; }
fi
# c-cgroup's attempts go under a directory of this script's own cgroup (cgroup v2), as
# afk-supervisor's go under its own.
if want c-cgroup; then
  cg_mnt=$(awk '{ for (i = 1; i <= NF; i++) if ($i == "-") { if ($(i + 1) == "cgroup2") print $5; break } }' /proc/self/mountinfo | head -n 1)
  cg_rel=$(awk -F: '$1 == "0" { print $3; exit }' /proc/self/cgroup)
  if [ -n "$cg_mnt" ] && mkdir "$cg_mnt$cg_rel/afk-compare-floor-$$" 2>/dev/null; then
    CG_FLOOR=$cg_mnt$cg_rel/afk-compare-floor-$$
  else
    note "c-cgroup left out: no writable cgroup v2 directory under ${cg_mnt:-(no cgroup2 mount)}${cg_rel}"
    SUPERVISORS=$(printf '%s\n' $SUPERVISORS | grep -vx c-cgroup | tr '\n' ' ')
  fi
fi

# ---- workers ---------------------------------------------------------------------------
# write_worker MODE SLOT DIR FILE: the worker script. SLOT is the slot's name as the script
# sees it (a variable the supervisor sets, or a literal); DIR the stamp dir.
#   idle: stamps `NS PID` into DIR/<slot>, then `exec sleep 100000`
#   die:  appends `s NS PID`, sleeps 0.2 s, appends `e NS`, exits 1
write_worker() {
  local mode=$1 slot=$2 dir=$3 file=$4
  if [ "$mode" = idle ]; then
    printf '%s\n' '#!/bin/sh' \
      "echo \"\$(date +%s%N) \$\$\" > \"$dir/$slot\"" \
      'exec sleep 100000' >"$file"
  else
    printf '%s\n' '#!/bin/sh' \
      "echo \"s \$(date +%s%N) \$\$\" >> \"$dir/$slot\"" \
      'sleep 0.2' \
      "echo \"e \$(date +%s%N)\" >> \"$dir/$slot\"" \
      'exit 1' >"$file"
  fi
}

# ---- launchers: set PID (the process to wait for), SPEC (the measured pid set, see
# compare.py), STOP (the stop action for compare.py stopwait) and T_LAUNCH (ns) -------------
# Every supervisor leads its own session (setsid, as under systemd or in a tmux pane), but
# afk-bg: afk-supervisor started as a plain background job of this script, in the script's
# process group, as `afk-supervisor ... &` in a script or under nohup starts it.
launch_afk() { # MODE N DIR RUN [bg|pg]
  local mode=$1 n=$2 dir=$3 run=$4 timing="" setsid=setsid isolation=auto
  [ "${5:-}" = bg ] && setsid=""
  [ "${5:-}" = pg ] && isolation=process-group
  git init -q "$run/repo"
  mkdir -p "$run/repo/.red"
  write_worker "$mode" '$RED_AFK_SLOT' "$dir" "$run/worker.sh"
  [ "$mode" = die ] && timing="fast_death_s = 0"
  printf '%s\n' '[worker]' "command = [\"/bin/sh\", \"$run/worker.sh\"]" \
    '[tracker]' 'kind = "local"' '[timing]' "$timing" \
    '[isolation]' "mode = \"$isolation\"" >"$run/repo/.red/afk-supervisor.toml"
  T_LAUNCH=${EPOCHREALTIME/./}000
  BENCH_TAG=$TAG $setsid "$AFK_BIN" --repo "$run/repo" --workers "$n" >"$run/stderr" 2>&1 &
  PID=$!
  SPEC=$PID
  STOP=("kill:TERM:$PID")
  AFK_LOG=$run/repo/.red/tmp/supervisors/default/supervisor.log.toonl
}
launch_afk-bg() { launch_afk "$@" bg; }
launch_afk-pg() { launch_afk "$@" pg; }

launch_supervisord() {
  local mode=$1 n=$2 dir=$3 run=$4
  write_worker "$mode" '$SUPERVISOR_PROCESS_NAME' "$dir" "$run/worker.sh"
  local minfds=$((n * 4 + 256))
  [ "$minfds" -lt 1024 ] && minfds=1024
  cat >"$run/supervisord.conf" <<CONF
[unix_http_server]
file=$run/supervisor.sock

[supervisord]
nodaemon=true
logfile=$run/supervisord.log
pidfile=$run/supervisord.pid
childlogdir=$run
minfds=$minfds
minprocs=$((n + 256))

[rpcinterface:supervisor]
supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface

[supervisorctl]
serverurl=unix://$run/supervisor.sock

[program:w]
command=/bin/sh $run/worker.sh
process_name=w%(process_num)d
numprocs=$n
autorestart=true
startsecs=0
startretries=1000000
stopsignal=TERM
stopwaitsecs=10
stdout_logfile=NONE
stderr_logfile=NONE
CONF
  T_LAUNCH=${EPOCHREALTIME/./}000
  BENCH_TAG=$TAG setsid "$TMP/venv/bin/python" "$TMP/venv/bin/supervisord" -c "$run/supervisord.conf" \
    >"$run/stdout" 2>&1 &
  PID=$!
  SPEC=$PID
  STOP=("kill:TERM:$PID")
}

launch_s6() {
  local mode=$1 n=$2 dir=$3 run=$4 i
  mkdir -p "$run/scan"
  for ((i = 0; i < n; i++)); do
    mkdir "$run/scan/w$i"
    write_worker "$mode" "w$i" "$dir" "$run/scan/w$i/run"
  done
  chmod +x "$run"/scan/*/run
  T_LAUNCH=${EPOCHREALTIME/./}000
  BENCH_TAG=$TAG setsid s6-svscan -c $((n + 64)) -t 0 "$run/scan" >"$run/stdout" 2>&1 &
  PID=$!
  SPEC="$PID,c:$PID" # s6-svscan and its s6-supervise children
  STOP=(cmd s6-svscanctl -t "$run/scan")
}

launch_floor() {
  local mode=$1 n=$2 dir=$3 run=$4
  write_worker "$mode" '$SLOT' "$dir" "$run/worker.sh"
  # One launcher shell (its own session, so one process group to stop) starts N loops and
  # waits; the loops are the "supervisor" measured.
  cat >"$run/launch.sh" <<SH
i=0
while [ \$i -lt $n ]; do
  SLOT=\$i /bin/sh -c 'while :; do /bin/sh "\$0"; done' "$run/worker.sh" &
  echo \$! >> "$run/loops"
  i=\$((i + 1))
done
wait
SH
  T_LAUNCH=${EPOCHREALTIME/./}000
  BENCH_TAG=$TAG setsid /bin/sh "$run/launch.sh" >"$run/stdout" 2>&1 &
  PID=$!
  SPEC="@$run/loops"
  STOP=("killpg:TERM:$PID")
}

# c-pg, c-cgroup: respawn-floor.c, one process that is the whole supervisor.
launch_c() { # ISOLATION MODE N DIR RUN
  local iso=$1 mode=$2 n=$3 dir=$4 run=$5
  write_worker "$mode" '$SLOT' "$dir" "$run/worker.sh"
  T_LAUNCH=${EPOCHREALTIME/./}000
  BENCH_TAG=$TAG setsid "$TMP/respawn-floor" "$iso" "$n" "$run/worker.sh" "$run/log" ${CG_FLOOR:+"$CG_FLOOR"} \
    >"$run/stdout" 2>&1 &
  PID=$!
  SPEC=$PID
  STOP=("kill:TERM:$PID")
}
launch_c-pg() { launch_c pg "$@"; }
launch_c-cgroup() { launch_c cgroup "$@"; }

# stop_run RUN DIR: stop the current supervisor, print the stop-all ms (or a failure text)
stop_run() {
  local run=$1 dir=$2 r
  h worker-pids "$dir" >"$run/worker-pids"
  r=$(h stopwait "$STOP_TIMEOUT" "$PID,$SPEC,@$run/worker-pids" "${STOP[@]}") || r="error"
  set -- $r
  if [ "${1:-}" = ok ]; then
    STOP_MS=$2
  else
    STOP_MS="did not stop in ${STOP_TIMEOUT} s (${3:-?} processes left)"
    kill -KILL "$PID" 2>/dev/null || true
  fi
  wait "$PID" 2>/dev/null || true
  ROOT=""
  kill_tagged # whatever a failed stop left, so that runs never overlap
}

ms_since_launch() { # NS -> ms with one decimal
  local d=$(($1 - T_LAUNCH))
  printf '%d.%d' $((d / 1000000)) $(((d / 100000) % 10))
}

run_idle() { # SUP N
  local sup=$1 n=$2 run=$TMP/$1-idle-$2 section="idle fleet of $2 workers"
  local dir=$run/stamps r
  mkdir -p "$dir"
  log "$sup: $n idle workers"
  "launch_$sup" idle "$n" "$dir" "$run"
  ROOT=$PID
  r=$(h wait-stamps "$dir" "$n" "$START_TIMEOUT") || r="error"
  set -- $r
  if [ "${1:-}" != ok ]; then
    res "$section" "start-all (ms)" "$sup" "did not reach $n in $START_TIMEOUT s (${2:-?} started)"
    stop_run "$run" "$dir"
    return 0
  fi
  res "$section" "start-all (ms)" "$sup" "$(ms_since_launch "$2")"
  sleep "$SETTLE_S"
  set -- $(h mem "$SPEC")
  res "$section" "RSS (VmRSS, KiB)" "$sup" "$1"
  res "$section" "PSS (KiB)" "$sup" "$3"
  res "$section" "threads" "$sup" "$2"
  res "$section" "processes measured" "$sup" "$4"
  set -- $(h idle-cpu "$SPEC" "$IDLE_S")
  res "$section" "CPU over $IDLE_S s idle (ms, utime+stime)" "$sup" "$1"
  res "$section" "CPU over $IDLE_S s idle (ms, schedstat)" "$sup" "$3"
  res "$section" "threads ended while measured" "$sup" "$4"
  stop_run "$run" "$dir"
  res "$section" "stop-all (ms)" "$sup" "$STOP_MS"
  if [ "${sup%-bg}" = afk ]; then
    set -- $(h afk-log "$AFK_LOG" start)
    note "$sup, $n idle: launch -> boot-sweep record ${1} ms; first -> last slot.spawn ${2} ms ($3 spawns);" \
      "stop request -> exit record $(h afk-log "$AFK_LOG" stop) ms (event log, ms stamps)"
  fi
}

run_respawn() { # SUP
  local sup=$1 n=$RESPAWN_SLOTS run=$TMP/$1-respawn section
  section="$RESPAWN_SLOTS workers living 0.2 s then exiting 1"
  local dir=$run/stamps r
  mkdir -p "$dir"
  log "$sup: $n dying workers, $RESPAWNS respawns"
  "launch_$sup" die "$n" "$dir" "$run"
  ROOT=$PID
  r=$(h respawn "$dir" "$n" "$RESPAWNS" "$RESPAWN_TIMEOUT" "$SPEC") || r="error"
  stop_run "$run" "$dir"
  res "$section" "stop-all (ms)" "$sup" "$STOP_MS"
  set -- $r
  if [ "${1:-}" = ok ]; then
    res "$section" "CPU per respawn (ms, utime+stime)" "$sup" "$2"
    res "$section" "CPU per respawn (ms, schedstat)" "$sup" "$5"
    res "$section" "respawns measured" "$sup" "$3"
    res "$section" "threads ended while measured" "$sup" "${6:-?}"
    res "$section" "respawns per second" "$sup" "$(awk -v n="$3" -v s="$4" 'BEGIN { printf "%.1f", n / s }')"
  else
    res "$section" "CPU per respawn (ms, utime+stime)" "$sup" \
      "did not reach $RESPAWNS respawns in $RESPAWN_TIMEOUT s (${3:-0} in ${4:-0} s)"
  fi
  set -- $(h delays "$dir")
  res "$section" "respawn delay p50 (ms)" "$sup" "$2"
  res "$section" "respawn delay p90 (ms)" "$sup" "$3"
  res "$section" "respawn delay max (ms)" "$sup" "$4"
  res "$section" "delay samples" "$sup" "$1"
  if [ "${sup%-bg}" = afk ]; then
    set -- $(h afk-log "$AFK_LOG" respawn)
    note "$sup respawn: slot.exit -> next slot.spawn record p50 ${2} ms, max ${3} ms over $1 respawns (ms stamps);" \
      "$(grep -c 'circuit\.' "$AFK_LOG" || true) circuit records; stderr $(wc -l <"$run/stderr") lines"
  fi
}

# ---- the run ----------------------------------------------------------------------------
afk_rev=$(git rev-parse --short HEAD 2>/dev/null || echo "?")
git diff --quiet HEAD -- src Cargo.toml Cargo.lock 2>/dev/null || afk_rev="$afk_rev+uncommitted"
load0=$(cut -d' ' -f1-3 /proc/loadavg)
for sup in $SUPERVISORS; do run_respawn "$sup"; done
for n in $SIZES; do
  for sup in $SUPERVISORS; do run_idle "$sup" "$n"; done
done
load1=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- the report -------------------------------------------------------------------------
echo
echo "## Supervisor comparison, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo
echo "machine: nproc=$(nproc), kernel $(uname -sr), $(awk '/^MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo);" \
  "load average $load0 at start, $load1 at end"
vers="afk-supervisor $afk_rev (release)"
want supervisord && vers="$vers; supervisord $("$TMP/venv/bin/supervisord" --version) (python $("$PY" -c 'import platform; print(platform.python_version())'))"
want s6 && vers="$vers; s6 $(dpkg-query -W -f='${Version}' s6 2>/dev/null || echo '?')"
echo "versions: $vers; workers are /bin/sh ($(readlink -f /bin/sh)) scripts"
echo "settings: SIZES=\"$SIZES\" IDLE_S=$IDLE_S RESPAWNS=$RESPAWNS RESPAWN_SLOTS=$RESPAWN_SLOTS; took $((SECONDS - BEGIN)) s"
h table "$RESULTS"
echo
echo "ratios are afk-supervisor's figure divided by the other's (lower is better for afk-supervisor,"
echo "except respawns per second);"
echo "'=' both 0, 'inf' the other is 0. afk-bg is afk-supervisor started as a background job"
echo "(not a process-group leader); every other column leads its own session (setsid)."
echo "RSS and threads are summed over the processes measured"
echo "(s6: s6-svscan + every s6-supervise; floor: every loop shell); PSS shares libraries fairly."
if [ -s "$NOTES" ]; then
  echo
  sed 's/^/note: /' "$NOTES"
fi
h goals "$RESULTS" "$IDLE_S" "$RESPAWN_SLOTS"
echo
echo "goals: CPU figures are schedstat (ns, per thread) unless a thread of afk-supervisor ended"
echo "while measured (then utime+stime, 10 ms ticks); the idle one is scaled to 30 s."
