# tests/agent/wv_lib.sh: what the update tests ask of a cluster, on top of
# lib.sh (source it after lib.sh).  Every question goes through wv_ctl, which
# a test may redefine (the netns test asks a host's agent with hctl).
#
#   tj JOB                 transfers of JOB as JSON (the newest 200)
#   q JOB QUESTION...      a question of tests/agent/wv_json.py about them
#   latest JOB             the newest committed version (0: none)
#   past JOB V             true once JOB's newest committed version is >= V
#   state_is JOB V STATE   true when version V's record is in STATE
#   at_latest JOB N        every engine of JOB (at least N) runs at the latest
#                          committed version in placement
#   member_field M F       placement's F (node, pid, state) of member M
#   open_with JOB ENGINE   prints the open version in which ENGINE is pending
#   has TEXT PATTERN       grep -q PATTERN on TEXT

PY=/usr/bin/python3
WVJ="$PY $ROOT/tests/agent/wv_json.py"
# a member's hand-made `wv` requests (tests/tools/skein_forge.c)
CRAFT="${SKEIN_TOOLS:-$ROOT/build/release/tests/tools}/skein_forge wv"

wv_ctl() { ctl 4 "$@"; }
tj() { wv_ctl transfers "$1" --last 200 --format json 2>/dev/null; }
q() { local j=$1; shift; tj "$j" | $WVJ "$@"; }
latest() { q "$1" latest; }
past() { local l; l=$(latest "$1"); [ -n "$l" ] && [ "$l" -ge "$2" ]; }
state_is() { [ "$(q "$1" get "$2" state)" = "$3" ]; }
at_latest() {
	# the latest asked before and after placement: a version that commits
	# in between makes this round false, not a wrong answer
	local l p l2
	l=$(latest "$1") && p=$(wv_ctl placement --format json 2>/dev/null) && l2=$(latest "$1") || return 1
	[ "$l" = "$l2" ] && [ "$l" -gt 0 ] && printf '%s' "$p" | $WVJ at "$1" "$l" "$2" >/dev/null
}
member_field() {
	wv_ctl placement --format json 2>/dev/null | tr '{' '\n' | grep "\"member\":\"$1\"" |
		sed -E "s/.*\"$2\":\"?([^\",]*).*/\\1/"
}
open_with() {
	local v; v=$(q "$1" open) && return 1
	v=${v%% *}; [ -n "$v" ] && [ "$(q "$1" engine "$v" "$2")" = pending ] && echo "$v"
}
has() { printf '%s' "$1" | grep -q -- "$2"; }
