#!/usr/bin/env bash
# deploy/systemd/skeind.service: `systemd-analyze verify` finds nothing to
# say (with ExecStart pointed at this tree's skeind: verify wants the
# binary to exist), and Restart= follows skeind's exit codes: 1 (runtime
# error) and 3 (storage failure) and signals restart, 0 (clean leave) and 2
# (usage error: a restart cannot help) do not.  No systemd needs to run
# here: verify reads the unit offline.
. "$(dirname "$0")/../agent/lib.sh"
U=$ROOT/deploy/systemd/skeind.service
command -v systemd-analyze >/dev/null || { fail "systemd-analyze is not installed (systemd, tools/deps.sh)"; finish; }
sed "s|/usr/local/bin/skeind|$BIN/skeind|" "$U" >"$T_DIR/skeind.service"
out=$(systemd-analyze verify "$T_DIR/skeind.service" 2>&1); rc=$?
check "systemd-analyze verify: exit 0, nothing to say${out:+: $out}" [ "$rc" = 0 -a -z "$out" ]
# a broken copy must be noticed, or the check above proves nothing
{ cat "$T_DIR/skeind.service"; echo "Restart=bogus"; } >"$T_DIR/bad.service"
out=$(systemd-analyze verify "$T_DIR/bad.service" 2>&1)
check "a unit with a misplaced key is reported (the check can fail)" [ -n "$out" ]
key() { sed -n "s/^$1=//p" "$U" | tail -1; }
check "Restart=on-failure (exit 1 and 3, and signals, restart; exit 0 does not)" [ "$(key Restart)" = on-failure ]
check "RestartPreventExitStatus=2 (a usage error is not retried)" [ "$(key RestartPreventExitStatus)" = 2 ]
check "exit codes 1 and 3 are not declared success" bash -c "! grep -E '^SuccessExitStatus=.*\b(1|3)\b' '$U'"
check "a crash loop is bounded (StartLimitBurst)" [ -n "$(key StartLimitBurst)" ]
check "SIGTERM stops it (a graceful leave)" [ "$(key KillSignal)" = SIGTERM ]
out=$("$BIN/skeind" --bogus 2>&1); rc=$?
check "skeind exits 2 on a usage error, which the unit does not restart" [ "$rc" = 2 ]
finish
