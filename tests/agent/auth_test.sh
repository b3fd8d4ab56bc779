#!/usr/bin/env bash
# The control plane trusts nobody (docs/security.md): each attack of issue
# #11 items 1-4 is tried as an attacker would, and the test asserts the
# refusal, that it was counted, and that nothing ran and nothing changed.
#   - a keyless cluster does not start; a lone keyless agent is read-only on
#     TCP, for root as for nobody; its Unix socket is refused to other users
#     even when its mode is loosened;
#   - operator keys: read-write and read-only roles; neither sends agent orders;
#   - forged orders (`assign`) from a client, from a non-head, at a term that
#     is not the head's, unsealed: refused, nothing runs, real orders still do;
#   - a huge term in any request does not poison the fence;
#   - replayed requests (same agent, another agent), skewed clocks: refused.
. "$(dirname "$0")/lib.sh"
INSECURE=   # the safe defaults
FORGE=${SKEIN_TOOLS:-$ROOT/build/release/tests/tools}/skein_forge
NOBODY=(setpriv --reuid=65534 --regid=65534 --clear-groups)
NB_SKEINCTL=$(nobody_copy "$SKEINCTL")
PWN=$T_DIR/pwn
mkdir -p "$PWN"
chmod 755 "$T_DIR" # nobody must reach the binaries' output files, not our keys
K=$T_DIR/cluster.key; OPW=$T_DIR/op.key; OPR=$T_DIR/op-read.key; KX=$T_DIR/other.key
for f in "$K" "$OPW" "$OPR" "$KX"; do "$SKEINCTL" keygen >"$f"; chmod 600 "$f"; done
sock_of() { if [ "$1" = 9 ]; then echo "$SOCKD/n9.sock"; else echo "$T_DIR/n$1/control.sock"; fi; }
counter() { "$SKEINCTL" --rpc "unix:$(sock_of "$1")" info --format json | grep -o "\"$2\":[0-9]*" | cut -d: -f2; }
nothing_ran() { [ -z "$(ls -A "$PWN")" ]; }
has() { printf '%s\n' "$1" | grep -q -- "$2"; }
expect_err_i() { [ "$1" = "$2" ] && printf '%s\n' "$3" | grep -qi -- "$4"; }

# --- 1. no key: a cluster is refused, a lone agent is read-only on TCP
out=$("$SKEIND" --name x --bind "127.0.0.1:$(gport 30)" --rpc "127.0.0.1:$(rport 30)" \
	--join "127.0.0.1:$(gport 1)" 2>&1); rc=$?
check "a keyless --join is refused: exit 2 ($out)" expect_err $rc 2 "$out" 'needs a key'
SOCKD=$(mktemp -d /tmp/skein-sock.XXXXXX); chmod 755 "$SOCKD"
start_agent 9 --profile fast --gpus 1 --head-eligible --bootstrap-expect 1 --control-socket "$SOCKD/n9.sock"
wait_until 10 bash -c "'$SKEINCTL' --rpc unix:$SOCKD/n9.sock head 2>/dev/null | grep -q 'head: n9'"
SUB=(job submit --name r1 --actor-num-nodes 1 --actor-num-gpus-per-node 1 --rollout-num-gpus 0
	--trainer-cmd "touch $PWN/lone; sleep 60")
for who in root nobody; do
	pre=(); ctlbin=$SKEINCTL; [ $who = nobody ] && pre=("${NOBODY[@]}") && ctlbin=$NB_SKEINCTL
	out=$("${pre[@]}" "$ctlbin" --rpc "127.0.0.1:$(rport 9)" "${SUB[@]}" 2>&1); rc=$?
	check "lone keyless agent, TCP, $who: job submit refused ($out)" \
		expect_err $rc 1 "$out" 'changes the cluster'
	check "... but $who may look (members)" bash -c "${pre[*]} '$ctlbin' --rpc 127.0.0.1:$(rport 9) members | grep -q '^n9 '"
	out=$("${pre[@]}" "$ctlbin" --rpc "127.0.0.1:$(rport 9)" state get anything 2>&1); rc=$?
	check "... not read the state's values ($out)" expect_err $rc 1 "$out" 'needs a read key'
done
out=$("${NOBODY[@]}" "$NB_SKEINCTL" --rpc "unix:$SOCKD/n9.sock" "${SUB[@]}" 2>&1); rc=$?
check "nobody on the 0600 Unix socket: refused ($out)" expect_err_i $rc 1 "$out" 'permission denied'
check "the socket is 0600" [ "$(stat -c %a "$SOCKD/n9.sock")" = 600 ]
chmod 666 "$SOCKD/n9.sock"
out=$("${NOBODY[@]}" "$NB_SKEINCTL" --rpc "unix:$SOCKD/n9.sock" "${SUB[@]}" 2>&1); rc=$?
check "nobody on a loosened socket: refused by its credentials ($out)" \
	expect_err $rc 1 "$out" 'uid 65534 may not use'
