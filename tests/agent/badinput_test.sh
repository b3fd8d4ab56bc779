#!/usr/bin/env bash
# Bad input on every surface: random and half-valid datagrams on the gossip
# port, garbage and oversized lengths on its TCP listener, garbage on the
# control endpoint, bad flags and config files.  Each gets a clear error or a
# counted drop, and the agents keep working.
. "$(dirname "$0")/lib.sh"

for i in 1 2 3; do start_agent $i --profile fast --join "127.0.0.1:$(gport 1)"; done
wait_until 10 all_alive 1 2 3 || fail "3 agents converge"
P=$(gport 2)

# --- UDP: random bytes, then frames with a valid header and a garbage body
for n in $(seq 1 200); do head -c $(( (n * 37) % 1400 + 1 )) /dev/urandom >/dev/udp/127.0.0.1/$P; done
for n in $(seq 1 100); do
	{ printf 'SK\x01\x00\x00\x00\x00\x40'; head -c 64 /dev/urandom; } >/dev/udp/127.0.0.1/$P
done
# a newer protocol version than ours
{ printf 'SK\x09\x00\x00\x00\x00\x04'; printf 'abcd'; } >/dev/udp/127.0.0.1/$P

# --- TCP: garbage, a huge length, a truncated message, a silent connection
for n in $(seq 1 20); do head -c 3000 /dev/urandom >/dev/tcp/127.0.0.1/$P 2>/dev/null; done
printf '\xff\xff\xff\xff' >/dev/tcp/127.0.0.1/$P 2>/dev/null
{ printf '\x00\x00\x10\x00'; head -c 100 /dev/urandom; } >/dev/tcp/127.0.0.1/$P 2>/dev/null
exec 7<>/dev/tcp/127.0.0.1/$P   # held open, says nothing
# --- control endpoint: raw garbage instead of ZMTP
for n in $(seq 1 10); do head -c 500 /dev/urandom >/dev/tcp/127.0.0.1/$(rport 2) 2>/dev/null; done

info=$(ctl 2 info --format json)
malformed=$(echo "$info" | grep -o '"dropped_malformed":[0-9]*' | cut -d: -f2)
oversize=$(echo "$info" | grep -o '"dropped_oversize":[0-9]*' | cut -d: -f2)
check "malformed datagrams and streams are counted ($malformed)" [ "${malformed:-0}" -ge 250 ]
check "an oversized stream length is counted ($oversize)" [ "${oversize:-0}" -ge 1 ]
check "the agent is still running" kill -0 "${PIDS[2]}"
check "and still answers" quiet ctl 2 members
wait_until 3 all_alive 1 2 3
check "the cluster is intact" all_alive 1 2 3
check "nobody was marked failed" bash -c "! grep -q 'failed at' '$T_DIR'/n[1-3].log"
exec 7>&-

# --- bad requests through skeinctl
out=$(ctl 2 members --status '[' 2>&1); rc=$?
check "bad pattern: exit 2 and a one-line reason" expect_err $rc 2 "$out" 'bad pattern'
out=$(ctl 2 bogus 2>&1); rc=$?
check "unknown command: exit 2" bash -c "[ $rc = 2 ] && echo '$out' | grep -q 'unknown command'"
out=$(ctl 2 debug drop --in 0.5 2>&1); rc=$?
check "debug refused without --enable-debug" bash -c "[ $rc = 1 ] && echo '$out' | grep -q 'enable-debug'"
out=$("$SKEINCTL" --rpc 127.0.0.1:$(( PORT_BASE + 999 )) --timeout 300 members 2>&1); rc=$?
check "no agent there: exit 1 and a reason" bash -c "[ $rc = 1 ] && echo '$out' | grep -Eq 'no answer|cannot reach'"
out=$("$SKEINCTL" --bogus 2>&1); rc=$?
check "skeinctl bad flag: exit 2" [ $rc = 2 ]
out=$("$SKEINCTL" 2>&1); rc=$?
check "skeinctl with no command: usage, exit 2" [ $rc = 2 ]

# --- bad flags and config for skeind: exit 2, one line, the flag named
out=$("$SKEIND" --bogus 2>&1); rc=$?
check "skeind unknown flag: exit 2 ($out)" bash -c "[ $rc = 2 ] && echo '$out' | grep -q -- '--bogus'"
out=$("$SKEIND" --bind nonsense 2>&1); rc=$?
check "skeind bad --bind: exit 2 ($out)" bash -c "[ $rc = 2 ] && echo '$out' | grep -q -- '--bind'"
out=$("$SKEIND" --profile slow 2>&1); rc=$?
check "skeind bad --profile: exit 2" bash -c "[ $rc = 2 ] && echo '$out' | grep -q -- '--profile'"
out=$("$SKEIND" --set probe_interval_ms=abc 2>&1); rc=$?
check "skeind bad --set: exit 2" bash -c "[ $rc = 2 ] && echo '$out' | grep -q probe_interval_ms"
printf 'name = x\nnot a setting line\n' >"$T_DIR/bad.conf"
out=$("$SKEIND" --config "$T_DIR/bad.conf" 2>&1); rc=$?
check "skeind bad config: exit 2 with file:line ($out)" bash -c "[ $rc = 2 ] && echo '$out' | grep -q 'bad.conf:2'"
printf 'bogus-key = 1\n' >"$T_DIR/bad2.conf"
out=$(SKEIN_CONFIG="$T_DIR/bad2.conf" "$SKEIND" 2>&1); rc=$?
check "skeind unknown config key: exit 2" bash -c "[ $rc = 2 ] && echo '$out' | grep -q bogus-key"
out=$("$SKEIND" --bind "127.0.0.1:$(gport 1)" --rpc "127.0.0.1:$(( PORT_BASE + 998 ))" --name dup 2>&1); rc=$?
check "port in use: exit 1 with the reason" bash -c "[ $rc = 1 ] && echo '$out' | grep -q 'in use'"

# --- settings from a config file and the environment, flags winning
printf '# comment\nname: fromfile\nprofile = fast\ntag: role=trainer\ntag = zone=z1\n' >"$T_DIR/good.conf"
start_agent 7 --config "$T_DIR/good.conf" --join "127.0.0.1:$(gport 1)"
SKEIN_TAG="rack=r9" start_agent 8 --profile fast --join "127.0.0.1:$(gport 1)"
wait_until 5 bash -c "'$SKEINCTL' --rpc 127.0.0.1:$(rport 1) members | grep -q '^n7 .*role=trainer,zone=z1'"
check "config file tags (flag --name wins over the file's name)" bash -c "ctl_out=\$('$SKEINCTL' --rpc 127.0.0.1:$(rport 1) members); echo \"\$ctl_out\" | grep -q '^n7 .*role=trainer,zone=z1' && ! echo \"\$ctl_out\" | grep -q fromfile"
wait_until 5 bash -c "'$SKEINCTL' --rpc 127.0.0.1:$(rport 1) members | grep -q '^n8 .*rack=r9'"
check "environment tags" bash -c "'$SKEINCTL' --rpc 127.0.0.1:$(rport 1) members | grep -q '^n8 .*rack=r9'"
# SIGHUP reloads tags from the file
printf 'name: fromfile\nprofile = fast\ntag: role=engine\n' >"$T_DIR/good.conf"
kill -HUP "${PIDS[7]}"
if wait_until 5 bash -c "'$SKEINCTL' --rpc 127.0.0.1:$(rport 1) members | grep -q '^n7 .*role=engine *\$'"; then
	pass "SIGHUP reloads tags"; else fail "SIGHUP reloads tags"; fi
finish
