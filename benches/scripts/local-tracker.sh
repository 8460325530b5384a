#!/usr/bin/env bash
# Times the local tracker through the release binary: creating N issues one command at a
# time, one label edit, and listing them all (what a sweep's "list all" costs on `local`).
# Usage: benches/scripts/local-tracker.sh [N]   (default 1000)
set -euo pipefail
cd "$(dirname "$0")/../.."
n="${1:-1000}"
cargo build --release --quiet
bin="$PWD/target/release/afk-supervisor"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
git init -q "$dir"
t0=$(date +%s.%N)
for i in $(seq 1 "$n"); do
  "$bin" --repo "$dir" --tracker local issue new --title "issue $i" --label ready-for-agent >/dev/null 2>&1
done
t1=$(date +%s.%N)
"$bin" --repo "$dir" --tracker local issue label 1 --add running 2>/dev/null
t2=$(date +%s.%N)
count=$("$bin" --repo "$dir" --tracker local issue list --state all --json 2>/dev/null | grep -c '"number"')
t3=$(date +%s.%N)
echo "issues: $count"
ms() { awk -v a="$1" -v b="$2" -v d="${3:-1}" 'BEGIN { printf "%.1f ms", (b - a) * 1000 / d }'; }
echo "create (per command): $(ms "$t0" "$t1" "$n")"
echo "label edit (one command): $(ms "$t1" "$t2")"
echo "list all $n (one command): $(ms "$t2" "$t3")"
