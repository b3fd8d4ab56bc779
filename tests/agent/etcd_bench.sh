#!/usr/bin/env bash
# Benchmark: skein's head failover beside a real etcd 3.4 cluster, same
# machine, same run (issue 12's targets).
#   failover: SIGKILL of the head (skein: 3 voters, fast profile) or the
#             leader (etcd: 3 members, --heartbeat-interval 50
#             --election-timeout 500) until a write sent to another member
#             commits: skeinctl state put / etcdctl put against a member that
#             was not the leader, retried, every attempt bounded by
#             ATTEMPT_MS for both; the killed member restarts from its data
#             dir and takes a write before the next kill.  Kills alternate
#             between the two systems, so both see the same machine load.
#   disk hog: the same again while DISK_HOGS loops of `dd if=/dev/zero bs=1M
#             count=32 oflag=dsync` write on the filesystem of the data dirs.
# Also each client's own time for one write on a healthy cluster (the
# resolution of the figures) and skein's commit latency with and without
# the hog.  Prints markdown (docs/benchmarks.md keeps the tables).
#   ETCD_BENCH_KILLS=20 ETCD_BENCH_ATTEMPT_MS=100 ETCD_BENCH_DISK_HOGS=2 tests/agent/etcd_bench.sh
. "$(dirname "$0")/lib.sh"

KILLS=${ETCD_BENCH_KILLS:-20}
ATTEMPT=${ETCD_BENCH_ATTEMPT_MS:-100}
HOGS=${ETCD_BENCH_DISK_HOGS:-2}
ETCD=$(command -v etcd || true)
ETCDCTL=$(command -v etcdctl || true)
if [ -z "$ETCD" ] || [ -z "$ETCDCTL" ]; then
	echo "etcd_bench: needs etcd and etcdctl (Debian etcd-server, etcd-client; tools/deps.sh install)"
	exit 0
fi
export ETCDCTL_API=3

declare -A EPID=()
HOGP=()
bench_cleanup() {
	hog_stop
	for p in "${EPID[@]}"; do kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
	cleanup
}
trap bench_cleanup EXIT

stats() { sort -n | awk '{ v[NR] = $1 } END { printf "%d %d %d", v[int((NR + 1) / 2)], v[NR], v[1] }'; }

# --- the disk hog: loops of synchronous 1 MiB writes beside the data dirs
hog_start() {
	for h in $(seq 1 "$HOGS"); do
		( trap 'kill $d 2>/dev/null; exit 0' TERM
		  while :; do dd if=/dev/zero of="$T_DIR/hog$h" bs=1M count=32 oflag=dsync 2>/dev/null & d=$!; wait $d; done ) &
		HOGP+=($!)
	done
}
hog_stop() {
	for p in "${HOGP[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
	HOGP=()
	rm -f "$T_DIR"/hog*
}

