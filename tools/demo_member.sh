#!/bin/sh
# tools/demo_member.sh: a member of the demo job (make demo), started by
# skeind with the job's environment.  Trainer rank 0 publishes a new version
# of 16 MiB of bf16 weights every 500 ms through libskein's disk-delta path
# (the other ranks hold their GPU and wait); every rollout engine receives
# each version and checks it bit for bit against its own recomputation.  An
# engine started on a new node catches up from the newest full version.
BIN=${SKEIN_DEMO_BIN:?}
# the stand-ins poll the folder as before; remove this once the agent answers
# coordinated updates (agent/agent_wv.c, issue #13)
export SKEIN_COORDINATE=0
COMMON="--path disk-delta --dir $SKEIN_DISK_DIR --bytes 16M --tensors 48 --changed 0.01 --steps 1000000 --full-every 10"
echo "member $SKEIN_MEMBER: rank $RANK of $WORLD_SIZE on GPUs $CUDA_VISIBLE_DEVICES, master $MASTER_ADDR:$MASTER_PORT, restart $SKEIN_RESTART_COUNT"
case "$SKEIN_ROLE" in
trainer)
	[ "$RANK" = 0 ] || exec sleep 1000000
	exec "$BIN/skein-trainer-sim" $COMMON --interval-ms 500 ;;
rollout)
	exec "$BIN/skein-engine-sim" $COMMON --receiver-id "engine-$SKEIN_ENGINE_ID" --wait-ms 600000 ;;
esac
echo "unknown role '$SKEIN_ROLE'" >&2
exit 2
