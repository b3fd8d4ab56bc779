#!/usr/bin/env bash
# The control plane's hardening of issue 23 item 4, each attack as an
# attacker would try it, on real agents on 127.0.0.1:
#   - a sealed request captured on the wire and sent again after the agent
#     restarted: refused (a stamp before the restart, and one from a clock
#     5 s ahead, which the data dir's saved bound refuses);
#   - a key file readable by others: one warning line at start;
#   - a pathological pattern on `members --status/--tag`: answered at once
#     (globs, never regcomp), a malformed one refused in one line;
#   - 40 idle connections to --metrics: a scrape still gets its page;
#   - a stranger agent joining a keyless agent (no --insecure): nobody
#     joins, no gossip goes back, `join` on it is refused;
#   - without a cgroup (SKEIN_NO_CGROUP=1): `job stop` ends a member's
#     setsid children (one that cleared its environment, one re-parented to
#     the agent), and a restart after the agent's SIGKILL ends a setsid child
#     that cleared its environment (SKEIN_SUP_MARK gone).
. "$(dirname "$0")/lib.sh"
INSECURE=   # the safe defaults
FORGE=${SKEIN_TOOLS:-$ROOT/build/release/tests/tools}/skein_forge
K=$T_DIR/cluster.key; OPW=$T_DIR/op.key
for f in "$K" "$OPW"; do "$SKEINCTL" keygen >"$f"; chmod 600 "$f"; done
has() { printf '%s\n' "$1" | grep -q -- "$2"; }
octl() { local i=$1; shift; SKEIN_OPERATOR_KEY_FILE="$OPW" "$SKEINCTL" --rpc "127.0.0.1:$(rport "$i")" --timeout 3000 "$@"; }
uctl() { "$SKEINCTL" --rpc "unix:$T_DIR/n1/control.sock" --timeout 3000 "$@"; }
has_head() { uctl head 2>/dev/null | grep -q '^head: n1'; }
start1() { start_agent 1 --profile fast --gpus 1 --key-file "$K" --operator-key-file "$OPW" --head-eligible \
	--bootstrap-expect 1 --metrics "127.0.0.1:$MPORT" "$@"; }
MPORT=$((PORT_BASE + 901))

# --- a key file open to others: a warning at start
chmod 644 "$OPW"
start1
wait_until 15 has_head
check "a head" has_head
check "a 0644 operator key file: one warning line at start" \
	bash -c "[ \$(grep -c 'operator-key-file .* accessible to group/others (mode 0644)' '$T_DIR/n1.log') = 1 ]"
check "the 0600 cluster key: no warning" bash -c "! grep -q -- '--key-file .* accessible' '$T_DIR/n1.log'"
chmod 600 "$OPW"

# --- replay after a restart
"$FORGE" send "127.0.0.1:$(rport 1)" --key "$OPW" --operator --cmd state --arg put --arg foo --arg old \
	--save "$T_DIR/put-old" >/dev/null
"$FORGE" send "127.0.0.1:$(rport 1)" --key "$OPW" --operator --cmd state --arg put --arg bar --arg old \
	--time-offset-ms 5000 --save "$T_DIR/put-ahead" >/dev/null
check "operator writes foo=new, bar=new" bash -c "SKEIN_OPERATOR_KEY_FILE='$OPW' '$SKEINCTL' --rpc 127.0.0.1:$(rport 1) state put foo new >/dev/null && SKEIN_OPERATOR_KEY_FILE='$OPW' '$SKEINCTL' --rpc 127.0.0.1:$(rport 1) state put bar new >/dev/null"
out=$("$FORGE" replay "127.0.0.1:$(rport 1)" "$T_DIR/put-old" --key "$OPW" --operator 2>&1)
check "before the restart: the replay cache refuses it ($out)" has "$out" 'replayed request'
kill_agent 1 9
start1
wait_until 15 has_head
check "the agent is back with its head" has_head
out=$("$FORGE" replay "127.0.0.1:$(rport 1)" "$T_DIR/put-old" --key "$OPW" --operator 2>&1); rc=$?
check "after the restart: the captured 'state put foo old' is refused (rc $rc: $out)" \
	has "$rc $out" "^1 code 1: request stamped .* before this agent's (re)start"
