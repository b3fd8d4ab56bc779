#!/usr/bin/env bash
# Metrics with Debian's real Prometheus: three agents on loopback serve
# /metrics (--metrics), a Prometheus server scrapes them every second, and
# its HTTP query API must return what the cluster is: 3 members alive in
# every agent's view, exactly one head, and member restarts after a kill -9
# of a rollout engine.  `promtool check metrics` must pass on every agent's
# page.  The endpoint's bounds: an unknown path is 404, a POST 405, a
# request head over 4 KiB 431, and the agent still answers after that.
# prometheus, promtool and curl come from tools/deps.sh (test packages): a
# machine without them fails here, it does not skip.
. "$(dirname "$0")/lib.sh"

for t in prometheus promtool curl; do
	command -v "$t" >/dev/null || { fail "$t is not installed (tools/deps.sh install puts it there)"; finish; }
done

mport() { echo $((PORT_BASE + 900 + $1)); }
PROM=$((PORT_BASE + 990))
for i in 1 2 3; do
	start_agent $i --profile fast --head-eligible --bootstrap-expect 3 --gpus 2 --metrics "127.0.0.1:$(mport $i)" \
		--join "127.0.0.1:$(gport 1)"
done

cat >"$T_DIR/prom.yml" <<YML
global: { scrape_interval: 1s, scrape_timeout: 900ms, evaluation_interval: 1s }
scrape_configs:
  - job_name: skein
    static_configs:
      - targets: ['127.0.0.1:$(mport 1)', '127.0.0.1:$(mport 2)', '127.0.0.1:$(mport 3)']
YML
prometheus --config.file="$T_DIR/prom.yml" --storage.tsdb.path="$T_DIR/prom" --web.listen-address="127.0.0.1:$PROM" \
	>"$T_DIR/prometheus.log" 2>&1 &
PIDS[99]=$!

# query EXPR -> its single value ("" when the result is empty)
query() {
	curl -s -m 2 -G "http://127.0.0.1:$PROM/api/v1/query" --data-urlencode "query=$1" |
		grep -o '"value":\[[0-9.]*,"[^"]*"\]' | head -1 | sed -E 's/.*,"([^"]*)"\]/\1/'
}
query_is() { [ "$(query "$1")" = "$2" ]; }
query_ge() { local v; v=$(query "$1"); [ -n "$v" ] && [ "${v%%.*}" -ge "$2" ]; }

check "every agent serves /metrics" wait_until 10 bash -c "curl -sf 127.0.0.1:$(mport 1)/metrics >/dev/null &&
	curl -sf 127.0.0.1:$(mport 2)/metrics >/dev/null && curl -sf 127.0.0.1:$(mport 3)/metrics >/dev/null"
for i in 1 2 3; do
	out=$(curl -s "127.0.0.1:$(mport $i)/metrics" | promtool check metrics 2>&1); rc=$?
	check "promtool check metrics passes on agent $i${out:+: $out}" [ "$rc" = 0 ]
done
if wait_until 30 query_is 'count(up{job="skein"} == 1)' 3; then pass "prometheus scrapes the 3 agents"; else
	fail "prometheus does not scrape 3 agents: $(query 'count(up == 1)')"; tail -5 "$T_DIR/prometheus.log"; finish; fi
check "prometheus: members alive = 3 in every agent's view" \
	wait_until 20 query_is 'count(skein_members{status="alive"} == 3)' 3
check "prometheus: exactly one head" wait_until 20 query_is 'sum(skein_head_is_head)' 1
check "prometheus: every agent knows a head of one term" \
	wait_until 10 query_is 'count(count by (term) (label_replace(skein_head_term, "term", "$1", "__name__", "(.*)")) ) and on() (min(skein_head_term) == max(skein_head_term))' 1

# a job with two engines of one GPU; kill -9 one engine: its agent restarts it
ctl 1 job submit --name m --actor-num-nodes 1 --actor-num-gpus-per-node 1 --rollout-num-gpus 2 \
	--rollout-num-gpus-per-engine 1 --restart-backoff 0:1s --trainer-cmd 'exec sleep 100000' \
	--rollout-cmd 'exec sleep 100000' >/dev/null 2>&1
eng_pid() { ctl 1 placement m --format json 2>/dev/null | tr '{' '\n' | grep '"member":"m/engine-0"' |
	grep -o '"pid":[0-9]*' | cut -d: -f2; }
running_pid() { local p; p=$(eng_pid); [ -n "$p" ] && [ "$p" -gt 0 ]; }
check "prometheus: 3 members running" wait_until 20 query_is 'sum(skein_job_members{state="running"})' 3
check "prometheus: no restarts before the kill" query_is 'sum(skein_job_member_restarts_total)' 0
if wait_until 10 running_pid; then
	kill -9 "$(eng_pid)"
	check "prometheus: restarts = 1 after kill -9 of an engine" \
		wait_until 15 query_is 'sum(skein_job_member_restarts_total)' 1
	check "prometheus: 3 members running again" wait_until 15 query_is 'sum(skein_job_members{state="running"})' 3
else
	fail "engine 0 never ran"
fi
check "prometheus: one job running in the voters' replicas" \
	wait_until 10 query_is 'max(skein_jobs{state="running"})' 1
check "prometheus: the head's commit latency histogram has samples" \
	query_ge 'sum(skein_head_commit_latency_seconds_count)' 1
check "prometheus: process RSS and CPU exported" query_ge 'count(process_resident_memory_bytes > 0)' 3
new_and_old_names() {
	local m
	m=$(curl -s "127.0.0.1:$(mport 1)/metrics")
	grep -q '^# TYPE skein_updates_committed_total counter' <<<"$m" &&
		grep -q '^# TYPE skein_update_seconds histogram' <<<"$m" &&
		grep -q '^# TYPE skein_transfer_committed_total counter' <<<"$m" &&
		grep -q '^# HELP skein_transfer_update_seconds Deprecated: skein_update_seconds' <<<"$m"
}
check "update metrics under their names (skein_update_*, issue 26) and the old ones, kept one release" \
	new_and_old_names

# the endpoint's bounds
code() { curl -s -o /dev/null -w '%{http_code}' "$@"; }
check "unknown path: 404" [ "$(code "127.0.0.1:$(mport 1)/nope")" = 404 ]
check "POST: 405" [ "$(code -X POST "127.0.0.1:$(mport 1)/metrics")" = 405 ]
big=$(head -c 6000 /dev/zero | tr '\0' a)
check "a request head over 4 KiB: 431" [ "$(code -H "X-Big: $big" "127.0.0.1:$(mport 1)/metrics")" = 431 ]
exec 7<>/dev/tcp/127.0.0.1/$(mport 1) # a client that never sends: closed by the timeout, not held
check "still serving after bad requests, with a silent client connected" \
	bash -c "curl -sf -m 2 127.0.0.1:$(mport 1)/metrics | grep -q '^skein_members{status=\"alive\"} 3'"
exec 7>&-
out=$("$SKEIND" --name x --metrics nonsense 2>&1); rc=$?
check "--metrics with a bad address: exit 2, one line naming the flag" expect_err $rc 2 "$out" "^skeind: --metrics"
finish
