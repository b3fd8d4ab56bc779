#!/usr/bin/env bash
# The cost of /metrics at 100 agents (fast profile, loopback): 3 voters and
# N agents (METRICS_BENCH_NODES, default 97), every one with --metrics.
#   - the page's build time at the agent (skein_metrics_render_seconds, read
#     back on the next scrape), 300 scrapes of the head: p50, p99, max;
#   - one Prometheus round over the 100 agents' pages (series, bytes, the
#     wall time of one curl fetching all 100 in turn);
#   - the CPU a scrape costs the agent: the head's CPU over 1000 scrapes,
#     minus its CPU over the same time without scrapes, per scrape; at one
#     scrape a second that is the share of a core.
# Usage: tests/agent/metrics_bench.sh   (needs curl)
. "$(dirname "$0")/lib.sh"
N=${METRICS_BENCH_NODES:-97}
T=$((N + 3))
mport() { echo $((PORT_BASE + 300 + $1)); }  # free in lib.sh's block: gossip +1.., control +500..
V="--profile fast --head-eligible --bootstrap-expect 3 --gpus 0"
for i in 1 2 3; do start_agent $i $V --metrics "127.0.0.1:$(mport $i)" --join "127.0.0.1:$(gport 1)"; done
for i in $(seq 4 $T); do
	start_agent $i --profile fast --gpus 8 --log-level warn --metrics "127.0.0.1:$(mport $i)" --join "127.0.0.1:$(gport 1)"
done
head_of() { ctl "$1" head 2>/dev/null | awk '$1 == "head:" { print $2 }'; }
has_head() { local h; h=$(head_of 4); [ -n "$h" ] && [ "$h" != "(none)" ]; }
all_alive_n() { [ "$(ctl 4 members 2>/dev/null | awk '$3 == "alive"' | wc -l)" -ge $T ]; }
wait_until 30 has_head || { echo "no head"; exit 1; }
wait_until 90 all_alive_n || { echo "the cluster did not form"; exit 1; }
H=$(head_of 4); H=${H#n}
URL="http://127.0.0.1:$(mport "$H")/metrics"

# build time at the agent
for k in $(seq 300); do curl -s "$URL" | awk '$1 == "skein_metrics_render_seconds" { print $2 }'; done |
	sort -g >"$T_DIR/render"
pct() { awk -v p="$1" '{ v[NR] = $1 } END { i = int(NR * p / 100); if (i < 1) i = 1; printf "%.3f", v[i] * 1000 }' "$T_DIR/render"; }

# one round over every agent's page
urls=(); for i in $(seq 1 $T); do urls+=("http://127.0.0.1:$(mport $i)/metrics"); done
t0=$(now_ms); curl -s "${urls[@]}" >"$T_DIR/all"; round_ms=$(( $(now_ms) - t0 ))
series=$(grep -vc '^#' "$T_DIR/all"); bytes=$(wc -c <"$T_DIR/all")

# CPU per scrape on the head
HP=${PIDS[$H]}
cpu() { awk '{ print $14 + $15 }' "/proc/$HP/stat"; }  # clock ticks
TCK=$(getconf CLK_TCK)
many=(); for k in $(seq 1000); do many+=("$URL"); done
c0=$(cpu); t0=$(now_ms); curl -s "${many[@]}" >/dev/null; scrape_ms=$(( $(now_ms) - t0 )); c1=$(cpu)
c2=$(cpu); sleep "$(awk -v m="$scrape_ms" 'BEGIN { print m / 1000 }')"; c3=$(cpu)
per_ms=$(awk -v a=$((c1 - c0)) -v b=$((c3 - c2)) -v t="$TCK" 'BEGIN { d = (a - b) / t * 1000 / 1000; if (d < 0) d = 0; printf "%.3f", d }')
echo
echo "metrics at $T agents (3 voters + $N, fast, loopback); page of the head (agent n$H)"
printf '%-58s %s\n' "page build at the agent, 300 scrapes: p50 / p99 / max (ms)" "$(pct 50) / $(pct 99) / $(pct 100)"
printf '%-58s %s\n' "one round over all $T pages: series / bytes / curl wall (ms)" "$series / $bytes / $round_ms"
printf '%-58s %s\n' "head CPU per scrape (1000 scrapes in $scrape_ms ms, idle subtracted), ms" "$per_ms"
printf '%-58s %s\n' "scraping every second: share of one core (%)" "$(awk -v p="$per_ms" 'BEGIN { printf "%.3f", p / 10 }')"
