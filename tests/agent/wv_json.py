#!/usr/bin/python3
"""tests/agent/wv_json.py: questions the update tests ask of `skeinctl
transfers JOB --format json` and `skeinctl placement --format json` (read
from stdin).  Prints the answer; exit 1 when a check does not hold (with the
reason on stdout), 2 on unreadable input.

transfers:
  latest               the newest committed version (0: none)
  newest               the highest version of any state (0: none)
  get V FIELD          a field of version V's record ("" when there is none)
  engine V MEMBER      MEMBER's state in version V's record ("" when absent)
  participants V       the members of V's record that were not dropped
  monotonic            newest first; versions fall and start times do not rise
  open                 the versions still preparing or moving (exit 1 if any)
  aborted              the aborted versions
  final-upto V         every record up to version V is committed or aborted
  shape                every record has the keys of issue #13 item 4
  split                every committed record has the data path's split (perf's
                       sender and engines): each verified engine moved bytes in
                       data_seconds > 0, the sender too when one did (hashing,
                       for colocated),
                       and prepare + commit fit in update_weights
placement:
  at JOB L [N]         every engine of JOB (at least N) runs with weight_version L
  running JOB [N]      every engine of JOB (at least N) is running (not syncing)
  state JOB MEMBER     MEMBER's state and weight_version ("state version")
"""
import json
import sys

FINAL = ("committed", "aborted")
RECORD_KEYS = ["job", "version", "mode", "state", "reason", "cause", "bytes", "wire_bytes", "participants", "dropped",
               "started_ms", "seconds", "engines", "perf"]
SECONDS_KEYS = ["update_weights", "implementation", "prepare", "commit"]
ENGINE_KEYS = ["member", "node", "state", "seconds", "journal_bytes", "journal_spilled_bytes", "journal_where",
               "verified"]
JOURNAL_WHERE = ("", "none", "host", "device", "pinned", "device+pinned")
PERF_KEYS = ["perf/update_weights_time", "perf/update_weights_implementation_time",
             "perf/update_weights_wire_bytes", "perf/update_weights_density", "sender", "engines"]
SPLIT_KEYS = ["data_seconds", "hash_seconds", "journal_seconds", "undo_seconds"]


def record(doc, v):
    for r in doc["transfers"]:
        if r["version"] == v:
            return r
    return None


def shape(doc):
    if list(doc.keys()) != ["transfers"]:
        return "top-level keys %s" % list(doc.keys())
    for r in doc["transfers"]:
        v = r.get("version")
        if list(r.keys()) != RECORD_KEYS:
            return "v%s: keys %s" % (v, list(r.keys()))
        if r["state"] not in ("preparing", "moving", "committed", "aborted"):
            return "v%s: state %r" % (v, r["state"])
        if list(r["seconds"].keys()) != SECONDS_KEYS or list(r["perf"].keys()) != PERF_KEYS:
            return "v%s: seconds %s perf %s" % (v, list(r["seconds"]), list(r["perf"]))
        for k in ("version", "bytes", "wire_bytes", "participants", "dropped", "started_ms"):
            if not isinstance(r[k], int) or r[k] < 0:
                return "v%s: %s = %r" % (v, k, r[k])
        for e in r["engines"]:
            if list(e.keys()) != ENGINE_KEYS or not isinstance(e["verified"], bool):
                return "v%s: engine %s" % (v, e)
            if e["journal_where"] not in JOURNAL_WHERE or not 0 <= e["journal_spilled_bytes"] <= e["journal_bytes"]:
                return "v%s: engine %s's journal" % (v, e)
        if r["participants"] != len(r["engines"]):
            return "v%s: participants %d, %d engines listed" % (v, r["participants"], len(r["engines"]))
        if r["dropped"] != sum(e["state"] == "dropped" for e in r["engines"]):
            return "v%s: dropped %d" % (v, r["dropped"])
        if r["state"] == "committed":
            if any(e["state"] not in ("verified", "dropped") for e in r["engines"]):
                return "v%s committed with an engine neither verified nor dropped" % v
            p = r["perf"]
            if p["perf/update_weights_time"] != r["seconds"]["update_weights"] or \
                    p["perf/update_weights_wire_bytes"] != r["wire_bytes"] or r["seconds"]["update_weights"] <= 0:
                return "v%s: perf %s against seconds %s" % (v, p, r["seconds"])
        if r["state"] == "aborted" and not r["reason"]:
            return "v%s aborted without a reason" % v
        causes = ("engine", "member_lost", "sender", "timeout", "superseded")
        if (r["state"] == "aborted") != (r["cause"] in causes) or (r["state"] != "aborted" and r["cause"]):
            return "v%s %s with cause %r" % (v, r["state"], r["cause"])
    return None


