#!/usr/bin/python3
"""tests/python/journal_test.py: the undo journal's keyword and figures in
the Python package (issue 27, item 2), with NumPy arrays (no torch needed).

device_journal_bytes is a keyword (a negative one refused in one line), and
recv.last says how many bytes the journal kept, how many spilled to pinned
host memory and where it lived: "none" for a first version, "host" after a
p2p-tcp receiver's second (host tensors journal on the host)."""
import os
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
try:
    import numpy as np
except ImportError:
    print("skip: numpy is not installed")
    print("# 0 passed, 0 failed, 1 skipped")
    sys.exit(0)
import skein

SEED = int(os.environ.get("TEST_SEED", "20261129"))
rng = np.random.default_rng(SEED)
TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


@test
def device_journal_bytes_is_a_keyword():
    dst = {"w": np.zeros(1024, dtype=np.float32)}
    with skein.Receiver(dst, mode="p2p-tcp", port=0, device_journal_bytes=8 << 30) as r:
        assert r.port > 0
    try:
        skein.Receiver(dst, mode="p2p-tcp", port=0, device_journal_bytes=-1)
        raise AssertionError("a negative device_journal_bytes accepted")
    except skein.InvalidArgument as e:
        assert "device_journal_bytes" in str(e) and "\n" not in str(e), e


@test
def last_says_where_the_journal_lived():
    src = {"a": rng.standard_normal(300000).astype(np.float32), "b": rng.standard_normal(777).astype(np.float32)}
    dst = {k: np.zeros_like(v) for k, v in src.items()}
    recv = skein.Receiver(dst, mode="p2p-tcp", port=0, timeout=10)
    seen, errs = [], []

    def run():
        try:
            for _ in range(2):
                recv.wait(timeout=10)
                seen.append(dict(recv.last))
        except skein.Error as e:
            errs.append(e)
    t = threading.Thread(target=run)
    t.start()
    try:
        with skein.Publisher(src, mode="p2p-tcp", host="127.0.0.1", port=recv.port, timeout=10) as pub:
            pub.publish(1)
            src["a"][::7] += 1.0  # a seventh of a's floats change
            pub.publish(2)
    finally:
        t.join(20)
        recv.close()
    if errs:
        raise errs[0]
    assert len(seen) == 2, seen
    for k in ("skein/journal_bytes", "skein/journal_spilled_bytes", "skein/journal_where"):
        assert k in seen[0] and k in seen[1], (k, seen[1])
    assert seen[0]["skein/journal_where"] == "none", seen[0]
    assert seen[1]["skein/journal_where"] == "host", seen[1]
    assert seen[1]["skein/journal_bytes"] > 0 and seen[1]["skein/journal_spilled_bytes"] == 0, seen[1]
    assert all(np.array_equal(src[k], dst[k]) for k in src)


def main():
    only = sys.argv[1] if len(sys.argv) > 1 else ""
    passed = failed = 0
    for fn in TESTS:
        if only not in fn.__name__:
            continue
        t0 = time.monotonic()
        try:
            fn()
            passed += 1
            print(f"ok   {fn.__name__} ({(time.monotonic() - t0) * 1000:.0f} ms)")
        except Exception as e:
            failed += 1
            print(f"FAIL {fn.__name__} (TEST_SEED={SEED}): {type(e).__name__}: {e}")
    print(f"# {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