# --- etcd: members e1..e3, client port PORT_BASE+300+I, peer PORT_BASE+400+I
ecport() { echo $((PORT_BASE + 300 + $1)); }
epport() { echo $((PORT_BASE + 400 + $1)); }
etcd_start() { # I (a data dir that exists ignores the --initial flags)
	local i=$1 ic="" j
	for j in 1 2 3; do ic="$ic${ic:+,}e$j=http://127.0.0.1:$(epport $j)"; done
	"$ETCD" --name "e$i" --data-dir "$T_DIR/e$i" \
		--listen-client-urls "http://127.0.0.1:$(ecport "$i")" --advertise-client-urls "http://127.0.0.1:$(ecport "$i")" \
		--listen-peer-urls "http://127.0.0.1:$(epport "$i")" --initial-advertise-peer-urls "http://127.0.0.1:$(epport "$i")" \
		--initial-cluster "$ic" --initial-cluster-state new --initial-cluster-token skein-bench \
		--heartbeat-interval 50 --election-timeout 500 --logger zap --log-level warn >>"$T_DIR/e$i.log" 2>&1 &
	EPID[$i]=$!
}
etcd_put() { # I KEY
	"$ETCDCTL" --endpoints="127.0.0.1:$(ecport "$1")" --dial-timeout="${ATTEMPT}ms" --command-timeout="${ATTEMPT}ms" \
		put "$2" x >/dev/null 2>&1
}
etcd_leader() { # prints the leader's index, "" when none
	local eps="" j
	for j in "${!EPID[@]}"; do eps="$eps${eps:+,}127.0.0.1:$(ecport "$j")"; done
	"$ETCDCTL" --endpoints="$eps" --command-timeout=1s endpoint status -w fields 2>/dev/null |
		awk -F' : ' -v base=$((PORT_BASE + 300)) '/"MemberID"/ { m = $2 } /"Leader"/ { l = $2 }
			/"Endpoint"/ { if (m == l) { gsub(/[",]/, "", $2); split($2, a, ":"); print a[2] - base } }'
}

# --- skein: voters n1..n3, fast profile
skein_put() { # I KEY
	"$SKEINCTL" --rpc "127.0.0.1:$(rport "$1")" --timeout "$ATTEMPT" state put "$2" x >/dev/null 2>&1
}
skein_leader() { # prints the head's index, "" when none
	local h j
	for j in "${!PIDS[@]}"; do
		h=$(ctl "$j" head 2>/dev/null | awk '$1 == "head:" && $2 != "(none)" { print $2 }')
		[ -n "$h" ] && { echo "${h#n}"; return; }
	done
}
SV="--profile fast --head-eligible --bootstrap-expect 3 --log-level warn"

# one timed write, for the clients' own resolution
client_ms() { # FN I
	local t0 i s=()
	for i in $(seq 1 11); do t0=$(now_ms); "$1" "$2" "probe$i" || true; s+=($(( $(now_ms) - t0 ))); done
	printf '%s\n' "${s[@]}" | stats | awk '{ print $1 }'
}

# kill_until_write SYSTEM K: SIGKILL of its leader, then writes through
# another member until one commits; the ms in RES; restarts the victim (not
# in a subshell: the pids it restarts must stay known to the cleanup)
kill_until_write() {
	local sys=$1 l o t0 k=$2
	if [ "$sys" = etcd ]; then
		l=""; for _ in $(seq 1 100); do l=$(etcd_leader); [ -n "$l" ] && break; sleep 0.05; done
		[ -n "$l" ] || { echo "etcd: no leader (logs in $T_DIR)" >&2; T_FAIL=1; exit 1; }
		o=$(( l % 3 + 1 ))
		kill -9 "${EPID[$l]}"; t0=$(now_ms)
		until etcd_put "$o" "fail$k"; do [ $(( $(now_ms) - t0 )) -gt 20000 ] && break; done
		RES=$(( $(now_ms) - t0 ))
		wait "${EPID[$l]}" 2>/dev/null
		etcd_start "$l"
		wait_until 20 etcd_put "$l" "back$k"
	else
		l=""; for _ in $(seq 1 100); do l=$(skein_leader); [ -n "$l" ] && break; sleep 0.05; done
		[ -n "$l" ] || { echo "skein: no head (logs in $T_DIR)" >&2; T_FAIL=1; exit 1; }
		o=$(( l % 3 + 1 ))
		kill_agent "$l" 9; t0=$(now_ms)
		until skein_put "$o" "fail$k"; do [ $(( $(now_ms) - t0 )) -gt 20000 ] && break; done
		RES=$(( $(now_ms) - t0 ))
		start_agent "$l" $SV --join "127.0.0.1:$(gport "$o")"
		wait_until 20 skein_put "$l" "back$k"
		# a follower with fresh contact, as before the first kill
		wait_until 20 bash -c "'$SKEINCTL' --rpc 127.0.0.1:$(rport "$o") head | awk -v w=n$l '\$1 == w && \$2 == \"follower\" && \$3 >= 0 && \$3 < 100 { f = 1 } END { exit !f }'"
	fi
}

for i in 1 2 3; do etcd_start "$i"; done
for i in 1 2 3; do start_agent "$i" $SV --join "127.0.0.1:$(gport 1)"; done
wait_until 30 etcd_put 2 warm || { echo "etcd did not start (logs in $T_DIR)"; T_FAIL=1; exit 1; }
wait_until 30 skein_put 2 warm || { echo "skein did not start (logs in $T_DIR)"; T_FAIL=1; exit 1; }

declare -A ROW=()
for phase in idle "disk hog"; do
	[ "$phase" = "disk hog" ] && hog_start && sleep 2
	H=$(skein_leader)
	read -r _ _ sp50 _ sp99 _ < <(ctl "$H" state bench 200 | awk '{ print $3, $4, $6, $7, $8, $9 }')
	ec=$(client_ms etcd_put 2); sc=$(client_ms skein_put 2)
	et=(); st=()
	for k in $(seq 1 "$KILLS"); do
		kill_until_write etcd "$k"; et+=("$RES")
		kill_until_write skein "$k"; st+=("$RES")
	done
	[ "$phase" = "disk hog" ] && hog_stop
	read -r emed emax emin < <(printf '%s\n' "${et[@]}" | stats)
	read -r smed smax smin < <(printf '%s\n' "${st[@]}" | stats)
	echo "  ($phase) etcd: ${et[*]}" >&2
	echo "  ($phase) skein: ${st[*]}" >&2
	ROW[$phase]="$emed $emax $emin $smed $smax $smin $ec $sc $sp50 $sp99"
done

echo "## Head failover beside etcd 3.4 ($KILLS SIGKILLs each, loopback, $(date -u +%Y-%m-%d))"
echo
echo "| condition | etcd median / max / min (ms) | skein median / max / min (ms) | median ratio (target <= 0.6) | max ratio (target <= 1.2) | one write on a healthy cluster: etcdctl / skeinctl (ms) | skein commit p50 / p99 at the head (ms) |"
echo "|---|---|---|---|---|---|---|"
for phase in idle "disk hog"; do
	set -- ${ROW[$phase]}
	mr=$(awk -v a="$4" -v b="$1" 'BEGIN { printf "%.2f", a / b }')
	xr=$(awk -v a="$5" -v b="$2" 'BEGIN { printf "%.2f", a / b }')
	label=$phase; [ "$phase" = "disk hog" ] && label="disk hog ($HOGS x dd oflag=dsync)"
	echo "| $label | $1 / $2 / $3 | $4 / $5 / $6 | $mr | $xr | $7 / $8 | $9 / ${10} |"
done
echo
echo "(each: SIGKILL of the leader until a write sent to another member commits; every attempt bounded by $ATTEMPT ms; with the disk hog the target is skein <= etcd)"
