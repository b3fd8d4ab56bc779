#!/usr/bin/env bash
# agent/'s files call one another one way (agent.h's file map, issue #12
# item 3): from the link's symbols (nm on skeind's objects), a file's edges
# go to the files defining the functions it uses; the graph must have no
# circle, nothing may call agent_main.c, and agent_metrics.c (which reads
# the layers) is called only from agent_main.c and agent_ctl.c.  The check
# is first run on a made-up circle, so that it is known to catch one.
# libskein's files too (issue 26): no circle among transfer/'s files (the
# two files of p2p-ucx, which share xfer_ucx.h, count as one), no data
# path (paths/, gpu/) calls the update client (update/), and no file of
# core/, paths/, gpu/ or engine/ includes an update/ header or names the
# client's state type (only the API, core/xfer_path.c, calls its entry
# points, declared in core/xfer_int.h).
. "$(dirname "$0")/lib.sh"
command -v nm >/dev/null && command -v tsort >/dev/null || skip_all "needs nm and tsort (binutils, coreutils)"
OBJ=$(cd "$BIN/.." 2>/dev/null && pwd)/agent
[ -e "$OBJ/agent_main.o" ] || OBJ=$ROOT/build/release/agent
[ -e "$OBJ/agent_main.o" ] || skip_all "no agent objects in $OBJ (run make first)"

# edges "FROM TO" (file names without .o) of the objects given
edges() {
	local o def use
	def=$T_DIR/def; use=$T_DIR/use
	for o in "$@"; do nm --defined-only "$o" | awk -v f="$(basename "$o" .o)" '$2 ~ /^[TDRB]$/ { print $3, f }'; done | sort >"$def"
	for o in "$@"; do nm -u "$o" | awk -v f="$(basename "$o" .o)" '{ print $2, f }'; done | sort >"$use"
	join "$use" "$def" | awk '$2 != $3 { print $2, $3 }' | sort -u
}
has_circle() { ! tsort >/dev/null 2>&1 <<<"$1"; }
no_circle() { tsort >/dev/null 2>&1 <<<"$1"; }

check "the check sees a made-up circle" has_circle "$(printf 'a b\nb c\nc a\n')"
check "and none in a line" no_circle "$(printf 'a b\nb c\n')"

E=$(edges "$OBJ"/*.o)
[ -n "$E" ] || fail "no edges read from $OBJ"
circle=$(tsort 2>&1 >/dev/null <<<"$E")
check "no circle among agent/'s files${circle:+ ($circle)}" test -z "$circle"
up=$(awk '$2 == "agent_main"' <<<"$E" | tr '\n' ';')
check "nothing calls agent_main.c${up:+ ($up)}" test -z "$up"
met=$(awk '$2 == "agent_metrics" && $1 != "agent_main" && $1 != "agent_ctl"' <<<"$E" | tr '\n' ';')
check "only main and ctl call agent_metrics.c${met:+ ($met)}" test -z "$met"

X=$(dirname "$OBJ")/transfer
if [ -d "$X/core" ]; then
	XE=$(edges $(ls "$X"/core/*.o "$X"/paths/*.o "$X"/gpu/*.o "$X"/gpu/gen/*.o "$X"/update/*.o "$X"/engine/*.o 2>/dev/null) |
		sed 's/xfer_ucx_data/xfer_ucx/g' | awk '$1 != $2')
	[ -n "$XE" ] || fail "no edges read from $X"
	xcircle=$(tsort 2>&1 >/dev/null <<<"$XE")
	check "no circle among transfer/'s files${xcircle:+ ($xcircle)}" test -z "$xcircle"
	upd=$(for f in "$X"/update/*.o; do basename "$f" .o; done | tr '\n' ' ')
	low=$(for f in "$X"/paths/*.o "$X"/gpu/*.o "$X"/gpu/gen/*.o; do basename "$f" .o; done | tr '\n' ' ')
	up=$(awk -v u=" $upd" -v l=" $low" 'index(u, " " $2 " ") && index(l, " " $1 " ")' <<<"$XE" | tr '\n' ';')
	check "no data path calls transfer/update/${up:+ ($up)}" test -z "$up"
else
	fail "no transfer objects in $X (run make)"
fi
# an update/ header named by a lower layer's file (#include "transfer/update/..."
# or a relative one); the check is first run on a made-up file
upd_includes() { grep -lE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"(transfer/)?update/|^[[:space:]]*#[[:space:]]*include[[:space:]]*"\.\./update/' "$@" 2>/dev/null; }
printf '#include "transfer/update/update.h"\n' >"$T_DIR/fake.c"
has_upd_include() { upd_includes "$@" >/dev/null; }
check "the include check sees a made-up one" has_upd_include "$T_DIR/fake.c"
inc=$(upd_includes "$ROOT"/transfer/core/*.[ch] "$ROOT"/transfer/paths/*.[ch] "$ROOT"/transfer/gpu/*.[ch] \
	"$ROOT"/transfer/engine/*.[ch] | sed "s#^$ROOT/##" | tr '\n' ' ')
check "core/, paths/, gpu/, engine/ include no update/ header${inc:+ ($inc)}" test -z "$inc"
# nor name the update client's state type (struct xfer_upd_client, was
# xfer_coord; the endpoint holds it as void *upd)
typ=$(grep -lwE 'xfer_coord|xfer_upd_client' "$ROOT"/transfer/core/*.[ch] "$ROOT"/transfer/paths/*.[ch] "$ROOT"/transfer/gpu/*.[ch] \
	"$ROOT"/transfer/engine/*.[ch] 2>/dev/null | sed "s#^$ROOT/##" | tr '\n' ' ')
check "core/, paths/, gpu/, engine/ do not name the client's state type${typ:+ ($typ)}" test -z "$typ"

finish