out=$("${NOBODY[@]}" "$(nobody_copy "$FORGE")" send "127.0.0.1:$(rport 9)" --cmd assign --term 99 --sender n9 \
	--assign "r1/r1/trainer-0:touch $PWN/forged" --oneway 2>&1)
check "nobody's forged assign to the lone agent: refused ($(counter 9 control_refused_role) refusals of role)" \
	bash -c "[ $(counter 9 control_refused_role) -ge 3 ]"
check "the lone agent has no job r1" bash -c "! '$SKEINCTL' --rpc unix:$SOCKD/n9.sock job list | grep -q '^r1 '"
kill_agent 9 9

# --- a keyed cluster with operator keys
for i in 1 2 3; do
	start_agent "$i" --profile fast --gpus 1 --key-file "$K" --operator-key-file "$OPW" \
		--operator-read-key-file "$OPR" --head-eligible --bootstrap-expect 3 --join "127.0.0.1:$(gport 1)"
done
kctl() { local i=$1; shift; SKEIN_KEY_FILE="$K" "$SKEINCTL" --rpc "127.0.0.1:$(rport "$i")" --timeout 3000 "$@"; }
octl() { local i=$1 f=$2; shift 2; SKEIN_OPERATOR_KEY_FILE="$f" "$SKEINCTL" --rpc "127.0.0.1:$(rport "$i")" --timeout 3000 "$@"; }
head_name() { kctl 1 head 2>/dev/null | awk '$1 == "head:" { print $2 }'; }
head_term() { kctl 1 head 2>/dev/null | awk '$1 == "term:" { print $2 }'; }
has_head() { local h; h=$(head_name); [ -n "$h" ] && [ "$h" != "(none)" ]; }
wait_until 15 has_head
H=$(head_name); T=$(head_term)
check "a head is elected with keys ($H, term $T)" has_head

# --- operator roles
check "rw operator key: state put over TCP" quiet octl 2 "$OPW" state put who rw
out=$(octl 2 "$OPR" state put who ro 2>&1); rc=$?
check "read-only key: state put refused ($out)" expect_err $rc 1 "$out" 'changes the cluster'
check "read-only key: state get works" bash -c "SKEIN_OPERATOR_KEY_FILE='$OPR' '$SKEINCTL' --rpc 127.0.0.1:$(rport 2) state get who | grep -q '^rw$'"
# issue 26's new words change nothing of the roles: a handover (by either name) and
# the updates table need what they needed
out=$(octl 2 "$OPR" head handover 2>&1); rc=$?
check "read-only key: head handover refused ($out)" expect_err $rc 1 "$out" 'changes the cluster'
out=$(octl 2 "$OPR" head transfer 2>&1); rc=$?
check "read-only key: head transfer (its old name) refused ($out)" expect_err $rc 1 "$out" 'changes the cluster'
check "read-only key: skeinctl updates answers" quiet octl 2 "$OPR" updates
out=$(octl 2 "$KX" members 2>&1); rc=$?
check "unknown key: refused as a wrong key ($out)" expect_err $rc 1 "$out" 'wrong key'
out=$("$FORGE" send "127.0.0.1:$(rport 2)" --key "$OPW" --operator --cmd raft 2>&1)
check "rw operator key: raft refused ($out)" has "$out" 'for agents only'
out=$(env -u SKEIN_KEY_FILE "$SKEINCTL" --rpc "127.0.0.1:$(rport 2)" members 2>&1); rc=$?
check "no key over TCP: refused" expect_err $rc 1 "$out" 'requires the cluster key or an operator key'
check "a host name as the endpoint: the request names the address it reached" \
	bash -c "SKEIN_OPERATOR_KEY_FILE='$OPW' '$SKEINCTL' --rpc localhost:$(rport 2) members | grep -q '^n3 '"
check "--node names the recipient" bash -c "SKEIN_OPERATOR_KEY_FILE='$OPW' '$SKEINCTL' --node n2 --rpc 127.0.0.1:$(rport 2) members | grep -q '^n3 '"
out=$(SKEIN_OPERATOR_KEY_FILE="$OPW" "$SKEINCTL" --node n3 --rpc "127.0.0.1:$(rport 2)" members 2>&1); rc=$?
check "--node of another agent: refused ($out)" expect_err $rc 1 "$out" 'addressed to'
check "the local Unix socket needs no key (root)" bash -c "'$SKEINCTL' --rpc unix:$T_DIR/n2/control.sock members | grep -q '^n3 '"

