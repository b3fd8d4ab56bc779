#!/usr/bin/env bash
# --update-weight-disk-dir as hostile input (issue 23 item 2), one agent that
# is its own head: system folders, the agent's data dir and a link to /etc
# are refused by skeinctl and, when skeinctl is bypassed (skein-forge sends
# the raw submit), by the head, each with one line; a folder other users can
# write is a warning in `job status` and `skeinctl info` (text and JSON).
. "$(dirname "$0")/lib.sh"
FORGE=${SKEIN_TOOLS:-$ROOT/build/release/tests/tools}/skein_forge
[ -x "$FORGE" ] || skip_all "skein_forge not built ($FORGE)"

start_agent 1 --profile fast --gpus 1 --head-eligible --bootstrap-expect 1
has_head() { ctl 1 head 2>/dev/null | grep -q '^head: n1'; }
wait_until 20 has_head || { fail "no head"; finish; }

JOB="--actor-num-nodes 1 --actor-num-gpus-per-node 1 --num-gpus-per-node 1 --rollout-num-gpus 0
	--update-weight-transfer-mode disk-delta --trainer-cmd true"
# skeinctl: exit 2, one line naming what
for d in /etc /etc/skein /tmp/../etc //usr/lib/w / /var/lib/skein/w /lib64/w /proc/self; do
	out=$(ctl 1 job submit --name bad $JOB --update-weight-disk-dir "$d" 2>&1); rc=$?
	check "skeinctl refuses $d in one line" expect_err $rc 2 "$out" "refused"
done
ln -s /etc "$T_DIR/toetc"
out=$(ctl 1 job submit --name bad $JOB --update-weight-disk-dir "$T_DIR/toetc/w" 2>&1); rc=$?
check "skeinctl refuses a link to /etc" expect_err $rc 2 "$out" "resolves to /etc"

# the head: a raw submit that skeinctl never checked
forge() { "$FORGE" send "127.0.0.1:$(rport 1)" --submit-disk-dir "$1" 2>&1; }
for d in /etc /tmp/../etc /boot/w /dev/shm/w "$T_DIR/toetc/w"; do
	out=$(forge "$d")
	check "the head refuses $d (raw request)" bash -c "printf '%s' \"\$1\" | grep -q 'code 2' && printf '%s' \"\$1\" | grep -q refused" _ "$out"
done
out=$(forge "$T_DIR/n1/weights")
check "the head refuses its own data dir" bash -c "printf '%s' \"\$1\" | grep -q 'data dir'" _ "$out"
no_jobs() { ! ctl 1 job list 2>&1 | grep -qE '^(job-|bad )'; }
check "no job was made" no_jobs

# a folder others can write: accepted, with a warning
mkdir "$T_DIR/open" && chmod 0777 "$T_DIR/open"
out=$(ctl 1 job submit --name w $JOB --trainer-cmd "exec sleep 100000" --update-weight-disk-dir "$T_DIR/open" 2>&1); rc=$?
check "a 0777 folder is accepted" [ "$rc" = 0 ]
check "and the submit says why it is unsafe" bash -c "printf '%s' \"\$1\" | grep -q 'warning: .*writable by other users'" _ "$out"
st=$(ctl 1 job status w 2>&1)
check "job status warns" bash -c "printf '%s' \"\$1\" | grep -q '^warning: .*writable by other users (mode 0777)'" _ "$st"
st=$(ctl 1 job status w --format json 2>&1)
check "job status JSON warns" bash -c "printf '%s' \"\$1\" | grep -q '\"disk_warning\":\"disk folder .*writable'" _ "$st"
inf=$(ctl 1 info 2>&1)
check "info warns" bash -c "printf '%s' \"\$1\" | grep -q '^WARNING: job w: disk folder .*writable by other users'" _ "$inf"
inf=$(ctl 1 info --format json 2>&1)
check "info JSON warns" bash -c "printf '%s' \"\$1\" | grep -q '\"disk_warnings\":\[\"job w: disk folder'" _ "$inf"
# a parent others can write, without the sticky bit: the folder can be swapped
mkdir "$T_DIR/open/w2"
out=$(ctl 1 job submit --name w2 $JOB --trainer-cmd "exec sleep 100000" --update-weight-disk-dir "$T_DIR/open/w2" 2>&1)
check "a folder in a 0777 non-sticky parent is warned" bash -c "printf '%s' \"\$1\" | grep -q 'not sticky'" _ "$out"
# a safe folder: no warning
mkdir -m 0755 "$T_DIR/safe"
out=$(ctl 1 job submit --name s $JOB --trainer-cmd "exec sleep 100000" --update-weight-disk-dir "$T_DIR/safe" 2>&1)
check "a 0755 root folder is not warned" bash -c "! printf '%s' \"\$1\" | grep -q warning" _ "$out"
st=$(ctl 1 job status s 2>&1)
check "nor in its status" bash -c "! printf '%s' \"\$1\" | grep -q '^warning:'" _ "$st"
for j in w w2 s; do ctl 1 job stop $j >/dev/null 2>&1; done
check "the agent is still running" kill -0 "${PIDS[1]}"
finish
