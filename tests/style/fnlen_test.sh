#!/usr/bin/env bash
# tests/style/fnlen_test.sh: no C function over 120 lines outside tests,
# codecs and generated code (tools/fnlen.sh, issue 26); the script is first
# run on made-up files, so that it is known to catch one and to count right.
set -u
cd "$(dirname "$0")/../.."
pass=0; fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
# a function of n lines, brace to brace
mk() { { echo "static int $1(int x)"; echo "{"; for _ in $(seq 1 $(($2 - 2))); do echo "	x++;"; done; echo "}"; } >>"$3"; }
mk short 120 "$T/a.c"; mk long 121 "$T/a.c"; echo "int proto(void);" >>"$T/a.c"
out=$(tools/fnlen.sh "$T/a.c")
[ "$out" = "121 $T/a.c:122 long" ] && ok "a 121-line function is caught, a 120-line one is not" ||
	bad "on a made-up file: got '$out'"
tools/fnlen.sh "$T/a.c" >/dev/null && bad "it exits 0 with an offender" || ok "it exits 1 with an offender"
out=$(tools/fnlen.sh 2>&1)
rc=$?
[ "$rc" = 0 ] && ok "no function over 120 lines in the tree${out:+ ($out)}" || bad "functions over 120 lines: $(echo "$out" | tr '\n' ';')"
echo "# $pass passed, $fail failed"
[ "$fail" = 0 ]
