#!/usr/bin/env bash
# Benchmark: what authentication costs a write.  Two clusters of 3 voters run
# side by side on this machine (fast profile, loopback): A is --insecure with
# no key (plaintext everywhere), B has a cluster key (Raft sealed, addressed,
# stamped) and takes the writes sealed with an operator key (envelope checks
# and the replay cache at the agent).  `skeinctl state bench N` runs against
# the head of each in turn, ROUNDS times, so both see the same machine load;
# the table gives each round's commit p50 and the ratio B/A.
#   AUTH_BENCH_WRITES=100 AUTH_BENCH_ROUNDS=10 tests/agent/auth_bench.sh
. "$(dirname "$0")/lib.sh"
WRITES=${AUTH_BENCH_WRITES:-100}
ROUNDS=${AUTH_BENCH_ROUNDS:-10}
K=$T_DIR/cluster.key; OP=$T_DIR/op.key
"$SKEINCTL" keygen >"$K"; "$SKEINCTL" keygen >"$OP"; chmod 600 "$K" "$OP"

for i in 1 2 3; do start_agent "$i" --profile fast --log-level warn --head-eligible --bootstrap-expect 3 \
	--join "127.0.0.1:$(gport 1)"; done
for i in 4 5 6; do INSECURE= start_agent "$i" --profile fast --log-level warn --head-eligible --bootstrap-expect 3 \
	--key-file "$K" --operator-key-file "$OP" --join "127.0.0.1:$(gport 4)"; done
a_ctl() { "$SKEINCTL" --rpc "127.0.0.1:$(rport "$1")" --timeout 5000 "${@:2}"; }
b_ctl() { SKEIN_OPERATOR_KEY_FILE="$OP" "$SKEINCTL" --rpc "127.0.0.1:$(rport "$1")" --timeout 5000 "${@:2}"; }
wait_until 20 bash -c "'$SKEINCTL' --rpc 127.0.0.1:$(rport 1) state put warm up >/dev/null 2>&1" || { echo "cluster A has no head"; exit 1; }
wait_until 20 bash -c "SKEIN_OPERATOR_KEY_FILE='$OP' '$SKEINCTL' --rpc 127.0.0.1:$(rport 4) state put warm up >/dev/null 2>&1" || { echo "cluster B has no head"; exit 1; }
head_i() { "$1" "$2" head 2>/dev/null | awk '$1 == "head:" { sub("n", "", $2); print $2 }'; }
HA=$(head_i a_ctl 1); HB=$(head_i b_ctl 4)
p50() { awk '{ print $6 }'; }

echo "## Authentication cost: state put commit p50, same run ($WRITES writes a row, at the head)"
echo
echo "| round | A: --insecure, no key (ms) | B: cluster key + operator key (ms) | B/A |"
echo "|---|---|---|---|"
ra=(); rb=()
for r in $(seq 1 "$ROUNDS"); do
	a=$(a_ctl "$HA" state bench "$WRITES" | p50)
	b=$(b_ctl "$HB" state bench "$WRITES" | p50)
	ra+=("$a"); rb+=("$b")
	echo "| $r | $a | $b | $(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", b / a }') |"
done
ma=$(printf '%s\n' "${ra[@]}" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
mb=$(printf '%s\n' "${rb[@]}" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
echo "| median | $ma | $mb | $(awk -v a="$ma" -v b="$mb" 'BEGIN { printf "%.2f", b / a }') (target <= 1.10) |"
T_FAIL=0
