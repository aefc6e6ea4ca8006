#!/usr/bin/env bash
# usage: perf/soak.sh [--minutes M] [--workers N] [--kill-every S]
#                     [--sample-every S] [--out DIR] [--kanel PATH]
#
# A soak, not a test: a job of N synthetic workers (default 16) on two
# servers under `kanel launch --restart-workers` for M minutes (default
# 60), one worker killed with SIGKILL every S seconds (default 60, a
# random one; launch starts it again and it rejoins), and the resident
# memory (VmRSS) and open descriptors of the coordinator, each server and
# launch itself sampled every few seconds (default 10) into
# DIR/samples.csv.  At the end it prints, per process, the median of the
# first and of the last tenth of the samples and their difference, and
# exits 1 if any long-lived process grew by more than 10% and 4 MiB in
# RSS, or by any descriptor.
#
# The workers each push two 1 MiB tensors a step with 20 ms of "compute"
# (--pause-ms), so the job keeps both cores busy without starving the
# sampler.  DIR (default soak-out) also keeps launch's log.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
minutes=60
workers=16
kill_every=60
sample_every=10
out=soak-out
kanel=

usage() { sed -n '2,3s/^# //p' "${BASH_SOURCE[0]}"; }
while (($#)); do
	case $1 in
	--minutes) minutes=$2; shift 2 ;;
	--workers) workers=$2; shift 2 ;;
	--kill-every) kill_every=$2; shift 2 ;;
	--sample-every) sample_every=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	--kanel) kanel=$2; shift 2 ;;
	-h | --help) usage; exit 0 ;;
	*) usage >&2; exit 2 ;;
	esac
done
for v in "$minutes" "$workers" "$kill_every" "$sample_every"; do
	[[ $v =~ ^[1-9][0-9]*$ ]] || { echo "soak.sh: '$v': a positive whole number" >&2; exit 2; }
done
if [ -z "$kanel" ]; then
	for b in build-release build-test build; do
		[ -x "$here/$b/tools/kanel" ] && { kanel=$here/$b/tools/kanel; break; }
	done
fi
[ -x "${kanel:-}" ] || { echo "soak.sh: no kanel binary (build first, or --kanel PATH)" >&2; exit 2; }
mkdir -p "$out"
csv=$out/samples.csv
log=$out/launch.log

# Steps enough for the whole soak: 20 ms of pause plus the exchange.
steps=$((minutes * 60 * 50 + 1000))
"$kanel" launch --workers "$workers" --servers 2 --restart-workers -- \
	"$kanel" worker --steps "$steps" --tensors 2 --tensor-bytes 1048576 \
	--pause-ms 20 >"$log" 2>&1 &
launch=$!
trap 'kill -TERM $launch 2>/dev/null || true' EXIT INT TERM

# The launch's children: "ROLE PID" lines, workers last.
children() {
	local p role
	for p in $(pgrep -P "$launch" || true); do
		role=$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | awk '{print $2}')
		case $role in
		coordinator) echo "coordinator $p" ;;
		server) echo "server $p" ;;
		worker) echo "worker $p" ;;
		esac
	done
}
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
fds() { ls "/proc/$1/fd" 2>/dev/null | wc -l; }

echo "t_s,process,pid,rss_kib,fds" >"$csv"
t0=$SECONDS
next_kill=$kill_every
kills=0
echo "soak.sh: $workers workers, $minutes min, a worker killed every ${kill_every} s; samples in $csv"
while ((SECONDS - t0 < minutes * 60)); do
	kill -0 "$launch" 2>/dev/null || { echo "soak.sh: launch ended early (see $log)" >&2; exit 1; }
	t=$((SECONDS - t0))
	# servers by rank order of their pids (the restart of one would
	# get a new pid; none is restarted here)
	s=0
	while read -r role pid; do
		case $role in
		coordinator) name=coordinator ;;
		server) name=server$s; s=$((s + 1)) ;;
		*) continue ;;
		esac
		echo "$t,$name,$pid,$(rss_kb "$pid"),$(fds "$pid")" >>"$csv"
	done < <(children | sort -k1,1 -k2n)
	echo "$t,launch,$launch,$(rss_kb "$launch"),$(fds "$launch")" >>"$csv"
	wsum=0
	for pid in $(children | awk '$1 == "worker" {print $2}'); do
		wsum=$((wsum + $(rss_kb "$pid")))
	done
	echo "$t,workers(sum),0,$wsum,0" >>"$csv"
	if ((t >= next_kill)); then
		mapfile -t ws < <(children | awk '$1 == "worker" {print $2}')
		if ((${#ws[@]})); then
			victim=${ws[RANDOM % ${#ws[@]}]}
			kill -KILL "$victim" 2>/dev/null && kills=$((kills + 1))
		fi
		next_kill=$((next_kill + kill_every))
	fi
	printf '\rsoak.sh: %4d s of %d, %d workers killed' "$t" $((minutes * 60)) "$kills"
	sleep "$sample_every"
done
echo
kill -TERM "$launch" 2>/dev/null || true
wait "$launch" 2>/dev/null || true
trap - EXIT INT TERM
restarts=$(grep -c 'restarting it, with its rank' "$log" || true)
echo "soak.sh: $kills workers killed, $restarts restarted by launch"

# Medians of the first and last tenth of each process's samples.
py=/usr/bin/python3; [ -x "$py" ] || py=python3
"$py" - "$csv" <<'EOF'
import csv, statistics, sys

rows = list(csv.DictReader(open(sys.argv[1])))
procs = sorted({r["process"] for r in rows}, key=lambda p: (p.startswith("workers"), p))
grew = False
print(f"{'process':<14} {'rss first':>10} {'rss last':>10} {'growth':>9} {'fds first':>9} {'fds last':>9}")
for p in procs:
    s = [r for r in rows if r["process"] == p]
    k = max(1, len(s) // 10)
    rf = statistics.median(int(r["rss_kib"]) for r in s[:k])
    rl = statistics.median(int(r["rss_kib"]) for r in s[-k:])
    ff = statistics.median(int(r["fds"]) for r in s[:k])
    fl = statistics.median(int(r["fds"]) for r in s[-k:])
    print(f"{p:<14} {rf:>7.0f} KiB {rl:>7.0f} KiB {rl - rf:>+6.0f} KiB {ff:>9.0f} {fl:>9.0f}")
    if not p.startswith("workers") and ((rl - rf > 4096 and rl > 1.1 * rf) or fl > ff):
        grew = True
print("growth: " + ("yes (see above)" if grew else "none"))
sys.exit(1 if grew else 0)
EOF
