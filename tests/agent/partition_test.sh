#!/usr/bin/env bash
# A real network partition: four hosts made of network namespaces on one
# bridge, one skeind each.  Cut {h1,h2} from {h3,h4} both ways, check each
# side marks the other failed, heal, check everyone is alive in everyone's
# view again.  Needs root and `ip netns`; says why when it skips.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/netns.sh"

netns_hosts 4
nstatus() { hctl "$1" members 2>/dev/null | awk -v w="h$2" '$1 == w { print $3 }'; }
view_is() { # OBS STATUS WHO...: OBS sees every WHO in STATUS
	local o=$1 st=$2 w; shift 2
	for w in "$@"; do [ "$(nstatus "$o" "$w")" = "$st" ] || return 1; done
}
everyone_alive() { local o; for o in 1 2 3 4; do view_is "$o" alive 1 2 3 4 || return 1; done; }

for i in 1 2 3 4; do hstart $i --profile fast --join 10.231.0.1:7946; done
if wait_until 15 everyone_alive; then pass "4 hosts in network namespaces converge"; else fail "4 hosts converge"; fi

net_cut "1 2" "3 4"
t0=$(now_ms)
if wait_until 15 view_is 1 failed 3 4 && wait_until 5 view_is 2 failed 3 4 &&
	wait_until 5 view_is 3 failed 1 2 && wait_until 5 view_is 4 failed 1 2; then
	pass "each side marks the other failed ($(( $(now_ms) - t0 )) ms)"
else
	fail "each side marks the other failed"
fi
view_is 1 alive 1 2 && view_is 3 alive 3 4 && pass "sides stay whole" || fail "sides stay whole"

# heal: reconnect attempts (every 5 s in the fast profile) find the other side
net_heal "1 2" "3 4"
t0=$(now_ms)
if wait_until 30 everyone_alive; then pass "healed: everyone alive everywhere ($(( $(now_ms) - t0 )) ms)"; else
	fail "healed: everyone alive everywhere"; fi
finish
