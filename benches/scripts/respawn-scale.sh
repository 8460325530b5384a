#!/usr/bin/env bash
# Does a respawn cost more in a bigger fleet? afk-supervisor's CPU per respawn with
# DYING (16) workers that live 0.2 s and exit 1, alone and then inside fleets of FLEETS
# workers, the others idle (`exec sleep`), in both isolation modes.
#
#   bash benches/scripts/respawn-scale.sh
#   FLEETS="16 256 1000" RUNS=3 MEASURE_S=8 MODES="process-group auto" bash benches/scripts/respawn-scale.sh
#
# CPU is the sum of the supervisor threads' /proc/PID/task/TID/schedstat over MEASURE_S
# seconds, divided by the respawns the event log recorded in that time (`slot.spawn`).
# Each size runs RUNS times, the sizes interleaved (so a noisy neighbour hurts them alike);
# the median is printed, with every run. AFK_BIN skips the build. Every wait has a
# deadline, and every process started is stopped at the end (SIGTERM, then SIGKILL).
set -euo pipefail
cd "$(dirname "$0")/../.."
FLEETS=${FLEETS:-"16 1000"}
RUNS=${RUNS:-3}
MEASURE_S=${MEASURE_S:-8}
MODES=${MODES:-"process-group auto"}
DYING=${DYING:-16}
START_TIMEOUT=${START_TIMEOUT:-120}

if [ -z "${AFK_BIN:-}" ]; then
  AFK_BIN=$(cargo build --release --quiet --message-format=json-render-diagnostics |
    python3 "$PWD/benches/scripts/compare.py" exe afk-supervisor)
fi
TMP=$(mktemp -d -t afk-respawn-scale.XXXXXX)
SUP=""
cleanup() {
  set +e
  if [ -n "$SUP" ]; then
    kill -TERM "$SUP" 2>/dev/null
    for _ in $(seq 1 100); do kill -0 "$SUP" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$SUP" 2>/dev/null
  fi
  rm -rf "$TMP"
}
trap cleanup EXIT
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

cpu_ns() { cat "/proc/$1"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {print s + 0}'; }
spawns() { # the slot.spawn records of log $1 so far (0 before the log exists)
  local c
  c=$(grep -c 'slot\.spawn' "$1" 2>/dev/null) || true
  echo "${c:-0}"
}

# one MODE N: prints the CPU per respawn (ms)
one() {
  local mode=$1 n=$2 run log a b n1 n2
  run=$(mktemp -d "$TMP/run.XXXX")
  git init -q "$run/repo"
  mkdir -p "$run/repo/.red"
  printf '%s\n' '#!/bin/sh' \
    "if [ \"\$RED_AFK_SLOT\" -lt $DYING ]; then sleep 0.2; exit 1; fi" \
    'exec sleep 100000' >"$run/worker.sh"
  printf '%s\n' '[worker]' "command = [\"/bin/sh\", \"$run/worker.sh\"]" \
    '[tracker]' 'kind = "local"' '[timing]' 'fast_death_s = 0' \
    '[isolation]' "mode = \"$mode\"" >"$run/repo/.red/afk-supervisor.toml"
  setsid "$AFK_BIN" --repo "$run/repo" --workers "$n" >"$run/stderr" 2>&1 &
  SUP=$!
  log=$run/repo/.red/tmp/supervisors/default/supervisor.log.toonl
  # Started: every slot spawned once (n spawns beyond the respawns of the dying ones).
  local deadline=$((SECONDS + START_TIMEOUT))
  until [ "$(spawns "$log")" -ge $((n + DYING)) ]; do
    [ $SECONDS -lt $deadline ] || { echo "fleet of $n did not start in $START_TIMEOUT s" >&2; exit 1; }
    sleep 0.2
  done
  sleep 1
  a=$(cpu_ns "$SUP"); n1=$(spawns "$log")
  sleep "$MEASURE_S"
  b=$(cpu_ns "$SUP"); n2=$(spawns "$log")
  kill -TERM "$SUP"
  deadline=$((SECONDS + 60))
  while kill -0 "$SUP" 2>/dev/null; do
    [ $SECONDS -lt $deadline ] || { kill -KILL "$SUP"; break; }
    sleep 0.1
  done
  wait "$SUP" 2>/dev/null || true
  SUP=""
  rm -rf "$run"
  awk -v a="$a" -v b="$b" -v n=$((n2 - n1)) 'BEGIN { printf "%.3f", (b - a) / n / 1e6 }'
}

echo "## CPU per respawn by fleet size, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "machine: nproc=$(nproc), kernel $(uname -r); $DYING dying workers (0.2 s), the rest idle;" \
  "$RUNS runs of ${MEASURE_S} s each, median (all runs)"
for mode in $MODES; do
  declare -A got=()
  for _ in $(seq 1 "$RUNS"); do
    for n in $FLEETS; do got[$n]="${got[$n]:-} $(one "$mode" "$n")"; done
  done
  for n in $FLEETS; do
    # shellcheck disable=SC2086
    median=$(printf '%s\n' ${got[$n]} | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}')
    echo "isolation $mode, fleet of $n: $median ms per respawn (${got[$n]# })"
  done
  unset got
done
