#!/usr/bin/env bash
# tests/agent/formats_test.sh: what main's programs wrote still loads (issue
# 26 item 6: the renames keep Raft's entries, the proto fields and the disk
# formats).  tests/fixtures/formats_main.tar.gz was written by main's
# binaries before the issue-26 renames (tests/fixtures/make_formats.sh): a
# head's data dir, agent n1, whose Raft log holds a key-value pair and a
# stopped job, and a disk-delta folder of a full version and two deltas.
# This build's skeind restarts on that data dir and serves both; this
# build's engine stand-in catches up from the folder, bit for bit.
. "$(dirname "$0")/lib.sh"
FX=$ROOT/tests/fixtures/formats_main.tar.gz
[ -e "$FX" ] || skip_all "no fixture $FX"
tar -C "$T_DIR" -xzf "$FX" || fail "the fixture unpacks"

start_agent 1 --profile fast --head-eligible --bootstrap-expect 1 --gpus 1
check "skeind starts on main's data dir and is the head again" wait_until 15 bash -c \
	"'$SKEINCTL' --rpc 127.0.0.1:$(rport 1) --timeout 1000 head 2>/dev/null | grep -q n1"
check "its key-value pair, from main's Raft log" bash -c \
	"[ \"\$('$SKEINCTL' --rpc 127.0.0.1:$(rport 1) --timeout 2000 state get fixture-key)\" = fixture-value ]"
check "its job, from main's Raft log" bash -c \
	"'$SKEINCTL' --rpc 127.0.0.1:$(rport 1) --timeout 2000 job list 2>/dev/null | grep -q '^fx\b'"
check "a write on top of it commits" quiet ctl 1 state put after-upgrade yes
kill_agent 1 TERM

out=$(timeout 60 "$BIN/skein-engine-sim" --path disk-delta --dir "$T_DIR/disk" --bytes 64K --tensors 4 --seed 7 \
	--steps 3 --full-every 3 --changed 0.1 --receiver-id formats --wait-ms 0 2>&1)
check "main's disk-delta folder (full + 2 deltas) loads, v3 bit for bit${out:+: $(tail -1 <<<"$out")}" \
	grep -q "v3 verified bit for bit" <<<"$out"
finish
