#!/usr/bin/env bash
# tests/sim/cli.sh: the contract of bin/skein-sim (flags, exit codes, the
# JSON keys others script against, same seed same run).  Prints
# "# N passed, M failed" for tests/run.sh.
set -u
SIM=${SKEIN_SIM:-${SKEIN_BIN:-bin}/skein-sim}
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1: $2"; }

"$SIM" --help | grep -q -- '--partition' && ok help || bad help "no usage text"

for args in "--nodes" "--nodes abc" "--bogus 1" "--loss 1.5" "--profile nope" \
	"--partition 0.5:10" "--set nokey=1" "--pause 3" "--nodes 5 --kill 5" "--format xml"; do
	err=$("$SIM" $args 2>&1 >/dev/null); rc=$?
	if [ "$rc" = 2 ] && [ "$(printf '%s\n' "$err" | wc -l)" = 1 ] && [[ "$err" == skein-sim:* ]]; then
		ok "bad flag '$args' -> exit 2, one line"
	else
		bad "bad flag '$args'" "rc $rc, stderr: $err"
	fi
done

out=$("$SIM" --nodes 30 --seed 3 --profile fast --duration 20 --kill 2 --loss 0.05)
miss=""
for k in nodes seed profile sim_seconds converge_s detect_s p50 p99 max false_failures \
	bytes_per_node_s wall_s packets suspicions refutes digest; do
	grep -q "\"$k\":" <<<"$out" || miss="$miss $k"
done
[ -z "$miss" ] && ok "json keys" || bad "json keys" "missing$miss"
[ "$(grep -c . <<<"$out")" = 1 ] && ok "one json line" || bad "one json line" "$out"
grep -q '"count":2,"undetected":0' <<<"$out" && ok "two kills detected" || bad "two kills detected" "$out"

d1=$(grep -o '"digest":"[0-9a-f]*"' <<<"$out")
d2=$("$SIM" --nodes 30 --seed 3 --profile fast --duration 20 --kill 2 --loss 0.05 | grep -o '"digest":"[0-9a-f]*"')
d3=$("$SIM" --nodes 30 --seed 4 --profile fast --duration 20 --kill 2 --loss 0.05 | grep -o '"digest":"[0-9a-f]*"')
[ -n "$d1" ] && [ "$d1" = "$d2" ] && [ "$d1" != "$d3" ] && ok "same seed, same run" || bad "same seed" "$d1 $d2 $d3"

"$SIM" --profile fast --set probe_interval_ms=300 --config | grep -qx 'probe_interval_ms=300' &&
	ok "--set and --config" || bad "--set and --config" "not applied"

t=$("$SIM" --nodes 20 --duration 4 --kill 1 --text-every 1 --format text)
grep -q 'all nodes list' <<<"$t" && grep -q '^converge_s:' <<<"$t" && ok "text table" || bad "text table" "$t"

echo "# $pass passed, $fail failed"
[ "$fail" = 0 ]
