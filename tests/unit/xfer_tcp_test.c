/* tests/unit/xfer_tcp_test.c: p2p-tcp between two processes on 127.0.0.1
 * (the scenarios: xfer_p2p_cases.h). */
#include "tests/unit/xfer_p2p_cases.h"

T_TEST(xfer_tcp_roundtrip_staged) { roundtrip(1, 3, 1024, BIG); }
T_TEST(xfer_tcp_roundtrip_direct) { roundtrip(0, 2, 777, BIG); }
T_TEST(xfer_tcp_roundtrip_one_stream_big_bucket) { roundtrip(1, 1, 1 << 20, BIG); }
T_TEST(xfer_tcp_corrupt_stream_keeps_old_version) { corrupt_keeps_old_version(); }
T_TEST(xfer_tcp_receiver_killed_ends_sender) { receiver_vanishes(1); }
T_TEST(xfer_tcp_receiver_stopped_ends_sender_by_watchdog) { receiver_vanishes(0); }
T_TEST(xfer_tcp_sender_dies_receiver_keeps_old_version) { sender_dies_receiver_keeps_old_version(); }
T_TEST(xfer_tcp_manifest_mismatch) { manifest_mismatch(); }
