#!/usr/bin/env bash
# Encryption and keys: a keyed cluster converges; an agent with the wrong key
# cannot join and is seen only as counted drops; skeinctl without the key is
# refused with a clear error; keys rotate across 5 agents with no failure.
. "$(dirname "$0")/lib.sh"
INSECURE=   # the safe defaults: keys required

K1=$("$SKEINCTL" keygen); K2=$("$SKEINCTL" keygen); KX=$("$SKEINCTL" keygen)
echo "$K1" >"$T_DIR/k1"; echo "$K2" >"$T_DIR/k2"; echo "$KX" >"$T_DIR/kx"
chmod 600 "$T_DIR"/k*
export SKEIN_KEY_FILE="$T_DIR/k1"   # skeinctl's key

for i in 1 2 3 4 5; do start_agent $i --profile fast --key-file "$T_DIR/k1" --join "127.0.0.1:$(gport 1)"; done
if wait_until 10 all_alive 1 2 3 4 5; then pass "5 encrypted agents converge"; else fail "5 encrypted agents converge"; fi
check "the key never reaches a log" bash -c "! grep -rqF '$K1' '$T_DIR'/n*.log"

# --- wrong key
start_agent 9 --profile fast --key-file "$T_DIR/kx" --join "127.0.0.1:$(gport 1)"
wait_until 5 bash -c "[ -n \"\$(SKEIN_KEY_FILE='$T_DIR/kx' '$SKEINCTL' --rpc 127.0.0.1:$(rport 9) info 2>/dev/null)\" ]"
counter() { ctl "$1" info --format json | grep -o "\"$2\":[0-9]*" | cut -d: -f2; }
drops_before=$(counter 1 dropped_auth)
# the wrong-key agent keeps retrying its join: wait until n1 has refused some
wait_until 10 bash -c "[ \$(SKEIN_KEY_FILE='$T_DIR/k1' '$SKEINCTL' --rpc 127.0.0.1:$(rport 1) info --format json | grep -o '\"dropped_auth\":[0-9]*' | cut -d: -f2) -gt $drops_before ]"
drops_after=$(counter 1 dropped_auth)
check "its packets are counted as failed authentication ($drops_before -> $drops_after)" [ "$drops_after" -gt "$drops_before" ]
check "wrong-key agent is not a member" bash -c "[ \"\$('$SKEINCTL' --rpc 127.0.0.1:$(rport 1) members | grep -c '^n9 ')\" = 0 ]"
check "the wrong-key agent knows only itself" bash -c "[ \"\$(SKEIN_KEY_FILE='$T_DIR/kx' '$SKEINCTL' --rpc 127.0.0.1:$(rport 9) members | tail -n +2 | wc -l)\" = 1 ]"
kill_agent 9 9

# --- skeinctl without the key, and with the wrong one
out=$(env -u SKEIN_KEY_FILE "$SKEINCTL" --rpc "127.0.0.1:$(rport 1)" members 2>&1); rc=$?
check "no key: exit 1" [ "$rc" = 1 ]
check "no key: clear error" bash -c "echo '$out' | grep -q 'requires the cluster key'"
out=$(SKEIN_KEY_FILE="$T_DIR/kx" "$SKEINCTL" --rpc "127.0.0.1:$(rport 1)" members 2>&1); rc=$?
check "wrong key: exit 1 with a reason ($out)" bash -c "[ $rc = 1 ] && echo '$out' | grep -q 'wrong key'"

# --- rotation across the 5: install K2, use K2, remove K1; no failure at any point
fp1=$(ctl 1 keyring list | awk 'NR == 2 { print $1 }')
check "install a new key everywhere" quiet ctl 1 keyring install "@$T_DIR/k2"
check "list shows 2 keys on 5/5" bash -c "[ \$(SKEIN_KEY_FILE='$T_DIR/k1' '$SKEINCTL' --rpc 127.0.0.1:$(rport 1) keyring list | grep -c ' 5/5 ') = 2 ]"
check "use the new key everywhere" quiet ctl 1 keyring use "@$T_DIR/k2"
check "remove the old key everywhere (by fingerprint)" quiet env SKEIN_KEY_FILE="$T_DIR/k2" "$SKEINCTL" --rpc "127.0.0.1:$(rport 1)" keyring remove "$fp1"
export SKEIN_KEY_FILE="$T_DIR/k2"
check "one key left, primary on 5/5" bash -c "'$SKEINCTL' --rpc 127.0.0.1:$(rport 1) keyring list | tail -n +2 | grep -q ' 5/5 *5/5'"
# gossip goes on under the new key: n1 keeps getting acks (probes succeed)
p0=$(counter 1 probes); f0=$(counter 1 probe_failures)
wait_until 10 bash -c "[ \$('$SKEINCTL' --rpc 127.0.0.1:$(rport 1) info --format json | grep -o '\"probes\":[0-9]*' | cut -d: -f2) -ge $((p0 + 10)) ]"
check "gossip goes on under the new key (probes $p0 -> $(counter 1 probes), failures $f0 -> $(counter 1 probe_failures))" \
	bash -c "[ $(counter 1 probe_failures) = $f0 ]"
check "everyone alive under the new key" all_alive 1 2 3 4 5
check "no member failed during the rotation" bash -c "! grep -q 'failed at' '$T_DIR'/n[1-5].log"
check "an agent with only the old key is now refused" bash -c "SKEIN_KEY_FILE='$T_DIR/k1' '$SKEINCTL' --rpc 127.0.0.1:$(rport 1) info 2>&1 | grep -q 'wrong key'"
check "the rotated keyring is in the data dir" bash -c "grep -qF '$K2' '$T_DIR/n3/keyring' && ! grep -qF '$K1' '$T_DIR/n3/keyring'"
# restart n3 with its original (old) key file: the data dir's keyring wins
kill_agent 3 9
start_agent 3 --profile fast --key-file "$T_DIR/k1" --join "127.0.0.1:$(gport 1)"
if wait_until 10 gen_is 1 3 2 && wait_until 10 gen_is 2 3 2 && \
	seen_by 3 alive 4 1 2 4 5; then pass "a restarted agent rejoins under the rotated key (generation 2 seen)"; else
	fail "a restarted agent rejoins under the rotated key"; fi
check "cannot remove the primary key" bash -c "! '$SKEINCTL' --rpc 127.0.0.1:$(rport 1) keyring remove @'$T_DIR/k2' >/dev/null 2>&1"
finish
