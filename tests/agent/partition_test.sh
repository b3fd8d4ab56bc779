#!/usr/bin/env bash
# A real network partition: four hosts made of network namespaces on one
# bridge (10.231.0.1-4, addresses that exist only inside these namespaces),
# one skeind each.  Cut {h1,h2} from {h3,h4} both ways with blackhole routes,
# check each side marks the other failed, heal, check everyone is alive in
# everyone's view again.  Needs root and `ip netns`; says why when it skips.
. "$(dirname "$0")/lib.sh"

[ "$(id -u)" = 0 ] || skip_all "needs root for ip netns"
command -v ip >/dev/null || skip_all "needs iproute2 (ip)"
P="skp$$"
NS=()
netns_cleanup() {
	for i in 1 2 3 4; do
		[ -n "${NPID[$i]:-}" ] && kill -9 "${NPID[$i]}" 2>/dev/null && wait "${NPID[$i]}" 2>/dev/null
	done
	for n in "${NS[@]}"; do ip netns del "$n" 2>/dev/null; done
	cleanup
}
trap netns_cleanup EXIT
declare -A NPID=()

ip netns add "$P-sw" 2>/dev/null || skip_all "ip netns add failed (no permission for network namespaces here)"
NS+=("$P-sw")
ip -n "$P-sw" link add br0 type bridge || skip_all "no bridge support in this kernel"
ip -n "$P-sw" link set br0 up
for i in 1 2 3 4; do
	ip netns add "$P-h$i"; NS+=("$P-h$i")
	ip link add "$P-h${i}a" type veth peer name "$P-h${i}b"
	ip link set "$P-h${i}a" netns "$P-h$i"
	ip link set "$P-h${i}b" netns "$P-sw"
	ip -n "$P-sw" link set "$P-h${i}b" master br0 up
	ip -n "$P-h$i" addr add "10.231.0.$i/24" dev "$P-h${i}a"
	ip -n "$P-h$i" link set "$P-h${i}a" up
	ip -n "$P-h$i" link set lo up
done

nctl() { local i=$1; shift; ip netns exec "$P-h$i" "$SKEINCTL" --rpc 127.0.0.1:7373 --timeout 2000 "$@"; }
nstatus() { nctl "$1" members 2>/dev/null | awk -v w="h$2" '$1 == w { print $3 }'; }
view_is() { # OBS STATUS WHO...: OBS sees every WHO in STATUS
	local o=$1 st=$2 w; shift 2
	for w in "$@"; do [ "$(nstatus "$o" "$w")" = "$st" ] || return 1; done
}
everyone_alive() { local o; for o in 1 2 3 4; do view_is "$o" alive 1 2 3 4 || return 1; done; }

for i in 1 2 3 4; do
	ip netns exec "$P-h$i" "$SKEIND" --name "h$i" --bind "10.231.0.$i:7946" --rpc 127.0.0.1:7373 \
		--profile fast --data-dir "$T_DIR/h$i" --join 10.231.0.1:7946 >>"$T_DIR/h$i.log" 2>&1 &
	NPID[$i]=$!
done
if wait_until 15 everyone_alive; then pass "4 hosts in network namespaces converge"; else fail "4 hosts converge"; fi

# cut both ways
for i in 1 2; do for j in 3 4; do
	ip -n "$P-h$i" route add blackhole "10.231.0.$j/32"
	ip -n "$P-h$j" route add blackhole "10.231.0.$i/32"
done; done
t0=$(now_ms)
if wait_until 15 view_is 1 failed 3 4 && wait_until 5 view_is 2 failed 3 4 &&
	wait_until 5 view_is 3 failed 1 2 && wait_until 5 view_is 4 failed 1 2; then
	pass "each side marks the other failed ($(( $(now_ms) - t0 )) ms)"
else
	fail "each side marks the other failed"
fi
view_is 1 alive 1 2 && view_is 3 alive 3 4 && pass "sides stay whole" || fail "sides stay whole"

# heal: reconnect attempts (every 5 s in the fast profile) find the other side
for i in 1 2; do for j in 3 4; do
	ip -n "$P-h$i" route del blackhole "10.231.0.$j/32"
	ip -n "$P-h$j" route del blackhole "10.231.0.$i/32"
done; done
t0=$(now_ms)
if wait_until 30 everyone_alive; then pass "healed: everyone alive everywhere ($(( $(now_ms) - t0 )) ms)"; else
	fail "healed: everyone alive everywhere"; fi
finish
