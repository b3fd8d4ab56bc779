/* tests/unit/update_show_test: agent/agent_update_show (`skeinctl transfers`).
 *
 * Renders records as the head would pass them (a committed one, a copy
 * shown as "moving" with hostile strings and a NaN timing, one without
 * engines) and checks: the JSON is read by Python's json module with
 * exactly the issue's keys, the counts (participants, dropped, verified),
 * Miles's perf names, the data path's split (sender, each engine) and the
 * escaped strings, each engine's undo journal; the text has its header, one
 * line per transfer (and one of its split where it has one, one per engine
 * that told its journal), and no control byte but the line ends. */
#include "tests/t.h"

#include <math.h>
#include <unistd.h>

#include "agent/agent_update_show.h"

static const char CHECK_PY[] =
	"import json, sys\n"
	"d = json.loads(open(sys.argv[1], 'rb').read().decode('utf-8'))\n"
	"assert list(d) == ['transfers'], d.keys()\n"
	"t = d['transfers']\n"
	"assert len(t) == 3, len(t)\n"
	"keys = ['job','version','mode','state','reason','cause','bytes','wire_bytes','participants','dropped',\n"
	"        'started_ms','seconds','engines','perf']\n"
	"for x in t:\n"
	"    assert list(x) == keys, list(x)\n"
	"    assert list(x['seconds']) == ['update_weights','implementation','prepare','commit'], x['seconds']\n"
	"    assert list(x['perf']) == ['perf/update_weights_time','perf/update_weights_implementation_time',\n"
	"                               'perf/update_weights_wire_bytes','perf/update_weights_density',\n"
	"                               'sender','engines'], x['perf']\n"
	"    split = ['data_seconds','hash_seconds','journal_seconds','undo_seconds']\n"
	"    assert list(x['perf']['sender']) == split, x['perf']['sender']\n"
	"    assert list(x['perf']['engines']) == [e['member'] for e in x['engines']], x['perf']['engines']\n"
	"    for m, v in x['perf']['engines'].items():\n"
	"        assert list(v) == split, v\n"
	"    for e in x['engines']:\n"
	"        assert list(e) == ['member','node','state','seconds','journal_bytes','journal_spilled_bytes',\n"
	"                           'journal_where','verified'], list(e)\n"
	"a, b, c = t\n"
	"assert a['job'] == 'j1' and a['version'] == 12 and a['state'] == 'committed' and a['mode'] == 'p2p-tcp'\n"
	"assert a['bytes'] == 1 << 34 and a['wire_bytes'] == 1 << 33 and a['started_ms'] == 1700000000123\n"
	"assert a['participants'] == 3 and a['dropped'] == 1 and a['reason'] == ''\n"
	"assert [e['verified'] for e in a['engines']] == [True, False, True]\n"
	"assert a['engines'][1]['state'] == 'dropped' and a['engines'][0]['seconds'] == 0.25\n"
	"assert [(e['journal_bytes'], e['journal_spilled_bytes'], e['journal_where']) for e in a['engines']] == \\\n"
	"    [(1 << 30, 1 << 28, 'device+pinned'), (0, 0, ''), (4096, 0, 'host')], a['engines']\n"
	"assert b['engines'][0]['journal_where'] == 'ho\\x1bst', repr(b['engines'][0])\n"
	"assert a['seconds']['update_weights'] == 1.5 and a['seconds']['commit'] == 0.125\n"
	"assert a['perf']['perf/update_weights_time'] == 1.5\n"
	"assert a['perf']['perf/update_weights_implementation_time'] == 1.25\n"
	"assert a['perf']['perf/update_weights_wire_bytes'] == 1 << 33\n"
	"assert a['perf']['perf/update_weights_density'] == 0.5\n"
	"assert a['perf']['sender'] == {'data_seconds': 0.5, 'hash_seconds': 0.25, 'journal_seconds': 0, 'undo_seconds': 0}\n"
	"assert a['perf']['engines']['j1/engine-0'] == {'data_seconds': 0.125, 'hash_seconds': 0.0625,\n"
	"                                               'journal_seconds': 0.03125, 'undo_seconds': 0}\n"
	"assert a['perf']['engines']['j1/engine-2']['undo_seconds'] == 0.5\n"
	"assert b['perf']['sender']['data_seconds'] is None\n"
	"assert c['perf']['engines'] == {} and c['perf']['sender']['hash_seconds'] == 0\n"
	"assert b['state'] == 'moving' and b['seconds']['update_weights'] is None\n"
	"assert b['perf']['perf/update_weights_time'] is None\n"
	"assert b['reason'] == 'say \"hi\"\\\\\\n\\x1b[31m\\ufffd', repr(b['reason'])\n"
	"assert b['engines'][0]['member'] == 'j\\x01/engine-0', repr(b['engines'][0]['member'])\n"
	"assert c['engines'] == [] and c['participants'] == 0 and c['dropped'] == 0\n"
	"e = json.loads(open(sys.argv[2], 'rb').read().decode('utf-8'))\n"
	"assert e == {'transfers': []}, e\n";

