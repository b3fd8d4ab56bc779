/* agent/agent_pump: the membership pump, below the control endpoints and
 * above the gossip sockets.  After every call into membership (mbr.h),
 * agent_pump sends what it produced, logs its events (raising the deferred
 * members_changed), and re-arms the timer at its next deadline.  The sockets
 * (agent_net.c, agent_tcp.c) do not call it: having handed a packet to
 * membership they raise pump_due, which a check watcher of the lowest
 * priority delivers here at the end of the same loop iteration, after every
 * socket callback of that iteration and before the loop polls again.
 * Leaving the cluster and saving the keyring live here too, so that
 * agent_ctl.c reaches them without calling agent_main.c. */
#include "agent/agent.h"

#include <stdio.h>
#include <stdlib.h>

#include "common/sk_file.h"
#include "common/sk_log.h"
#include "common/sk_time.h"

/* How long a leaving agent keeps gossiping its departure at most. */
static const double LEAVE_MAX_S = 3.0;

void agent_pump(agent *a)
{
	mbr_out o;
	while (mbr_pop_out(a->mbr, &o)) {
		agent_net_send(a, &o);
		free(o.data);
	}
	mbr_event ev;
	bool changed = false;
	while (mbr_pop_event(a->mbr, &ev)) {
		changed = true;
		char addr[64];
		mbr_addr_format(&ev.addr, addr, sizeof addr);
		if (ev.type == MBR_EV_CONFLICT)
			SK_WARN("gossip", "name conflict: %s", ev.reason);
		else
			SK_INFO("gossip", "member %s %s at %s (generation %llu, incarnation %u)", ev.name,
				mbr_event_str(ev.type), addr, (unsigned long long)ev.generation, ev.incarnation);
		if (ev.type == MBR_EV_JOIN || ev.type == MBR_EV_ALIVE) a->joined = true;
	}
	if (changed) agent_defer(a, &a->members_changed);
	uint64_t now = sk_mono_ms(), d = mbr_next_deadline(a->mbr);
	double after = d > now ? (double)(d - now) / 1000.0 : 0.0;
	ev_timer_stop(a->loop, &a->mbr_timer);
	ev_timer_set(&a->mbr_timer, after, 0.0);
	ev_timer_start(a->loop, &a->mbr_timer);
}

static void mbr_timer_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	agent *a = t->data;
	(void)loop; (void)revents;
	mbr_tick(a->mbr, sk_mono_ms());
	agent_pump(a);
}

/* Packets were handed to membership (agent_net.c, agent_tcp.c).  Only a
 * fallback: pump_check below delivers pump_due first. */
static void pump_due_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	(void)loop; (void)revents;
	agent_pump(t->data);
}

/* Runs after every callback of a loop iteration (libev invokes what is
 * pending by priority; this watcher has the lowest), so a pump_due raised
 * while handling packets is delivered before the loop polls again.  Left
 * to its zero-delay timer, it would run one iteration later, which costs
 * an extra epoll_wait for every batch of packets: 1,163 instead of 944 in
 * 20 s on an idle agent of 20 (the answers wait for that poll too). */
static void pump_check_cb(struct ev_loop *loop, ev_check *w, int revents)
{
	agent *a = w->data;
	(void)revents;
	if (!ev_is_active(&a->pump_due) && !ev_is_pending(&a->pump_due)) return;
	ev_timer_stop(loop, &a->pump_due); /* and its pending call, if any */
	agent_pump(a);
}

void agent_pump_init(agent *a)
{
	ev_init(&a->mbr_timer, mbr_timer_cb);
	ev_init(&a->pump_due, pump_due_cb);
	ev_check_init(&a->pump_check, pump_check_cb);
	ev_set_priority(&a->pump_check, EV_MINPRI);
	a->mbr_timer.data = a->pump_due.data = a->pump_check.data = a;
	ev_check_start(a->loop, &a->pump_check);
}

static void leave_timer_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	agent *a = t->data;
	(void)revents;
	if ((mbr_leave_done(a->mbr) && !agent_head_handing_over(a)) || sk_mono_s() - a->leave_started >= LEAVE_MAX_S) {
		SK_INFO("agent", "left the cluster");
		ev_break(loop, EVBREAK_ALL);
		return;
	}
	ev_timer_set(t, 0.05, 0);
	ev_timer_start(loop, t);
}

void agent_start_leave(agent *a)
{
	if (a->leaving) return;
	a->leaving = true;
	a->leave_started = sk_mono_s();
	SK_INFO("agent", "leaving the cluster");
	ev_timer_stop(a->loop, &a->join_timer);
	agent_head_leave(a); /* first: the handover's messages go out while gossip says goodbye */
	mbr_leave(a->mbr, sk_mono_ms());
	agent_pump(a);
	ev_timer_init(&a->leave_timer, leave_timer_cb, 0.05, 0);
	a->leave_timer.data = a;
	ev_timer_start(a->loop, &a->leave_timer);
}

int agent_save_keyring(agent *a, char *err, size_t errlen)
{
	if (!a->opts.data_dir[0]) return 0;
	char buf[KEYRING_MAX * 64] = "";
	size_t off = 0;
	for (int i = 0; i < a->kr.n; i++) {
		char b64[64];
		agent_key_encode(&a->kr.keys[i], b64, sizeof b64);
		off += (size_t)snprintf(buf + off, sizeof buf - off, "%s\n", b64);
	}
	return sk_file_write_atomic(a->opts.data_dir, "keyring", buf, off, 0600, true, err, errlen);
}
