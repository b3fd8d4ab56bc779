#!/usr/bin/env bash
# tests/transfer/exports.sh: libskein.so exports exactly the functions
# skein_xfer.h marks SKEIN_API (issue 26: built -fvisibility=hidden; 333
# before), at most 60 of them, and the Python package calls nothing else.
# The library: $SKEIN_LIB, else build/release/libskein.so.
set -u
cd "$(dirname "$0")/../.."
LIB=${SKEIN_LIB:-build/release/libskein.so}
pass=0; fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; fail=$((fail + 1)); }
if ! command -v nm >/dev/null || [ ! -e "$LIB" ]; then
	echo "skip: needs nm and $LIB (run make)"; echo "# 0 passed, 0 failed, 1 skipped"; exit 0
fi
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
nm -D --defined-only "$LIB" | awk '$2 == "T" { print $3 }' | sort -u >"$T/exported"
nm -D --defined-only "$LIB" | awk '{ print $3 }' | sort -u >"$T/all"
sed -n 's/^SKEIN_API [^(]*[ *]\([a-z_0-9]*\)(.*/\1/p' transfer/include/skein_xfer.h | sort -u >"$T/declared"
n=$(wc -l <"$T/all")
[ "$n" -le 60 ] && ok "libskein.so exports $n symbols (<= 60)" || bad "libskein.so exports $n symbols (> 60)"
extra=$(comm -23 "$T/all" "$T/declared" | tr '\n' ' ')
[ -z "$extra" ] && ok "nothing exported beyond skein_xfer.h" || bad "exported beyond skein_xfer.h: $extra"
missing=$(comm -13 "$T/exported" "$T/declared" | tr '\n' ' ')
[ -z "$missing" ] && ok "every SKEIN_API function is exported ($(wc -l <"$T/declared"))" ||
	bad "declared SKEIN_API but not exported: $missing"
# names the package uses as symbols: those it reads off the library object
pyfn=$(grep -ohE '\.(xfer_[a-z0-9_]+)\b' python/skein/*.py | tr -d . | sort -u)
pyextra=$(comm -23 <(printf '%s\n' $pyfn) "$T/declared" | tr '\n' ' ')
[ -z "$pyextra" ] && ok "the Python package calls only SKEIN_API functions" || bad "python calls internals: $pyextra"
echo "# $pass passed, $fail failed"
[ "$fail" = 0 ]
