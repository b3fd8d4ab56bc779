#!/usr/bin/env bash
# deploy/kubernetes/skeind.yaml, run as the kubelet would, without
# Kubernetes: network namespaces h1-h4 stand for four nodes (h1-h3 labelled
# skein.io/voter=true: DaemonSet skeind-voter; h4 a GPU node: DaemonSet
# skeind), Debian's dnsmasq answers the headless Service's name with every
# agent's address, and each agent starts with exactly the container's
# command, args and environment read from the YAML (tests/tools/skein_k8s),
# $(VAR) substituted from the env like the kubelet (fieldRef: spec.nodeName
# -> hI, status.podIP -> 10.231.0.I, metadata.namespace -> skein-test), the
# hostPath and Secret mounts mapped to folders of this test.  The one thing
# added: SKEIN_GPUS=4 on h4, standing for the GPUs NVML would count there.
# Checked: the cluster forms through DNS, elects a head, every readiness and
# liveness probe (the YAML's own commands) passes, a job runs; a GPU pod
# killed and started again keeps its name, data dir (generation) and runs
# its members again; a voter pod restarted is still a voter.
. "$(dirname "$0")/../agent/lib.sh"
. "$ROOT/tests/agent/netns.sh"
Y=$ROOT/deploy/kubernetes/skeind.yaml
K8S=${SKEIN_TOOLS:-$ROOT/build/release/tests/tools}/skein_k8s
[ -x "$K8S" ] || { fail "$K8S not built"; finish; }
command -v dnsmasq >/dev/null || { fail "dnsmasq is not installed (dnsmasq-base, tools/deps.sh)"; finish; }
NSPACE=skein-test
SVC=skein.$NSPACE.svc.cluster.local
k8s_cleanup() {
	for i in 1 2 3 4; do rm -rf "/etc/netns/$NS_P-h$i"; done
	netns_cleanup
}
trap k8s_cleanup EXIT
netns_hosts 4

# the manifest itself
args_of() { "$K8S" "$Y" DaemonSet "$1" args; }
check "voters: --head-eligible --bootstrap-expect=3" bash -c "'$K8S' '$Y' DaemonSet skeind-voter args | grep -qx -- --head-eligible &&
	'$K8S' '$Y' DaemonSet skeind-voter args | grep -qx -- --bootstrap-expect=3"
check "GPU agents are not voters" bash -c "! '$K8S' '$Y' DaemonSet skeind args | grep -q head-eligible"
check "the cluster key from the Secret as a file, in no environment" bash -c "
	for d in skeind-voter skeind; do '$K8S' '$Y' DaemonSet \$d mounts | grep -q '=secret:skein-cluster-key' || exit 1
	'$K8S' '$Y' DaemonSet \$d env | grep -qi 'KEY' && exit 1; '$K8S' '$Y' DaemonSet \$d args | grep -q -- '--key-file=' || exit 1; done; exit 0"
check "the Service selects both DaemonSets' pods" bash -c "sel=\$('$K8S' '$Y' Service skein selector);
	'$K8S' '$Y' DaemonSet skeind-voter labels | grep -qx \"\$sel\" && '$K8S' '$Y' DaemonSet skeind labels | grep -qx \"\$sel\""
check "the probes: ready (a head known) and health" bash -c "'$K8S' '$Y' DaemonSet skeind ready | grep -qx ready &&
	'$K8S' '$Y' DaemonSet skeind-voter live | grep -qx health"

# DNS: the headless Service's name -> every agent
ip -n "$NS_P-sw" addr add 10.231.0.254/24 dev br0
for i in 1 2 3 4; do echo "10.231.0.$i $SVC"; done >"$T_DIR/hosts"
ip netns exec "$NS_P-sw" dnsmasq -k -u root --no-resolv --no-hosts --addn-hosts="$T_DIR/hosts" \
	--listen-address=10.231.0.254 --bind-interfaces --pid-file= --log-facility="$T_DIR/dnsmasq.log" &
NPID[dns]=$!
for i in 1 2 3 4; do
	mkdir -p "/etc/netns/$NS_P-h$i"
	printf 'nameserver 10.231.0.254\noptions timeout:1 attempts:3\n' >"/etc/netns/$NS_P-h$i/resolv.conf"
done
resolves_all() { [ "$(hrun 4 getent ahostsv4 "$SVC" | awk '{ print $1 }' | sort -u | wc -l)" = 4 ]; }
check "dnsmasq answers $SVC with the 4 agents" wait_until 10 resolves_all

