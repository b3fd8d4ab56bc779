#!/usr/bin/env bash
# tests/transfer/sims.sh: the stand-in trainer and engine end to end, as
# separate processes: disk-delta (late engine, chain and full), p2p-tcp
# (engine verifies every version bit for bit), and a trainer that dies in the
# middle of a version (the engine must fail with a clear error, not hang).
# Prints "# N passed, M failed".  BIN=build/asan/bin runs the ASan build.
set -u
BIN=${BIN:-${SKEIN_BIN:-bin}}
T=$(mktemp -d "${TMPDIR:-/tmp}/skein-sims-XXXXXX")
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$T"; }
trap cleanup EXIT
pass=0; fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1"; sed 's/^/  | /' "$T/log" 2>/dev/null | tail -n 20; fail=$((fail + 1)); }
M="--bytes 24M --tensors 70 --seed 7"

# Waits up to 10 s for the engine to write its port.
wait_port() {
	for _ in $(seq 1 200); do [ -s "$1" ] && return 0; sleep 0.05; done
	return 1
}

# 1. disk-delta: trainer publishes 5 versions (full every 3); an engine that
#    starts afterwards catches up from the newest full version.
if "$BIN/skein-trainer-sim" --path disk-delta $M --steps 5 --dir "$T/d1" --full-every 3 \
	--changed 0.02 --encoding xor --zstd 1 >"$T/log" 2>&1 &&
   timeout 60 "$BIN/skein-engine-sim" --path disk-delta $M --steps 5 --dir "$T/d1" \
	--changed 0.02 --encoding xor --zstd 1 --receiver-id late --wait-ms 0 >>"$T/log" 2>&1 &&
   grep -q "v5 verified bit for bit" "$T/log"; then ok "disk-delta late engine"; else bad "disk-delta late engine"; fi

# 2. disk-delta: engine running beside the trainer, version by version.
timeout 60 "$BIN/skein-engine-sim" --path disk-delta $M --steps 4 --dir "$T/d2" --receiver-id e0 \
	--wait-ms 20000 >"$T/log.e" 2>&1 &
pe=$!; pids+=("$pe")
mkdir -p "$T/d2"
if "$BIN/skein-trainer-sim" --path disk-delta $M --steps 4 --dir "$T/d2" >"$T/log" 2>&1 &&
   wait "$pe" && cat "$T/log.e" >>"$T/log" && grep -q "v4 verified" "$T/log"; then
	ok "disk-delta engine beside trainer"; else cat "$T/log.e" >>"$T/log"; bad "disk-delta engine beside trainer"; fi

# 3. p2p-tcp: every version verified bit for bit.
timeout 60 "$BIN/skein-engine-sim" --path p2p $M --steps 4 --port 0 --port-file "$T/port3" --streams 3 \
	--bucket 4M >"$T/log.e" 2>&1 &
pe=$!; pids+=("$pe")
if wait_port "$T/port3" &&
   timeout 60 "$BIN/skein-trainer-sim" --path p2p-tcp $M --steps 4 --port "$(cat "$T/port3")" --streams 3 \
	--bucket 4M >"$T/log" 2>&1 &&
   wait "$pe" && cat "$T/log.e" >>"$T/log" && [ "$(grep -c 'verified bit for bit' "$T/log")" = 4 ]; then
	ok "p2p-tcp engine verifies every version"; else cat "$T/log.e" >>"$T/log"; bad "p2p-tcp engine verifies every version"; fi

# 4. p2p-tcp: the trainer dies inside version 2; the engine reports it.
timeout 60 "$BIN/skein-engine-sim" --path p2p-tcp $M --steps 3 --port 0 --port-file "$T/port4" \
	--bucket 2M --timeout-ms 2000 >"$T/log.e" 2>&1 &
pe=$!; pids+=("$pe")
if wait_port "$T/port4"; then
	timeout 60 "$BIN/skein-trainer-sim" --path p2p-tcp $M --steps 3 --port "$(cat "$T/port4")" \
		--bucket 2M --crash-after 2 >"$T/log" 2>&1
	trc=$?
	wait "$pe"; erc=$?
	cat "$T/log.e" >>"$T/log"
	if [ "$trc" = 3 ] && [ "$erc" = 1 ] && grep -q "v1 verified" "$T/log" &&
	   grep -q "engine: error: .*sender" "$T/log"; then ok "p2p-tcp trainer dies: engine errs"; else bad "p2p-tcp trainer dies: engine errs"; fi
else bad "p2p-tcp trainer dies: engine errs"; fi

echo "# $pass passed, $fail failed"
[ "$fail" = 0 ]
