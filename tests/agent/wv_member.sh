#!/usr/bin/env bash
# tests/agent/wv_member.sh: a member of the update tests' jobs; runs the
# libskein stand-ins (skein-trainer-sim, skein-engine-sim) with what the
# test asks of a restart.  Used as a job's --trainer-cmd / --rollout-cmd:
#
#   wv_member.sh trainer [--wait-engines N] SIM_ARGS...
#       a restarted trainer (SKEIN_RESTART_COUNT > 0) resumes after the job's
#       newest version, asked of its agent (skeinctl transfers on SKEIN_RPC),
#       as a real trainer resumes from its checkpoint: versions only grow;
#       --wait-engines N: on its first start it waits (at most 30 s) until N
#       engines of its job asked the head for work, so that they all take
#       part from the first version however slow the machine
#   wv_member.sh engine [--crash I:V] [--restart-delay S] -- SIM_ARGS...
#       --crash I:V: engine I exits in the middle of receiving version V, on
#       its first start only; --restart-delay S: a restarted engine waits S
#       seconds before it starts (a model that takes time to load), so that
#       its `syncing` can be seen
#
# The simulators come from SKEIN_BIN (the test's), else bin/ of this tree.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${SKEIN_BIN:-$ROOT/bin}
role=$1; shift
restarted=0
[ "${SKEIN_RESTART_COUNT:-0}" != 0 ] && restarted=1

if [ "$role" = trainer ]; then
	first=1
	if [ "${1:-}" = --wait-engines ]; then
		want=$2; shift 2
		for _ in $(seq 300); do
			[ $restarted = 1 ] && break
			n=$("$BIN/skeinctl" --timeout 2000 placement "$SKEIN_JOB" --format json 2>/dev/null |
				grep -o '"weight_version"' | wc -l)
			[ "$n" -ge "$want" ] && break
			sleep 0.1
		done
	fi
	if [ $restarted = 1 ]; then
		# bounded: the head may be changing; 1 when nothing is known
		for _ in $(seq 100); do
			out=$("$BIN/skeinctl" --timeout 2000 transfers "$SKEIN_JOB" --last 1 --format json 2>/dev/null) &&
				n=$(printf '%s' "$out" | /usr/bin/python3 "$ROOT/tests/agent/wv_json.py" newest) && {
				first=$((n + 1)); break; }
			sleep 0.1
		done
		echo "wv_member: restarted trainer resumes at v$first"
	fi
	exec "$BIN/skein-trainer-sim" --first-version "$first" "$@"
fi

crash="" delay=0
while [ $# -gt 0 ] && [ "$1" != -- ]; do
	case $1 in
	--crash) crash=$2; shift 2 ;;
	--restart-delay) delay=$2; shift 2 ;;
	*) echo "wv_member: unknown option $1" >&2; exit 2 ;;
	esac
done
shift
extra=()
if [ -n "$crash" ] && [ $restarted = 0 ] && [ "${SKEIN_ENGINE_ID:-}" = "${crash%%:*}" ]; then
	extra=(--crash-during "${crash#*:}")
fi
[ $restarted = 1 ] && [ "$delay" != 0 ] && sleep "$delay"
exec "$BIN/skein-engine-sim" "$@" "${extra[@]}"