out=$("$FORGE" replay "127.0.0.1:$(rport 1)" "$T_DIR/put-ahead" --key "$OPW" --operator 2>&1); rc=$?
check "... and one stamped 5 s ahead: the saved bound (rc $rc: $out)" \
	has "$rc $out" "^1 code 1: request stamped .* before this agent's (re)start"
check "foo and bar are still new" bash -c "[ \"\$('$SKEINCTL' --rpc unix:$T_DIR/n1/control.sock state get foo)\$('$SKEINCTL' --rpc unix:$T_DIR/n1/control.sock state get bar)\" = newnew ]"
check "fresh sealed requests work within seconds of the restart" wait_until 10 quiet octl 1 members

# --- client patterns at bounded cost
PAT='((a{1,100}){1,100}){1,100}'
t0=$(now_ms)
out=$(octl 1 members --status "$PAT" 2>&1); rc=$?
t1=$(now_ms)
check "members --status '$PAT': answered in $((t1 - t0)) ms (< 1000)" bash -c "[ $rc = 0 ] && [ $((t1 - t0)) -lt 1000 ]"
out=$(octl 1 members --tag "zone=$PAT" 2>&1); rc=$?
check "members --tag zone='$PAT': answered" [ "$rc" = 0 ]
rss=$(awk '/^VmHWM/ { print $2 }' "/proc/${PIDS[1]}/status")
check "the agent's peak memory stayed small (${rss} KiB < 200 MiB)" [ "${rss:-0}" -lt 204800 ]
check "globs: --status 'al*' finds n1" bash -c "SKEIN_OPERATOR_KEY_FILE='$OPW' '$SKEINCTL' --rpc 127.0.0.1:$(rport 1) members --status 'al*' | grep -q '^n1 '"
out=$(octl 1 members --status 'a[b' 2>&1); rc=$?
check "a malformed pattern: exit 2, one line ($out)" expect_err $rc 2 "$out" 'bad pattern'

# --- 40 idle connections to the metrics endpoint, then a scrape
fds=()
for n in $(seq 40); do exec {fd}<>"/dev/tcp/127.0.0.1/$MPORT" && fds+=("$fd"); done
printf 'GET /metr' >&"${fds[0]}"   # a slow one among them
check "40 idle connections open (${#fds[@]})" [ "${#fds[@]}" = 40 ]
out=$(curl -s -m 3 "http://127.0.0.1:$MPORT/metrics" 2>&1); rc=$?
check "a scrape gets through them (curl rc $rc)" has "$out" '^skein_metrics_requests_total'
out=$(curl -s -m 3 "http://127.0.0.1:$MPORT/metrics" 2>&1); rc=$?
check "... and the next one too (curl rc $rc)" has "$out" 'reason="shed_idle"} [1-9]'
for fd in "${fds[@]}"; do exec {fd}>&-; done

# --- a keyless agent takes no stranger
start_agent 2 --profile fast --gpus 1 --head-eligible --bootstrap-expect 1
INSECURE=--insecure start_agent 3 --profile fast --join "127.0.0.1:$(gport 2)"
u2() { "$SKEINCTL" --rpc "unix:$T_DIR/n2/control.sock" --timeout 3000 "$@"; }
keyless_drops() { u2 info --format json | grep -o '"dropped_keyless":[0-9]*' | cut -d: -f2; }
wait_until 10 bash -c "[ \"\$('$SKEINCTL' --rpc unix:$T_DIR/n2/control.sock info --format json | grep -o '\"dropped_keyless\":[0-9]*' | cut -d: -f2)\" -ge 3 ] 2>/dev/null"
sleep 1 # (joins are retried: give the stranger its chance)
check "the keyless agent dropped the stranger's gossip ($(keyless_drops) dropped)" [ "$(keyless_drops)" -ge 3 ]
check "the keyless agent lists only itself" bash -c "[ \"\$('$SKEINCTL' --rpc unix:$T_DIR/n2/control.sock members | tail -n +2 | awk '{print \$1}' | tr '\n' ' ')\" = 'n2 ' ]"
check "the stranger never saw it alive" bash -c "! '$SKEINCTL' --rpc 127.0.0.1:$(rport 3) members | grep -q '^n2 .* alive'"
out=$(u2 join "127.0.0.1:$(gport 3)" 2>&1); rc=$?
check "skeinctl join on the keyless agent: refused in one line ($out)" expect_err $rc 1 "$out" 'has no key'
check "the keyless agent logged why, once" bash -c "[ \$(grep -c 'no key: a lone agent' '$T_DIR/n2.log') = 1 ]"

