#!/usr/bin/env bash
# tools/fnlen.sh: lists the C functions longer than a limit (default 120
# lines, the opening brace to the closing one), outside tests, codecs and
# generated code.  The tree's style makes this a plain scan: a function's
# body opens with "{" alone at column 0 and closes with "}" at column 0, and
# its name is the last "name(" before the brace.  Prints "LINES FILE:LINE
# NAME" per offender, longest first; exits 1 when there is one.
#   tools/fnlen.sh [-n LIMIT] [-a] [FILE...]   (-a: every function, no limit)
set -u
cd "$(dirname "$0")/.." || exit 2
limit=120
all=0
while [ $# -gt 0 ]; do
	case $1 in
	-n) limit=$2; shift 2 ;;
	-a) all=1; shift ;;
	*) break ;;
	esac
done
if [ $# -eq 0 ]; then
	# every tracked C file but tests, generated code and the codecs (their
	# length is one case per field of a message: splitting them hides it)
	mapfile -t files < <(git ls-files '*.c' | grep -vE '^tests/|/gen/|_codec\.c$|^examples/')
else
	files=("$@")
fi
awk -v limit="$limit" -v all="$all" '
FNR == 1 { name = ""; start = 0 }
/^[A-Za-z_].*[A-Za-z_0-9]+\(/ && !/;[ \t]*$/ {
	s = $0; sub(/\(.*/, "", s); n = split(s, w, /[ \t*]+/); name = w[n]; sig = FNR
}
/^\{/ { start = FNR }
/^\}/ && start {
	len = FNR - start + 1
	if (all || len > limit) printf "%d %s:%d %s\n", len, FILENAME, sig, name
	start = 0
}' "${files[@]}" | sort -rn | { out=$(cat); [ -n "$out" ] && echo "$out"; [ -z "$out" ] || [ "$all" = 1 ]; }
