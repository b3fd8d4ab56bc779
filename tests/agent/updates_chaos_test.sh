#!/usr/bin/env bash
# Coordinated weight updates under chaos (docs/updates.md), on real agents
# (fast profile): 3 voters and 3 agents with --gpus 4 run two jobs of libskein
# stand-ins, dd (disk-delta) and pp (p2p over TCP), trainer + 3 engines each,
# trainers publishing a version every 50 ms.  For CHAOS_S seconds (default
# 20) a seeded random sequence SIGKILLs engines and trainers of either job
# and the head (at most 3 times, restarted 2 s later).  Then, once every
# engine runs again, the streams are paused (SIGSTOP of the trainers: an
# update they held open ends by the watchdog) and, within bounds:
#   - no update is open, and versions are monotonic in `transfers`;
#   - every running engine holds the latest committed version bit for bit:
#     placement's weight_version equals it, and the last version its log
#     says it verified (a commit, a catch-up, or back on one after an abort)
#     is that one;
#   - no engine ever logged verifying a version that transfers shows aborted,
#     and no trainer was told committed for one.
# Aborted versions are gathered during the run (a job keeps 64 records).
# CHAOS_SEED=... replays a sequence.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/wv_lib.sh"

SEED=${CHAOS_SEED:-1}
CHAOS_S=${CHAOS_S:-20}
RANDOM=$SEED
echo "# updates chaos seed $SEED (CHAOS_SEED=$SEED replays it), $CHAOS_S s"
TMO=4

start() { # I
	if [ "$1" -le 3 ]; then start_agent "$1" --profile fast --head-eligible --bootstrap-expect 3 --gpus 0 \
		--join "127.0.0.1:$(gport 1)" --join "127.0.0.1:$(gport 2)"
	else start_agent "$1" --profile fast --gpus 4 --join "127.0.0.1:$(gport 1)" --join "127.0.0.1:$(gport 2)"; fi
}
for i in 1 2 3 4 5 6; do start $i; done
head_of() { ctl "$1" head 2>/dev/null | awk '$1 == "head:" { print $2 }'; }
has_head() { local h; h=$(head_of "$1"); [ -n "$h" ] && [ "$h" != "(none)" ]; }
logs() { ctl 4 logs "$1" 2>/dev/null; }

wait_until 20 has_head 4 || { fail "no head"; finish; }
M="SKEIN_UCP_LIB=none SKEIN_BIN=$BIN exec $ROOT/tests/agent/wv_member.sh"
SIM="--bytes 128K --tensors 8"
mkdir -p "$T_DIR/dd"
for j in dd pp; do
	mode=(--update-weight-transfer-mode p2p)
	[ $j = dd ] && mode=(--update-weight-transfer-mode disk-delta --update-weight-disk-dir "$T_DIR/dd")
	ctl 4 job submit --name $j --actor-num-nodes 1 --actor-num-gpus-per-node 1 --rollout-num-gpus 3 \
		--rollout-num-gpus-per-engine 1 "${mode[@]}" --update-weight-timeout ${TMO}s \
		--restart-backoff 200ms:1s --max-restarts 1000 --stop-grace 1s \
		--trainer-cmd "$M trainer $SIM --steps 1000000 --interval-ms 50" \
		--rollout-cmd "$M engine -- $SIM --steps 1000000000" >/dev/null || fail "submit $j"
done
both_past() { past dd 5 && past pp 5; }
if wait_until 30 both_past; then pass "dd and pp stream"; else fail "the streams did not start"; ctl 4 placement; finish; fi