mkdir -p "$T_DIR/secret"; "$SKEINCTL" keygen >"$T_DIR/secret/key"; chmod 400 "$T_DIR/secret/key"
# the kubelet's $(VAR) expansion, and the mounts mapped to this host's folders
expand() { # I TEXT
	local s=$2 k v m
	for k in "${!ENV[@]}"; do s=${s//"\$($k)"/${ENV[$k]}}; done
	for m in "${!MNT[@]}"; do s=${s//"$m"/${MNT[$m]}}; done
	printf '%s' "$s"
}
declare -A ENV MNT KIND
pod_env() { # I DS: fills ENV and MNT for host I
	local i=$1 ds=$2 line name val
	ENV=(); MNT=()
	while IFS= read -r line; do
		name=${line%%=*}; val=${line#*=}
		case "$val" in
			@field:spec.nodeName) val=h$i ;;
			@field:status.podIP) val=10.231.0.$i ;;
			@field:metadata.namespace) val=$NSPACE ;;
			@*) fail "env $name: $val is not handled by this test"; val="" ;;
		esac
		ENV[$name]=$val
	done < <("$K8S" "$Y" DaemonSet "$ds" env)
	while IFS= read -r line; do
		case "${line#*=}" in
			hostpath:*) MNT[${line%%=*}]=$T_DIR/node-h$i${line#*=hostpath:}; mkdir -p "${MNT[${line%%=*}]}" ;;
			secret:*) MNT[${line%%=*}]=$T_DIR/secret ;;
		esac
	done < <("$K8S" "$Y" DaemonSet "$ds" mounts)
}
kstart() { # I DS [extra env]
	local i=$1 ds=$2 a; shift 2
	KIND[$i]=$ds
	pod_env "$i" "$ds"
	local -a argv=("$SKEIND") envv=(PATH=/usr/sbin:/usr/bin:/sbin:/bin "$@")
	while IFS= read -r a; do argv+=("$(expand "$i" "$a")"); done < <(args_of "$ds")
	for a in "${!ENV[@]}"; do envv+=("$a=${ENV[$a]}"); done
	ip netns exec "$NS_P-h$i" env -i "${envv[@]}" "${argv[@]}" >>"$T_DIR/h$i.log" 2>&1 &
	NPID[$i]=$!
}
probe() { # I ready|live: the YAML's command, in the pod
	local i=$1 a; local -a cmd=()
	pod_env "$i" "${KIND[$i]}"
	while IFS= read -r a; do cmd+=("$(expand "$i" "$a")"); done < <("$K8S" "$Y" DaemonSet "${KIND[$i]}" "$2")
	cmd[0]=$BIN/${cmd[0]##*/}
	hrun "$i" "${cmd[@]}" >/dev/null 2>&1
}
kctl() { local i=$1; shift; hrun "$i" "$SKEINCTL" --rpc "unix:$T_DIR/node-h$i/var/lib/skein/control.sock" --timeout 3000 "$@"; }

for i in 1 2 3; do kstart $i skeind-voter; done
kstart 4 skeind SKEIN_GPUS=4
alive4() { [ "$(kctl 4 members 2>/dev/null | awk '$3 == "alive"' | wc -l)" = 4 ]; }
check "the cluster forms through the Service's DNS name (4 alive)" wait_until 30 alive4
allready() { for i in 1 2 3 4; do probe $i ready || return 1; done; }
check "every readiness probe passes (a head is known)" wait_until 30 allready
alllive() { for i in 1 2 3 4; do probe $i live || return 1; done; }
check "every liveness probe passes" alllive
check "the gossip is encrypted (the Secret's key)" bash -c "'$SKEINCTL' --rpc unix:$T_DIR/node-h4/var/lib/skein/control.sock info 2>/dev/null | grep -q '^encrypted: yes'" 
kctl 4 job submit --name k --actor-num-nodes 1 --actor-num-gpus-per-node 2 --rollout-num-gpus 2 \
	--rollout-num-gpus-per-engine 1 --restart-backoff 0:0 --trainer-cmd 'exec sleep 100000' \
	--rollout-cmd 'exec sleep 100000' >/dev/null 2>&1
running4() { [ "$(kctl 4 placement k --format json 2>/dev/null | grep -o '"state":"running"' | wc -l)" = 4 ]; }
check "a job runs on the GPU node (4 members)" wait_until 20 running4

# a pod restart on the GPU node: container killed, started again with the same spec
gen0=$(cat "$T_DIR/node-h4/var/lib/skein/generation" 2>/dev/null)
kill -9 "${NPID[4]}"; wait "${NPID[4]}" 2>/dev/null
kstart 4 skeind SKEIN_GPUS=4
gen1() { local g; g=$(cat "$T_DIR/node-h4/var/lib/skein/generation" 2>/dev/null); [ -n "$g" ] && [ "$g" != "$gen0" ]; }
check "the restarted pod keeps its data dir (generation $gen0 -> newer)" wait_until 10 gen1
h4_alive() { kctl 1 members 2>/dev/null | awk '$1 == "h4" && $3 == "alive"' | grep -q h4; }
check "... and its identity (h4, alive in a voter's view)" wait_until 20 h4_alive
check "... and runs its members again" wait_until 30 running4
# a voter pod restarted (SIGTERM: the kubelet's stop) is still a voter
kill -TERM "${NPID[1]}"; wait "${NPID[1]}" 2>/dev/null
kstart 1 skeind-voter
check "the restarted voter is ready again" wait_until 30 probe 1 ready
voters3() { [ "$(kctl 1 head 2>/dev/null | awk 'f { print $1 } $1 == "VOTER" { f = 1 }' | sort | tr '\n' ' ')" = "h1 h2 h3 " ]; }
check "... and the voters are still h1 h2 h3 (its Raft log kept)" wait_until 10 voters3
finish