# --- no cgroup: every descendant of a member, under job stop and after a restart
N=$((8880000 + $$ % 10000)); M=$((N + 10))
ours() { pgrep -fc "^sleep ($1)\$"; }
start4() { SKEIN_NO_CGROUP=1 INSECURE=--insecure start_agent 4 --profile fast --gpus 1 --head-eligible --bootstrap-expect 1; }
c4() { "$SKEINCTL" --rpc "unix:$T_DIR/n4/control.sock" --timeout 3000 "$@"; }
kill_ours() { local p; for p in $(pgrep -f "^sleep ($N|$((N + 1))|$((N + 2))|$((N + 3))|$M|$((M + 1)))\$"); do kill -9 "$p"; done; }
trap 'kill_ours; cleanup' EXIT
start4
wait_until 15 bash -c "'$SKEINCTL' --rpc unix:$T_DIR/n4/control.sock head 2>/dev/null | grep -q '^head: n4'"
ALL="$N|$((N + 1))|$((N + 2))|$((N + 3))"
check "info says members are held by their process tree" bash -c "'$SKEINCTL' --rpc unix:$T_DIR/n4/control.sock info | grep -q '^members in: process tree'"
c4 job submit --name esc --actor-num-nodes 1 --actor-num-gpus-per-node 1 --rollout-num-gpus 0 --stop-grace 1s \
	--trainer-cmd "setsid sleep $((N + 1)) & (setsid sleep $((N + 2)) &); env -i setsid sleep $((N + 3)) & sleep $N" \
	>/dev/null 2>&1
wait_until 10 bash -c "[ \$(pgrep -fc '^sleep ($ALL)\$') = 4 ]"
check "the member and its 3 setsid children run ($(ours "$ALL"))" [ "$(ours "$ALL")" = 4 ]
sleep 1.5 # (one walk of the members' descendants at least)
c4 job stop esc >/dev/null 2>&1
if wait_until 10 bash -c "[ \$(pgrep -fc '^sleep ($ALL)\$') = 0 ]"; then
	pass "job stop without a cgroup ends every setsid child (env cleared, re-parented)"
else fail "job stop without a cgroup leaves $(pgrep -fa "^sleep ($ALL)\$" | tr '\n' ';')"; fi
c4 job submit --name esc2 --actor-num-nodes 1 --actor-num-gpus-per-node 1 --rollout-num-gpus 0 --stop-grace 1s \
	--trainer-cmd "env -i setsid sleep $((M + 1)) & sleep $M" >/dev/null 2>&1
wait_until 10 bash -c "[ \$(pgrep -fc '^sleep ($M|$((M + 1)))\$') = 2 ]"
check "the restart case's member runs, its setsid child too" [ "$(ours "$M|$((M + 1))")" = 2 ]
check "its setsid child is in the state file" wait_until 5 bash -c "grep -q \"^d \$(pgrep -f '^sleep $((M + 1))\$') \" '$T_DIR/n4/members'"
kill_agent 4 9
sleep 0.3
check "after the agent's SIGKILL the setsid child (no mark) lives on" [ "$(ours "$((M + 1))")" = 1 ]
start4
check "the restarted agent ends it" wait_until 10 bash -c "[ \$(pgrep -fc '^sleep ($M|$((M + 1)))\$') = 0 ]"
finish