ABORTED=$T_DIR/aborted
gather() { local j; for j in dd pp; do q $j aborted | tr ' ' '\n' | sed "/^$/d; s|^|$j |" >> "$ABORTED"; done; }
declare -A DOWN=()
actions=0 heads=0 last_gather=0
end=$(( $(now_ms) + CHAOS_S * 1000 ))
while [ "$(now_ms)" -lt "$end" ]; do
	for i in "${!DOWN[@]}"; do [ "$(now_ms)" -ge "${DOWN[$i]}" ] && { start "$i"; unset "DOWN[$i]"; }; done
	[ $(( $(now_ms) - last_gather )) -ge 2000 ] && { gather; last_gather=$(now_ms); }
	a=$(( RANDOM % 10 )); j=$([ $(( RANDOM % 2 )) = 0 ] && echo dd || echo pp)
	if [ $a -le 5 ]; then # an engine
		p=$(member_field "$j/engine-$(( RANDOM % 3 ))" pid)
		[ -n "$p" ] && [ "$p" -gt 0 ] && kill -9 "$p" 2>/dev/null && actions=$((actions + 1))
	elif [ $a -le 7 ]; then # a trainer
		p=$(member_field "$j/trainer-0" pid)
		[ -n "$p" ] && [ "$p" -gt 0 ] && kill -9 "$p" 2>/dev/null && actions=$((actions + 1))
	elif [ ${#DOWN[@]} = 0 ] && [ $heads -lt 3 ]; then # the head, at most 3 times
		h=$(head_of 4); hi=${h#n}
		if [ -n "$hi" ] && [ -n "${PIDS[$hi]:-}" ]; then
			kill_agent "$hi" 9; DOWN[$hi]=$(( $(now_ms) + 2000 )); actions=$((actions + 1)); heads=$((heads + 1))
		fi
	fi
	sleep 0.$(( 3 + RANDOM % 5 ))
done
for i in "${!DOWN[@]}"; do start "$i"; done
echo "# $actions chaos actions ($heads head kills)"

# pause the streams (a version every 50 ms leaves no moment in which to
# compare placement with transfers) once every engine runs again: a p2p
# engine catches up only from a peer that holds the version, or from the
# trainer's next one, so engines that all lost it wait for the stream.
# Whatever the trainers held open ends within the watchdog.
all_running() { wv_ctl placement --format json 2>/dev/null | $WVJ running dd 3 && wv_ctl placement --format json 2>/dev/null | $WVJ running pp 3; }
if wait_until 60 all_running; then pass "every engine runs again after the chaos"; else fail "engines running after the chaos (seed $SEED)"; ctl 4 placement; fi
trainers_up() { local j p; TP=(); for j in dd pp; do p=$(member_field $j/trainer-0 pid); [ -n "$p" ] && [ "$p" -gt 0 ] || return 1; TP+=("$p"); done; }
wait_until 30 trainers_up || fail "the trainers did not run again"
kill -STOP "${TP[@]}"
t0=$(now_ms)
none_open() { q dd open >/dev/null && q pp open >/dev/null; }
check "streams paused: no update open within the watchdog" wait_until $((TMO + 6)) none_open
both_at_latest() { at_latest dd 3 && at_latest pp 3; }
if wait_until 60 both_at_latest; then pass "every engine runs at the latest version ($(( $(now_ms) - t0 )) ms after the pause)"
else fail "engines at the latest after the chaos (seed $SEED)"; ctl 4 placement; ctl 4 transfers --last 10; fi
gather
for j in dd pp; do
	L=$(latest $j)
	bad=""
	for e in 0 1 2; do
		# the last version this process verified: a commit or catch-up, or the one it went back to
		v=$(logs $j/engine-$e | sed -nE 's/^engine: v([0-9]+) verified bit for bit.*/\1/p; s/^engine: v[0-9]+ aborted \(.*\): back on v([0-9]+), verified bit for bit$/\1/p' | tail -1)
		[ "$v" = "$L" ] || bad="$bad engine-$e:v$v"
	done
	check "$j: every engine's log last verified v$L, the latest committed ($bad)" [ -z "$bad" ]
	why=$(tj $j | $WVJ monotonic)
	check "$j: versions newest first, started in order ($why)" [ -z "$why" ]
	ab=$(awk -v j=$j '$1 == j { print $2 }' "$ABORTED" | sort -un | tr '\n' ' ')
	served=""
	for e in 0 1 2; do
		for v in $(logs $j/engine-$e | sed -nE 's/^engine: v([0-9]+) verified bit for bit.*/\1/p' | sort -un); do
			case " $ab " in *" $v "*) served="$served engine-$e:v$v" ;; esac
		done
	done
	for v in $(logs $j/trainer-0 | sed -nE 's/^trainer: v([0-9]+) committed.*/\1/p'); do
		case " $ab " in *" $v "*) served="$served trainer-0:v$v" ;; esac
	done
	check "$j: no engine verified, no trainer was told committed, a version aborted ($(echo $ab | wc -w) aborted;$served)" \
		[ -z "$served" ]
done
kill -CONT "${TP[@]}"
for j in dd pp; do ctl 4 job stop $j >/dev/null 2>&1; done
finish