static update_engine ea[3], eb[1];

static void fill(update_rec *a, update_rec *b, update_rec *c)
{
	memset(a, 0, sizeof *a);
	snprintf(a->job, sizeof a->job, "j1");
	a->version = 12;
	a->base_version = 11;
	snprintf(a->mode, sizeof a->mode, "p2p-tcp");
	snprintf(a->state, sizeof a->state, "committed");
	a->bytes = 1ull << 34;
	a->wire_bytes = 1ull << 33;
	a->started_ms = 1700000000123ull;
	a->density = 0.5;
	a->update_seconds = 1.5;
	a->implementation_seconds = 1.25;
	a->prepare_seconds = 0.0625;
	a->commit_seconds = 0.125;
	static const char *const st[3] = { "verified", "dropped", "verified" };
	for (int i = 0; i < 3; i++) {
		memset(&ea[i], 0, sizeof ea[i]);
		snprintf(ea[i].member, sizeof ea[i].member, "j1/engine-%d", i);
		snprintf(ea[i].node, sizeof ea[i].node, "n%d", i);
		snprintf(ea[i].state, sizeof ea[i].state, "%s", st[i]);
		ea[i].seconds = 0.25;
	}
	/* each engine's undo journal (issue 27): one spilled, one dropped before it said */
	ea[0].journal_bytes = 1ull << 30;
	ea[0].journal_spilled = 1ull << 28;
	snprintf(ea[0].journal_where, sizeof ea[0].journal_where, "device+pinned");
	ea[2].journal_bytes = 4096;
	snprintf(ea[2].journal_where, sizeof ea[2].journal_where, "host");
	a->sender_t = (update_timings){ 0.5, 0.25, 0, 0 };
	ea[0].t = (update_timings){ 0.125, 0.0625, 0.03125, 0 };
	ea[2].t = (update_timings){ 0.0625, 0.125, 0, 0.5 };
	a->engines = ea;
	a->nengines = 3;
	/* what a member could put in a reason, and worse than the table lets in */
	*b = *a;
	snprintf(b->state, sizeof b->state, "moving");
	b->reason = (char *)"say \"hi\"\\\n\x1b[31m\xff";
	b->update_seconds = NAN;
	b->sender_t.data = NAN;
	memset(&eb[0], 0, sizeof eb[0]);
	snprintf(eb[0].member, sizeof eb[0].member, "j\x01/engine-0");
	snprintf(eb[0].node, sizeof eb[0].node, "n\x7f");
	snprintf(eb[0].state, sizeof eb[0].state, "pending");
	eb[0].reason = (char *)"\xc0\xaf";
	snprintf(eb[0].journal_where, sizeof eb[0].journal_where, "ho\x1bst"); /* the table refuses it; shown escaped */
	b->engines = eb;
	b->nengines = 1;
	*c = *a;
	c->engines = NULL;
	c->nengines = 0;
	c->reason = NULL;
	c->sender_t = (update_timings){ 0 }; /* a record from before the split: no line of it */
}

static void write_file(const char *path, const char *s, size_t n)
{
	FILE *f = fopen(path, "wb");
	T_CHECK(f != NULL);
	T_EQ(fwrite(s, 1, n, f), n);
	T_EQ(fclose(f), 0);
}