def split(doc):
    for r in doc["transfers"]:
        v, p, s = r["version"], r["perf"], r["seconds"]
        if list(p["sender"]) != SPLIT_KEYS or list(p["engines"]) != [e["member"] for e in r["engines"]]:
            return "v%d: perf sender %s engines %s" % (v, p["sender"], list(p["engines"]))
        if r["state"] != "committed":
            continue
        # a version nobody took part in moved nothing on p2p
        snd = p["sender"]["hash_seconds"] if r["mode"] == "colocated" else p["sender"]["data_seconds"]
        if not snd > 0 and any(e["state"] == "verified" for e in r["engines"]):
            return "v%d: the sender's split %s" % (v, p["sender"])
        for e in r["engines"]:
            t = p["engines"][e["member"]]
            if e["state"] == "verified" and not (t["data_seconds"] > 0 and all(t[k] >= 0 for k in SPLIT_KEYS)):
                return "v%d: %s's split %s" % (v, e["member"], t)
        # disjoint spans of begin .. the final record committed (10 ms for
        # an adopted record's wall clock against the monotonic one)
        if s["prepare"] + s["commit"] > s["update_weights"] + 0.01:
            return "v%d: prepare %.6f + commit %.6f > update_weights %.6f" % (
                v, s["prepare"], s["commit"], s["update_weights"])
    return None


def main(argv):
    try:
        doc = json.load(sys.stdin)
    except ValueError as e:
        print("unreadable JSON: %s" % e)
        return 2
    cmd, args = argv[1], argv[2:]
    if cmd == "running":
        eng = [m for m in doc["members"] if m["job"] == args[0] and m["role"] == "rollout"]
        ok = len(eng) >= (int(args[1]) if len(args) > 1 else 1) and all(m["state"] == "running" for m in eng)
        return 0 if ok else 1
    if cmd == "at" or cmd == "state":
        eng = [m for m in doc["members"] if m["job"] == args[0] and m["role"] == "rollout"]
        if cmd == "state":
            for m in eng:
                if m["member"] == args[1]:
                    print(m["state"], m.get("weight_version", "-"))
            return 0
        want, n = int(args[1]), int(args[2]) if len(args) > 2 else 1
        bad = [(m["member"], m["state"], m.get("weight_version")) for m in eng
               if m["state"] != "running" or m.get("weight_version") != want]
        if bad or len(eng) < n:
            print("not every engine of %s runs at v%d: %s (%d engines)" % (args[0], want, bad, len(eng)))
            return 1
        return 0
    recs = doc["transfers"]
    if cmd == "latest":
        print(max([r["version"] for r in recs if r["state"] == "committed"], default=0))
    elif cmd == "newest":
        print(max([r["version"] for r in recs], default=0))
    elif cmd == "get":
        r = record(doc, int(args[0]))
        print(r[args[1]] if r else "")
    elif cmd == "engine":
        r = record(doc, int(args[0]))
        print(next((e["state"] for e in (r["engines"] if r else []) if e["member"] == args[1]), ""))
    elif cmd == "participants":
        r = record(doc, int(args[0]))
        print(" ".join(e["member"] for e in (r["engines"] if r else []) if e["state"] != "dropped"))
    elif cmd == "monotonic":
        for a, b in zip(recs, recs[1:]):
            if not (a["version"] > b["version"] and a["started_ms"] >= b["started_ms"]):
                print("v%d (started %d) listed before v%d (started %d)" %
                      (a["version"], a["started_ms"], b["version"], b["started_ms"]))
                return 1
    elif cmd == "open":
        op = [r["version"] for r in recs if r["state"] not in FINAL]
        print(" ".join(map(str, op)))
        return 1 if op else 0
    elif cmd == "aborted":
        print(" ".join(str(r["version"]) for r in recs if r["state"] == "aborted"))
    elif cmd == "final-upto":
        op = [r["version"] for r in recs if r["version"] <= int(args[0]) and r["state"] not in FINAL]
        if op:
            print("still open: %s" % op)
            return 1
    elif cmd == "shape" or cmd == "split":
        why = shape(doc) if cmd == "shape" else split(doc)
        if why:
            print(why)
            return 1
    else:
        print("unknown question %s" % cmd)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
