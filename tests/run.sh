#!/usr/bin/env bash
# Runs every test program and script given on the command line and adds up
# their results.  A C test binary prints "# N passed, M failed"; a shell test
# prints the same line (tests/lib.sh does it).  A program that dies without its
# summary line counts as one failure.  The last line is "N passed, N failed".
set -u
total_pass=0
total_fail=0
for t in "$@"; do
	echo "== $t"
	out=$(mktemp)
	"$t" 2>&1 | tee "$out"
	rc=${PIPESTATUS[0]}
	line=$(grep -E '^# [0-9]+ passed, [0-9]+ failed' "$out" | tail -n 1)
	if [ -n "$line" ]; then
		p=$(echo "$line" | sed -E 's/^# ([0-9]+) passed.*/\1/')
		f=$(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')
		[ "$rc" != 0 ] && [ "$f" = 0 ] && f=1
	else
		p=0; f=1
		echo "FAIL $t: exited with status $rc and no summary line"
	fi
	total_pass=$((total_pass + p))
	total_fail=$((total_fail + f))
	rm -f "$out"
done
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" = 0 ]
