#!/usr/bin/env bash
# tests/fuzz/fuzz_test.sh: the short fuzz runs of `make test`.
#
# For every target tests/fuzz/fuzz_X.c (built into build/fuzz/fuzz_X by
# tests/fuzz/module.mk): first each committed crash input of
# tests/fuzz/regress/fuzz_X/ once, then the seed corpus
# tests/fuzz/corpus/fuzz_X/ and FUZZ_TEST_SECONDS (3) of fuzzing from a fixed
# seed (FUZZ_TEST_SEED), at most FUZZ_TEST_RUNS inputs.  New inputs go to a
# scratch folder, never into the committed corpus.  A crash, a leak, a hang
# (10 s for one input) or a missing target fails it; the input is kept in
# build/fuzz/artifacts/.  Prints "# N passed, M failed".
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
FZ=build/fuzz
SECS=${FUZZ_TEST_SECONDS:-3}
RUNS=${FUZZ_TEST_RUNS:-500000}
SEED=${FUZZ_TEST_SEED:-20261129}
CC_=${FUZZ_CC:-clang}
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok   $*"; }
bad() { fail=$((fail + 1)); echo "FAIL $*"; }

if ! command -v "$CC_" >/dev/null 2>&1; then
	bad "fuzz: $CC_ is not installed (tools/deps.sh installs clang and libclang-rt-14-dev); no target was run"
	echo "# $pass passed, $fail failed"
	exit 1
fi
mkdir -p "$FZ/artifacts"
for src in tests/fuzz/fuzz_*.c; do
	t=$(basename "$src" .c)
	bin=$FZ/$t
	if [ ! -x "$bin" ]; then
		bad "$t: $bin was not built (make fuzz-build)"
		continue
	fi
	out=$(mktemp)
	reg=(tests/fuzz/regress/$t/*)
	if [ -e "${reg[0]}" ]; then
		if "$bin" -timeout=10 "${reg[@]}" >"$out" 2>&1; then
			ok "$t: ${#reg[@]} regression inputs"
		else
			bad "$t: a regression input fails again:"
			grep -E "Running:|ERROR|SUMMARY|runtime error" "$out" | head -n 8 | sed 's/^/  /'
		fi
	fi
	work=$FZ/work/$t
	rm -rf "$work"
	mkdir -p "$work"
	if "$bin" -seed="$SEED" -max_total_time="$SECS" -runs="$RUNS" -max_len=4096 -timeout=10 \
		-rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$FZ/artifacts/$t-" \
		"$work" "tests/fuzz/corpus/$t" >"$out" 2>&1; then
		runs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+)/\1/p' "$out")
		rate=$(sed -nE 's/^stat::average_exec_per_sec: *([0-9]+)/\1/p' "$out")
		ok "$t: ${runs:-?} inputs, ${rate:-?}/s, corpus $(ls "tests/fuzz/corpus/$t" 2>/dev/null | wc -l) seeds"
	else
		bad "$t (FUZZ_TEST_SEED=$SEED):"
		grep -E "ERROR|SUMMARY|runtime error|Test unit written|#0 |#1 |#2 |#3 " "$out" | head -n 12 | sed 's/^/  /'
	fi
	rm -f "$out"
done
echo "# $pass passed, $fail failed"
[ "$fail" = 0 ]
