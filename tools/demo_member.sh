#!/bin/sh
# tools/demo_member.sh: a member of the demo job (make demo), started by
# skeind with the job's environment.  Trainer rank 0 publishes a new version
# of 16 MiB of bf16 weights every 500 ms (the other ranks hold their GPU and
# wait); every rollout engine receives each version and checks it bit for
# bit against its own recomputation.  Inside a job the stand-ins take the
# mode, the folder and their agent from the environment, and every version
# is a coordinated update (docs/updates.md): engines serve a version only
# once the head committed it.  The demo's faults, on purpose:
#   - engine 1, on its first start, exits in the middle of version 8;
#   - the trainer corrupts one byte of version 14 after checksumming it;
#   - every engine holds its word on the version named in $DEMO_STALL (the
#     demo writes it there to keep one update open while it kills the head).
BIN=${SKEIN_DEMO_BIN:?}
COMMON="--bytes 16M --tensors 48 --changed 0.01 --steps 1000000"
echo "member $SKEIN_MEMBER: rank $RANK of $WORLD_SIZE on GPUs $CUDA_VISIBLE_DEVICES, master $MASTER_ADDR:$MASTER_PORT, restart $SKEIN_RESTART_COUNT"
case "$SKEIN_ROLE" in
trainer)
	[ "$RANK" = 0 ] || exec sleep 1000000
	exec "$BIN/skein-trainer-sim" $COMMON --interval-ms 500 --corrupt-version 14 ;;
rollout)
	CRASH=
	[ "$SKEIN_ENGINE_ID" = 1 ] && [ "$SKEIN_RESTART_COUNT" = 0 ] && CRASH="--crash-during 8"
	exec "$BIN/skein-engine-sim" $COMMON --wait-ms 600000 --stall-file "${DEMO_STALL:?}" $CRASH ;;
esac
echo "unknown role '$SKEIN_ROLE'" >&2
exit 2