# --- 2./3. forged orders and fence poisoning
NH=n1; [ "$H" = n1 ] && NH=n2          # a voter that is not the head
V=n3; [ "$H" = n3 ] && V=n2; [ "$NH" = "$V" ] && V=n1
vi=${V#n}
ro0=$(counter "$vi" control_refused_order)
"$FORGE" send "127.0.0.1:$(rport "$vi")" --key "$K" --cmd assign --term "$T" --sender "$NH" --recipient "$V" \
	--assign "x/x/trainer-0:touch $PWN/not-head" --oneway >/dev/null
"$FORGE" send "127.0.0.1:$(rport "$vi")" --key "$K" --cmd assign --term $((T + 5)) --sender "$H" --recipient "$V" \
	--assign "x/x/trainer-0:touch $PWN/future-term" --oneway >/dev/null
"$FORGE" send "127.0.0.1:$(rport "$vi")" --key "$OPW" --operator --cmd assign --term "$T" --sender "$H" \
	--recipient "$V" --assign "x/x/trainer-0:touch $PWN/operator" --oneway >/dev/null
"$FORGE" send "127.0.0.1:$(rport "$vi")" --cmd assign --term "$T" --sender "$H" \
	--assign "x/x/trainer-0:touch $PWN/plain" --oneway >/dev/null
out=$("$FORGE" send "127.0.0.1:$(rport "$vi")" --key "$K" --cmd info --term 18446744073709551615 --recipient "$V" 2>&1)
check "a request with term 2^64-1 is answered as usual" has "$out" '^code 0'
check "orders not from the head at its term are refused and counted" \
	bash -c "[ $(counter "$vi" control_refused_order) -ge $((ro0 + 2)) ]"
# real orders still reach every node after all that (the fence holds the real term)
octl 1 "$OPW" job submit --name ok --actor-num-nodes 3 --actor-num-gpus-per-node 1 --rollout-num-gpus 0 \
	--trainer-cmd "touch $T_DIR/ok-\$RANK; sleep 60" >/dev/null 2>&1
if wait_until 15 bash -c "[ \$(ls '$T_DIR' | grep -c '^ok-') = 3 ]"; then pass "real orders run on all 3 nodes after the forgeries"
else fail "real orders run on all 3 nodes after the forgeries ($(ls "$T_DIR" | grep '^ok-' | tr '\n' ' '))"; fi
check "no forged order ran anything" nothing_ran

# --- 4. replay, with keys
"$FORGE" send "127.0.0.1:$(rport 2)" --key "$OPW" --operator --cmd state --arg put --arg foo --arg old \
	--save "$T_DIR/put-old" >/dev/null
check "operator writes foo=new" quiet octl 2 "$OPW" state put foo new
out=$("$FORGE" replay "127.0.0.1:$(rport 2)" "$T_DIR/put-old" --key "$OPW" --operator 2>&1)
check "replayed 'state put foo old' refused ($out)" has "$out" 'replayed request'
out=$("$FORGE" replay "127.0.0.1:$(rport 3)" "$T_DIR/put-old" --key "$OPW" --operator 2>&1)
check "... and refused by another agent ($out)" has "$out" 'addressed to'
check "foo is still new" bash -c "[ \"\$(SKEIN_KEY_FILE='$K' '$SKEINCTL' --rpc 127.0.0.1:$(rport 1) state get foo)\" = new ]"
rr0=$(counter "$vi" control_refused_recipient)
"$FORGE" send "127.0.0.1:$(rport "$vi")" --key "$K" --cmd assign --term "$T" --sender "$H" --recipient "$NH" \
	--assign "x/x/trainer-0:touch $PWN/replayed-assign" --oneway >/dev/null
check "an order sealed for $NH and sent to $V is refused (addressed to another agent)" \
	bash -c "[ $(counter "$vi" control_refused_recipient) -gt $rr0 ]"
for off in 120000 -120000; do
	out=$("$FORGE" send "127.0.0.1:$(rport 2)" --key "$OPW" --operator --cmd members --time-offset-ms $off 2>&1)
	check "a request from a clock ${off} ms off is refused ($out)" has "$out" 'check the clocks'
done
check "nothing forged ran, in the end either" nothing_ran
check "refusals are counted in info (auth $(counter 2 control_auth_failed), role $(counter 2 control_refused_role), replay $(counter 2 control_refused_replay), skew $(counter 2 control_refused_clock_skew))" \
	bash -c "[ $(counter 2 control_auth_failed) -ge 1 ] && [ $(counter 2 control_refused_role) -ge 2 ] && [ $(counter 2 control_refused_replay) -ge 1 ] && [ $(counter 2 control_refused_clock_skew) -ge 2 ]"

# --- --insecure says so
start_agent 8 --profile fast
wait_until 5 bash -c "'$SKEINCTL' --rpc unix:$T_DIR/n8/control.sock info >/dev/null 2>&1"
check "an agent without --insecure and without keys is not flagged insecure" \
	bash -c "'$SKEINCTL' --rpc unix:$T_DIR/n8/control.sock info --format json | grep -q '\"insecure\":false'"
kill_agent 8 9
INSECURE=--insecure start_agent 7 --profile fast
wait_until 5 bash -c "'$SKEINCTL' --rpc 127.0.0.1:$(rport 7) info >/dev/null 2>&1"
check "--insecure is shown in every info" bash -c "'$SKEINCTL' --rpc 127.0.0.1:$(rport 7) info | grep -q 'WARNING: --insecure'"
rm -rf "$SOCKD"
finish
