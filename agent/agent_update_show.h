/* agent/agent_update_show: `skeinctl transfers [JOB [VERSION]] [--last N] [--format
 * text|json]`, the rendering (docs/updates.md, issue 13 item 4).
 *
 * The head picks the records (update_state_job_at newest first, or every job's
 * through update_state_at), orders them newest first, and may pass copies whose
 * state it overrides ("moving" while bytes move); this file only writes
 * them.  JSON, one object per transfer:
 *   {"transfers":[{"job","version","mode","state","reason","bytes",
 *    "wire_bytes","participants","dropped","started_ms",
 *    "seconds":{"update_weights","implementation","prepare","commit"},
 *    "engines":[{"member","node","state","seconds","verified"}],
 *    "perf":{"perf/update_weights_time", "perf/update_weights_implementation_time",
 *            "perf/update_weights_wire_bytes", "perf/update_weights_density",
 *            "sender":SPLIT, "engines":{MEMBER:SPLIT, ...}}}]}
 * SPLIT = {"data_seconds","hash_seconds","journal_seconds","undo_seconds"}
 * (participants: the engines; dropped: those dropped; verified: state ==
 * verified; perf: Miles's metric names and the data path's split).  Text:
 * a header, then one line per transfer, followed by one line of its split
 * ("  split (s): sender data D hash H; engines, slowest: data D hash H
 * journal J [undo U]") when it has one.  Every string is escaped: names
 * and reasons came from members. */
#ifndef AGENT_UPDATE_SHOW_H
#define AGENT_UPDATE_SHOW_H

#include <stdbool.h>
#include <stddef.h>

#include "common/sk_buf.h"
#include "jobs/update_state.h"

void update_show(sk_buf *out, const update_rec *const *list, size_t n, bool json);

#endif