T_TEST(json_has_the_issues_shape)
{
	update_rec a, b, c;
	fill(&a, &b, &c);
	const update_rec *list[3] = { &a, &b, &c };
	sk_buf out, none;
	sk_buf_init(&out);
	sk_buf_init(&none);
	update_show(&out, list, 3, true);
	update_show(&none, NULL, 0, true);
	T_CHECK(!out.oom && !none.oom);
	const char *base = getenv("TMPDIR");
	char dir[256], py[300], js[300], ejs[300], cmd[1000];
	snprintf(dir, sizeof dir, "%s/update_show_test.XXXXXX", base && *base ? base : "/tmp");
	if (!mkdtemp(dir)) T_FAIL("mkdtemp %s", dir);
	snprintf(py, sizeof py, "%s/check.py", dir);
	snprintf(js, sizeof js, "%s/out.json", dir);
	snprintf(ejs, sizeof ejs, "%s/empty.json", dir);
	write_file(py, CHECK_PY, strlen(CHECK_PY));
	write_file(js, out.p, out.len);
	write_file(ejs, none.p, none.len);
	snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s %s %s", py, js, ejs);
	int rc = system(cmd);
	/* removed before the verdict: a failure prints the JSON itself */
	unlink(py);
	unlink(js);
	unlink(ejs);
	T_EQ(rmdir(dir), 0);
	if (rc != 0) T_FAIL("python3 rejected the JSON:\n%s", sk_buf_str(&out));
	sk_buf_free(&out);
	sk_buf_free(&none);
}

T_TEST(text_one_line_each_escaped)
{
	update_rec a, b, c;
	fill(&a, &b, &c);
	const update_rec *list[3] = { &a, &b, &c };
	sk_buf out;
	sk_buf_init(&out);
	update_show(&out, list, 3, false);
	const char *s = sk_buf_str(&out);
	size_t lines = 0;
	for (size_t i = 0; i < out.len; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (ch == '\n') lines++;
		else if (ch < 0x20 || ch == 0x7f) T_FAIL("control byte 0x%02x at %zu:\n%s", ch, i, s);
	}
	T_EQ(lines, 9);
	T_CHECK(!strncmp(s, "JOB ", 4));
	const char *l1 = strchr(s, '\n') + 1, *s1 = strchr(l1, '\n') + 1, *j0 = strchr(s1, '\n') + 1;
	const char *j2 = strchr(j0, '\n') + 1, *l2 = strchr(j2, '\n') + 1;
	const char *s2 = strchr(l2, '\n') + 1, *jb = strchr(s2, '\n') + 1, *l3 = strchr(jb, '\n') + 1;
	/* each engine that told its journal, one line (the dropped one told none) */
	T_CHECK(!strncmp(j0, "  journal: j1/engine-0 1073741824 bytes, 268435456 spilled, device+pinned\n", 74));
	T_CHECK(!strncmp(j2, "  journal: j1/engine-2 4096 bytes, 0 spilled, host\n", 51));
	T_CHECK(!strncmp(jb, "  journal: j\\x01/engine-0 0 bytes, 0 spilled, ho\\x1bst\n", 55));
	/* the split: the sender's, each figure's largest over the engines */
	T_CHECK(!strncmp(s1, "  split (s): sender data 0.5000 hash 0.2500; engines, slowest: data 0.1250 hash 0.1250 "
			 "journal 0.0312 undo 0.5000\n", 105));
	T_CHECK(!strncmp(s2, "  split (s): sender data - hash 0.2500; ", 40));
	/* job, version, mode, state, bytes, seconds, verified/participants, reason */
	T_CHECK(!strncmp(l1, "j1 ", 3));
	T_CHECK(strstr(l1, " 12 ") && strstr(l1, " p2p-tcp ") && strstr(l1, " committed ") &&
		strstr(l1, " 17179869184 ") && strstr(l1, " 1.500 ") && strstr(l1, " 2/3 "));
	T_CHECK(strstr(l2, " moving ") && strstr(l2, " 0/1 ") && strstr(l2, "\\x1b[31m"));
	T_CHECK(strstr(l3, " 0/0 ") && strstr(l3, " -\n"));
	sk_buf_free(&out);
}
