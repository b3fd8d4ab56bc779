# tests/agent/netns.sh: hosts made of network namespaces on one bridge, for
# tests that cut real links.  Source after lib.sh.
#   netns_hosts N     create hosts h1..hN (10.231.0.1-N, addresses that exist
#                     only inside these namespaces); skips the test (with the
#                     reason) when namespaces cannot be made here
#   hrun I cmd...     run a command on host I
#   hstart I args...  start skeind on host I (name hI, gossip 10.231.0.I:7946,
#                     control 127.0.0.1:7373 inside the host)
#   hctl I args...    skeinctl against host I's agent
#   net_cut "1 2" "3 4"   drop every packet between the two groups, both ways
#   net_heal "1 2" "3 4"  undo it
NS_P="skp$$"
NS=()
declare -A NPID=()

netns_cleanup() {
	for i in "${!NPID[@]}"; do kill -9 "${NPID[$i]}" 2>/dev/null; wait "${NPID[$i]}" 2>/dev/null; done
	for n in "${NS[@]}"; do ip netns del "$n" 2>/dev/null; done
	cleanup
}
trap netns_cleanup EXIT

netns_hosts() {
	[ "$(id -u)" = 0 ] || skip_all "needs root for ip netns"
	command -v ip >/dev/null || skip_all "needs iproute2 (ip)"
	ip netns add "$NS_P-sw" 2>/dev/null || skip_all "ip netns add failed (no permission for network namespaces here)"
	NS+=("$NS_P-sw")
	ip -n "$NS_P-sw" link add br0 type bridge || skip_all "no bridge support in this kernel"
	ip -n "$NS_P-sw" link set br0 up
	for i in $(seq 1 "$1"); do
		ip netns add "$NS_P-h$i"; NS+=("$NS_P-h$i")
		ip link add "$NS_P-h${i}a" type veth peer name "$NS_P-h${i}b"
		ip link set "$NS_P-h${i}a" netns "$NS_P-h$i"
		ip link set "$NS_P-h${i}b" netns "$NS_P-sw"
		ip -n "$NS_P-sw" link set "$NS_P-h${i}b" master br0 up
		ip -n "$NS_P-h$i" addr add "10.231.0.$i/24" dev "$NS_P-h${i}a"
		ip -n "$NS_P-h$i" link set "$NS_P-h${i}a" up
		ip -n "$NS_P-h$i" link set lo up
	done
}

hrun() { local i=$1; shift; ip netns exec "$NS_P-h$i" "$@"; }
hstart() {
	local i=$1; shift
	# `ip netns exec` execs skeind: $! is the agent itself, so cleanup kills it
	ip netns exec "$NS_P-h$i" "$SKEIND" --insecure --name "h$i" --bind "10.231.0.$i:7946" --rpc 127.0.0.1:7373 \
		--data-dir "$T_DIR/h$i" "$@" >>"$T_DIR/h$i.log" 2>&1 &
	NPID[$i]=$!
}
hctl() { local i=$1; shift; hrun "$i" "$SKEINCTL" --rpc 127.0.0.1:7373 --timeout 2000 "$@"; }
net_cut() { local i j; for i in $1; do for j in $2; do
	ip -n "$NS_P-h$i" route add blackhole "10.231.0.$j/32"
	ip -n "$NS_P-h$j" route add blackhole "10.231.0.$i/32"
done; done; }
net_heal() { local i j; for i in $1; do for j in $2; do
	ip -n "$NS_P-h$i" route del blackhole "10.231.0.$j/32"
	ip -n "$NS_P-h$j" route del blackhole "10.231.0.$i/32"
done; done; }
