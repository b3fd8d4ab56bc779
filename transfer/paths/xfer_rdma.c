/* transfer/paths/xfer_rdma.c: the p2p-rdma data path, NOT IMPLEMENTED.
 *
 * The design (issue 6) is rdma-core's libibverbs: the receiver registers its
 * buffers once at setup (ibv_reg_mr), sends the keys and addresses over the
 * TCP control stream, and the sender writes buckets with one-sided
 * RDMA_WRITE, the last one WRITE_WITH_IMM to signal completion.  No machine
 * here has rdma-core headers or an RDMA device, so nothing of it could be
 * built or tested; rather than ship untested code this path only reports
 * itself unavailable.  RDMA runs through UCX instead (p2p-ucx, xfer_ucx.c),
 * which "p2p" chooses when UCX reports an RDMA transport on both ends. */
#include "transfer/core/xfer_int.h"

#include <string.h>

static int rdma_probe(char *why, size_t n)
{
#ifdef XFER_HAVE_VERBS
	snprintf(why, n, "hand-written verbs are not implemented (rdma-core headers were found); p2p-ucx drives "
		 "RDMA through UCX");
#else
	snprintf(why, n, "hand-written verbs are not implemented, and <infiniband/verbs.h> (rdma-core, "
		 "libibverbs-dev) was missing at build time; p2p-ucx drives RDMA through UCX");
#endif
	return -1;
}

static int rdma_setup(xfer_endpoint *ep, xfer_err *err)
{
	char why[256];
	(void)ep;
	rdma_probe(why, sizeof why);
	return xfer_fail(err, XFER_EUNAVAIL, "p2p-rdma: %s", why);
}

static int rdma_send(xfer_endpoint *ep, uint64_t v, xfer_err *err)
{
	(void)ep;
	(void)v;
	return xfer_fail(err, XFER_EUNAVAIL, "p2p-rdma: not implemented");
}

static int rdma_receive(xfer_endpoint *ep, int wait_ms, uint64_t *v, xfer_err *err)
{
	(void)ep;
	(void)wait_ms;
	(void)v;
	return xfer_fail(err, XFER_EUNAVAIL, "p2p-rdma: not implemented");
}

static void rdma_noop(xfer_endpoint *ep) { (void)ep; }

const xfer_path_ops xfer_rdma_ops = {
	.name = "p2p-rdma",
	.probe = rdma_probe,
	.setup = rdma_setup,
	.send = rdma_send,
	.receive = rdma_receive,
	.abort = rdma_noop,
	.teardown = rdma_noop,
};
