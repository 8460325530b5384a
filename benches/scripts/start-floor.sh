#!/usr/bin/env bash
# How fast can 64 of compare.sh's idle workers start on this box at all? The floor under
# the "start of 64 workers" goal: the same worker script (`sh` that stamps `date +%s%N`,
# then `exec sleep`), started by a C loop of clone(CLONE_VM) calls that waits for
# nothing, RUNS times; prints the clone loop and the first clone -> last stamp, each run
# and the median.
#
#   bash benches/scripts/start-floor.sh
#   N=64 RUNS=12 bash benches/scripts/start-floor.sh
#
# Needs a C compiler (cc). Every worker is killed and reaped by the launcher itself.
set -euo pipefail
cd "$(dirname "$0")"
N=${N:-64}
RUNS=${RUNS:-12}
TMP=$(mktemp -d -t afk-start-floor.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
cc -O2 -o "$TMP/start-floor" start-floor.c
printf '%s\n' '#!/bin/sh' "echo \"\$(date +%s%N) \$\$\" > \"$TMP/st/\$RED_AFK_SLOT\"" \
  'exec sleep 100000' >"$TMP/worker.sh"
: >"$TMP/runs"
for ((r = 1; r <= RUNS; r++)); do
  rm -rf "$TMP/st" && mkdir "$TMP/st"
  set -- $("$TMP/start-floor" "$N" "$TMP/worker.sh" "$TMP/st")
  echo "run $r: clone loop $1 ms, first clone -> last stamp $2 ms"
  echo "$2" >>"$TMP/runs"
done
sort -n "$TMP/runs" | awk '{a[NR] = $1} END {printf "median first clone -> last stamp: %s ms (min %s, max %s, %d runs)\n", a[int((NR + 1) / 2)], a[1], a[NR], NR}'
