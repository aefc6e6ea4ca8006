/* SPDX-License-Identifier: Apache-2.0 */
/*
 * port.c - the dpdk provider's context: the EAL (once per process), the
 * port a context owns, its packet pools, registered regions, and the
 * poll loop that drives everything (receive, control connections,
 * timers, transmit, completions).
 *
 * A context owns one port and its queue pair 0, so that one thread polls
 * it without locks.  Which port: the first of KANEL_DPDK_IFACES (kernel
 * interfaces) that no other context holds, where the provider hot-plugs
 * a net_af_packet device on it; else KANEL_DPDK_PORT (a port name or
 * number); else the first port no other context of the process uses.
 * An interface is held with a lock file, so that several processes on
 * one host each take their own.  Every variable is in docs/dpdk.md.
 */
/* rte_dev_dma_map and rte_dev_dma_unmap are still experimental in 22.11 */
#define ALLOW_EXPERIMENTAL_API
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/file.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <rte_bus.h>
#include <rte_dev.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_memory.h>

#include "dpdk.h"

#define POOL_MBUFS 8191 /* per context: rx ring, tx ring, window, slack */
#define RING_DESC  1024
#define UDP_PORT   31850 /* + the port id: KANEL_DPDK_UDP_PORT */
#define DEFAULT_EAL_VDEV                              \
	"--no-huge -m 256 --no-pci --no-shconf -l 0 " \
	"--log-level=error"
#define DEFAULT_EAL "--in-memory --log-level=error"

static pthread_mutex_t eal_lock = PTHREAD_MUTEX_INITIALIZER;
static int eal_state; /* 0: not tried, 1: up, negative: failed */
static bool port_used[RTE_MAX_ETHPORTS];
static unsigned int pool_serial;
/*
 * The EAL's arguments, split in place: the EAL keeps pointers into its
 * argv for the life of the process, so they live in static storage.
 */
static char eal_args[4096];

static void plog(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void plog(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	kn__tp_vlog("dpdk", fmt, ap);
	va_end(ap);
}

/* An unsigned variable, or @def; a bad value is logged and ignored. */
static uint64_t env_u64(const char *name, uint64_t def, uint64_t lo,
			uint64_t hi)
{
	const char *s = getenv(name);
	char *end;
	unsigned long long v;

	if (!s || !*s)
		return def;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v < lo || v > hi) {
		plog("%s=%s: not a number from %llu to %llu, using %llu", name,
		     s, (unsigned long long)lo, (unsigned long long)hi,
		     (unsigned long long)def);
		return def;
	}
	return v;
}

/* ---- the EAL ---- */

/*
 * Start the EAL with KANEL_DPDK_EAL (split on spaces), or the defaults:
 * without hugepages or PCI for interfaces named in KANEL_DPDK_IFACES
 * (tests, development), with both otherwise.  rte_eal_init pins the
 * calling thread to its main lcore: the thread's affinity is put back,
 * since it is the caller's thread, not one the EAL made.
 */
static int eal_start(void)
{
	const char *env = getenv("KANEL_DPDK_EAL");
	char *tok, *save = NULL, *argv[64];
	int argc = 0, ret;
	cpu_set_t cpus;
	bool have_cpus;

	if (!env)
		env = getenv("KANEL_DPDK_IFACES") ? DEFAULT_EAL_VDEV
						  : DEFAULT_EAL;
	if (strlen(env) >= sizeof(eal_args)) {
		plog("KANEL_DPDK_EAL is longer than %zu bytes",
		     sizeof(eal_args) - 1);
		return -E2BIG;
	}
	strcpy(eal_args, env);
	argv[argc++] = (char *)"kanel";
	for (tok = strtok_r(eal_args, " \t", &save); tok && argc < 63;
	     tok = strtok_r(NULL, " \t", &save))
		argv[argc++] = tok;
	argv[argc] = NULL;
	have_cpus =
		!pthread_getaffinity_np(pthread_self(), sizeof(cpus), &cpus);
	ret = rte_eal_init(argc, argv);
	if (have_cpus)
		pthread_setaffinity_np(pthread_self(), sizeof(cpus), &cpus);
	if (ret < 0) {
		plog("EAL did not start with '%s': %s", env,
		     rte_strerror(rte_errno));
		return -ENODEV;
	}
	return 0;
}

static int eal_up(void)
{
	int ret;

	pthread_mutex_lock(&eal_lock);
	if (!eal_state)
		eal_state = eal_start() ? -ENODEV : 1;
	ret = eal_state < 0 ? eal_state : 0;
	pthread_mutex_unlock(&eal_lock);
	return ret;
}

/* ---- choosing the port ---- */

static uint32_t iface_mtu(const char *iface)
{
	char path[96];
	unsigned int mtu = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/sys/class/net/%s/mtu", iface);
	f = fopen(path, "r");
	if (f) {
		if (fscanf(f, "%u", &mtu) != 1)
			mtu = 0;
		fclose(f);
	}
	return mtu;
}

static uint32_t iface_ip(const char *iface)
{
	struct ifaddrs *ifa, *i;
	uint32_t ip = 0;

	if (getifaddrs(&ifa))
		return 0;
	for (i = ifa; i; i = i->ifa_next)
		if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
		    !strcmp(i->ifa_name, iface)) {
			ip = ((struct sockaddr_in *)(void *)i->ifa_addr)
				     ->sin_addr.s_addr;
			break;
		}
	freeifaddrs(ifa);
	return ip;
}

/* Hold one of KANEL_DPDK_IFACES and plug a net_af_packet port on it. */
static int claim_iface(struct dp_ctx *c, const char *list)
{
	const char *dir = getenv("KANEL_DPDK_LOCK_DIR");
	char *copy = strdup(list), *tok, *save = NULL;
	int ret = -EBUSY;

	if (!copy)
		return -ENOMEM;
	if (!dir)
		dir = "/tmp";
	for (tok = strtok_r(copy, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		char path[256], args[256];
		uint32_t mtu, frame = 2048;
		int fd;

		if (strlen(tok) >= IF_NAMESIZE)
			continue;
		snprintf(path, sizeof(path), "%s/kanel-dpdk-%s.lock", dir, tok);
		fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		if (fd < 0)
			continue;
		if (flock(fd, LOCK_EX | LOCK_NB)) {
			close(fd);
			continue;
		}
		mtu = iface_mtu(tok);
		if (!mtu) {
			plog("KANEL_DPDK_IFACES: no interface '%s' here", tok);
			close(fd);
			ret = -ENODEV;
			continue;
		}
		while (frame < mtu + 14 + 64)
			frame *= 2;
		snprintf(c->devname, sizeof(c->devname), "net_af_packet_%s",
			 tok);
		/* qdisc_bypass=0: the frames go through the interface's
		 * qdisc, so that tc (netem in the tests) applies */
		snprintf(args, sizeof(args),
			 "%s,iface=%s,qpairs=1,qdisc_bypass=0,framesz=%u,"
			 "blocksz=%u,framecnt=2048",
			 c->devname, tok, frame, frame < 4096 ? 4096 : frame);
		ret = rte_dev_probe(args);
		if (ret) {
			plog("cannot open a net_af_packet port on %s: %s", tok,
			     strerror(-ret));
			close(fd);
			continue;
		}
		ret = rte_eth_dev_get_port_by_name(c->devname, &c->port);
		if (ret) {
			close(fd);
			continue;
		}
		c->probed = true;
		c->lock_fd = fd;
		snprintf(c->iface, sizeof(c->iface), "%s", tok);
		break;
	}
	free(copy);
	return c->probed ? 0 : ret;
}

static int choose_port(struct dp_ctx *c)
{
	const char *ifaces = getenv("KANEL_DPDK_IFACES");
	const char *want = getenv("KANEL_DPDK_PORT");
	uint16_t p;

	if (ifaces && *ifaces)
		return claim_iface(c, ifaces);
	if (want && *want) {
		char *end;
		unsigned long n = strtoul(want, &end, 10);

		if (*end && rte_eth_dev_get_port_by_name(want, &p))
			return -ENODEV;
		if (!*end)
			p = (uint16_t)n;
		if (!rte_eth_dev_is_valid_port(p))
			return -ENODEV;
		if (port_used[p])
			return -EBUSY;
		c->port = p;
		return 0;
	}
	RTE_ETH_FOREACH_DEV(p)
	if (!port_used[p]) {
		c->port = p;
		return 0;
	}
	return -ENODEV;
}

static int port_start(struct dp_ctx *c, const struct kn__tp_ctx_attr *attr)
{
	struct rte_eth_conf conf;
	struct rte_eth_dev_info info;
	struct rte_ether_addr mac;
	uint16_t mtu = 1500;
	uint32_t room;
	char name[RTE_MEMPOOL_NAMESIZE];
	int ret;

	memset(&conf, 0, sizeof(conf));
	ret = rte_eth_dev_info_get(c->port, &info);
	if (ret)
		return ret;
	/* a vdev that copies (af_packet, tap, memif): no DMA to map */
	c->vdev = info.device && rte_dev_bus(info.device) &&
		  !strcmp(rte_bus_name(rte_dev_bus(info.device)), "vdev");
	rte_eth_dev_get_mtu(c->port, &mtu);
	mtu = (uint16_t)env_u64("KANEL_DPDK_MTU", mtu, 576, mtu);
	c->max_payload = mtu - KN_DP_IP_LEN - KN_DP_UDP_LEN - KN_DP_KN_LEN;
	room = RTE_PKTMBUF_HEADROOM + KN_DP_ETH_LEN + mtu;
	if (room < RTE_MBUF_DEFAULT_BUF_SIZE)
		room = RTE_MBUF_DEFAULT_BUF_SIZE;
	snprintf(name, sizeof(name), "kn_p%u_%u", c->port, pool_serial);
	c->pool = rte_pktmbuf_pool_create(name, POOL_MBUFS, 0, 0,
					  (uint16_t)room, (int)rte_socket_id());
	snprintf(name, sizeof(name), "kn_x%u_%u", c->port, pool_serial++);
	c->ext_pool = rte_pktmbuf_pool_create(name, POOL_MBUFS, 0, 0, 0,
					      (int)rte_socket_id());
	if (!c->pool || !c->ext_pool) {
		plog("no memory for the packet pools (EAL -m too small?)");
		return -ENOMEM;
	}
	if (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS)
		conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
	else
		c->zc_threshold = UINT32_MAX; /* segments must be one mbuf */
	ret = rte_eth_dev_configure(c->port, 1, 1, &conf);
	if (!ret)
		ret = rte_eth_rx_queue_setup(c->port, 0, RING_DESC,
					     (unsigned int)rte_socket_id(),
					     NULL, c->pool);
	if (!ret)
		ret = rte_eth_tx_queue_setup(c->port, 0, RING_DESC,
					     (unsigned int)rte_socket_id(),
					     NULL);
	if (!ret)
		ret = rte_eth_dev_start(c->port);
	if (ret) {
		plog("port %u: cannot start it: %s", c->port, strerror(-ret));
		return ret;
	}
	c->started = true;
	rte_eth_macaddr_get(c->port, &mac);
	memcpy(c->me.mac, mac.addr_bytes, 6);
	c->me.port = (uint16_t)env_u64("KANEL_DPDK_UDP_PORT", UDP_PORT, 1,
				       65535 - RTE_MAX_ETHPORTS) +
		     c->port;
	{
		const char *ip = getenv("KANEL_DPDK_IP");
		struct in_addr a;

		if (ip && inet_pton(AF_INET, ip, &a) == 1)
			c->me.ip = a.s_addr;
		else if (ip)
			plog("KANEL_DPDK_IP=%s is no IPv4 address", ip);
		if (!c->me.ip && c->iface[0])
			c->me.ip = iface_ip(c->iface);
	}
	(void)attr;
	return 0;
}

/* ---- the context ---- */

static void dp_ctx_destroy(struct kn__tp_ctx *ctx)
{
	struct dp_ctx *c = dp_ctx(ctx);
	struct kn__list *n;

	while ((n = kn__list_first(&c->sw.eps)))
		dp_ep_close(&dp_ep_of(n)->sw.base);
	while ((n = kn__list_first(&c->listeners)))
		dp_listener_close(
			&container_of(n, struct dp_listener, link)->base);
	while ((n = kn__list_first(&c->mrs)))
		kn__tp_mr_dereg(&container_of(n, struct dp_mr, link)->base);
	for (unsigned int i = 0; i < c->ntx; i++)
		rte_pktmbuf_free(c->tx[i]);
	if (c->started) {
		rte_eth_dev_stop(c->port);
	}
	if (c->probed) {
		struct rte_eth_dev_info info;

		if (!rte_eth_dev_info_get(c->port, &info)) {
			rte_eth_dev_close(c->port);
			rte_dev_remove(info.device);
		}
	}
	rte_mempool_free(c->pool);
	rte_mempool_free(c->ext_pool);
	pthread_mutex_lock(&eal_lock);
	port_used[c->port] = false;
	pthread_mutex_unlock(&eal_lock);
	if (c->lock_fd >= 0)
		close(c->lock_fd);
	if (c->tfd >= 0)
		close(c->tfd);
	if (c->epfd >= 0)
		close(c->epfd);
	kn__tp_cq_fini(&c->sw.cq);
	free(c->tab);
	free(c);
}

static int dp_ctx_create(const struct kn__tp_ctx_attr *attr,
			 struct kn__tp_ctx **out)
{
	struct epoll_event ev;
	struct dp_ctx *c;
	int ret;

	if (attr && (attr->flags || attr->device))
		return -EINVAL; /* the port comes from KANEL_DPDK_* */
	if (!getenv("KANEL_DPDK_IFACES") && !getenv("KANEL_DPDK_EAL") &&
	    !getenv("KANEL_DPDK_PORT"))
		return -ENODEV; /* nothing says which port: do not guess */
	ret = eal_up();
	if (ret)
		return ret;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	kn__swr_ctx_init(&c->sw, &kn__dp_prov);
	kn__list_init(&c->mrs);
	kn__list_init(&c->listeners);
	kn__list_init(&c->tx_eps);
	c->sw.base.ops = &kn__tp_dpdk_ops;
	c->sw.base.name = "dpdk";
	c->sw.base.max_msg = attr && attr->max_msg ? attr->max_msg : 4096;
	c->lock_fd = c->tfd = c->epfd = -1;
	c->window = (uint32_t)env_u64("KANEL_DPDK_WINDOW", 256, 1, 4096);
	c->rto_min_ns = env_u64("KANEL_DPDK_RTO_US", 1000, 10, 10000000) * 1000;
	c->rto_max_ns = 200 * 1000000ull;
	if (c->rto_max_ns < c->rto_min_ns)
		c->rto_max_ns = c->rto_min_ns;
	c->timeout_ns =
		env_u64("KANEL_DPDK_TIMEOUT_MS", 3000, 10, 3600000) * 1000000;
	c->rnr_ns = 200 * 1000;
	c->wake_ns = env_u64("KANEL_DPDK_WAKE_US", 200, 10, 1000000) * 1000;
	c->zc_threshold = attr && attr->zc_threshold ? attr->zc_threshold : 512;
	ret = kn__tp_cq_init(&c->sw.cq,
			     attr && attr->cq_depth ? attr->cq_depth : 4096);
	if (ret) {
		free(c);
		return ret;
	}
	pthread_mutex_lock(&eal_lock);
	ret = choose_port(c);
	if (!ret)
		port_used[c->port] = true;
	pthread_mutex_unlock(&eal_lock);
	if (ret) {
		if (ret == -ENODEV || ret == -EBUSY)
			plog("no free port for this context (%s): see "
			     "KANEL_DPDK_IFACES and KANEL_DPDK_PORT",
			     strerror(-ret));
		kn__tp_cq_fini(&c->sw.cq);
		free(c);
		return ret == -EBUSY ? -ENODEV : ret;
	}
	ret = port_start(c, attr);
	c->epfd = epoll_create1(EPOLL_CLOEXEC);
	c->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (!ret && (c->epfd < 0 || c->tfd < 0))
		ret = -errno;
	c->timer = (struct dp_handle){ DP_H_TIMER, c->tfd };
	ev = (struct epoll_event){ .events = EPOLLIN, .data.ptr = &c->timer };
	if (!ret && epoll_ctl(c->epfd, EPOLL_CTL_ADD, c->tfd, &ev))
		ret = -errno;
	if (ret) {
		dp_ctx_destroy(&c->sw.base);
		return ret;
	}
	*out = &c->sw.base;
	return 0;
}

/* ---- regions ---- */

static void ext_free(void *addr, void *opaque)
{
	(void)addr, (void)opaque; /* the region is the caller's */
}

/*
 * A device that reads memory by DMA must have the region mapped for it
 * before the port may send from its pages; where that fails, segments
 * from the region are copied into packet buffers instead.
 */
static void dma_map(struct dp_ctx *c, struct dp_mr *mr)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	uintptr_t a = (uintptr_t)mr->base.addr & ~(page - 1);
	uintptr_t e = ((uintptr_t)mr->base.addr + mr->base.len + page - 1) &
		      ~(page - 1);
	struct rte_eth_dev_info info;

	if (c->vdev) {
		mr->zc = true;
		return;
	}
	if (!mr->base.len || rte_eth_dev_info_get(c->port, &info))
		return;
	if (rte_extmem_register((void *)a, e - a, NULL, 0, page))
		return;
	if (rte_dev_dma_map(info.device, (void *)a, a, e - a)) {
		rte_extmem_unregister((void *)a, e - a);
		return;
	}
	mr->zc = mr->dma_mapped = true;
	mr->map_addr = (void *)a;
	mr->map_len = e - a;
}

static int dp_mr_reg(struct kn__tp_ctx *ctx, void *addr, size_t len,
		     uint32_t access, struct kn__tp_mr **out)
{
	struct dp_ctx *c = dp_ctx(ctx);
	struct dp_mr *mr = calloc(1, sizeof(*mr));

	if (!mr)
		return -ENOMEM;
	mr->base = (struct kn__tp_mr){ ctx, addr, len, access };
	mr->shinfo.free_cb = ext_free;
	rte_mbuf_ext_refcnt_set(&mr->shinfo, 1);
	dma_map(c, mr);
	kn__list_push(&c->mrs, &mr->link);
	*out = &mr->base;
	return 0;
}

static void dp_mr_dereg(struct kn__tp_mr *m)
{
	struct dp_mr *mr = container_of(m, struct dp_mr, base);
	struct dp_ctx *c = dp_ctx(m->ctx);
	uint64_t end = dp_now_ns() + 1000000000ull;
	struct kn__list *n;

	kn__list_each(n, &c->sw.eps)
	{
		struct dp_ep *ep = dp_ep_of(n);

		kn__swr_grant_revoke(&ep->sw.grants, m);
		/* answers to reads from it that still await their
		 * acknowledgement: fail the endpoint if one must go again */
		for (uint32_t i = ep->tx_head; i != ep->tx_tail; i++)
			if (ep->txq[i % DP_TXQ_DEPTH].mr == mr) {
				ep->txq[i % DP_TXQ_DEPTH].mr = NULL;
				ep->txq[i % DP_TXQ_DEPTH].gone = true;
			}
	}
	/* the port may still hold segments that point into it */
	while (rte_mbuf_ext_refcnt_read(&mr->shinfo) > 1 && dp_now_ns() < end) {
		dp_tx_flush(c);
		rte_eth_tx_done_cleanup(c->port, 0, 0);
	}
	if (rte_mbuf_ext_refcnt_read(&mr->shinfo) > 1) {
		for (unsigned int i = 0; i < c->ntx; i++)
			rte_pktmbuf_free(c->tx[i]);
		c->ntx = 0;
	}
	if (mr->dma_mapped) {
		struct rte_eth_dev_info info;

		if (!rte_eth_dev_info_get(c->port, &info))
			rte_dev_dma_unmap(info.device, mr->map_addr,
					  (uintptr_t)mr->map_addr, mr->map_len);
		rte_extmem_unregister(mr->map_addr, mr->map_len);
	}
	kn__list_del(&mr->link);
	free(mr);
}

/* ---- the poll loop ---- */

static void ctl_poll(struct dp_ctx *c)
{
	struct epoll_event evs[32];
	int n = epoll_wait(c->epfd, evs, 32, 0);

	for (int i = 0; i < n; i++) {
		struct dp_handle *h = evs[i].data.ptr;

		if (h->kind == DP_H_TIMER) {
			uint64_t v;

			(void)!read(c->tfd, &v, sizeof(v));
			c->timer_at = 0;
			continue;
		}
		dp_ctl_event(c, h, evs[i].events);
	}
}

/*
 * Before the caller sleeps on the fd: wake it when a timer is due, and
 * every KANEL_DPDK_WAKE_US while endpoints are open, since packets on the
 * port make no fd readable (poll-mode drivers have none to offer).
 */
static void arm_timer(struct dp_ctx *c, uint64_t now)
{
	uint64_t at = c->nopen ? now + c->wake_ns : UINT64_MAX;
	struct itimerspec its = { 0 };
	struct kn__list *n;

	/* an endpoint off the tx list has no timer running */
	kn__list_each(n, &c->tx_eps)
	{
		uint64_t t =
			dp_tx_deadline(container_of(n, struct dp_ep, tx_link));

		if (t < at)
			at = t;
	}
	if (at == UINT64_MAX) {
		if (c->timer_at) {
			timerfd_settime(c->tfd, 0, &its, NULL);
			c->timer_at = 0;
		}
		return;
	}
	if (at <= now)
		at = now + 1000;
	/* re-arm only for a clearly earlier time: one syscall, not one
	 * per idle poll */
	if (c->timer_at && c->timer_at <= at + c->wake_ns / 4)
		return;
	its.it_value.tv_sec = (time_t)(at / 1000000000u);
	its.it_value.tv_nsec = (long)(at % 1000000000u);
	timerfd_settime(c->tfd, TFD_TIMER_ABSTIME, &its, NULL);
	c->timer_at = at;
}

static int dp_poll(struct kn__tp_ctx *ctx, struct kn__tp_completion *out,
		   int max)
{
	struct dp_ctx *c = dp_ctx(ctx);
	struct rte_mbuf *pkts[DP_BURST];
	uint64_t now = dp_now_ns();
	unsigned int got = 0;
	struct kn__list *it, *tmp;
	int n;

	for (int round = 0; round < 8; round++) {
		uint16_t k = rte_eth_rx_burst(c->port, 0, pkts, DP_BURST);

		for (uint16_t i = 0; i < k; i++)
			if (!dp_rx_mbuf(c, pkts[i], now))
				rte_pktmbuf_free(pkts[i]);
		got += k;
		if (k < DP_BURST)
			break;
	}
	if (!got || !(++c->polls & 15))
		ctl_poll(c);
	kn__list_each_safe(it, tmp, &c->tx_eps)
	{
		struct dp_ep *ep = container_of(it, struct dp_ep, tx_link);

		dp_tx_progress(ep, now);
		if (dp_tx_idle(ep))
			kn__list_del(it);
	}
	dp_tx_flush(c);
	kn__swr_release_ready(&c->sw);
	dp_ep_reap(c);
	n = kn__tp_cq_take(&c->sw.cq, out, max);
	if (!n)
		arm_timer(c, now);
	return n;
}

static int dp_fd(const struct kn__tp_ctx *ctx)
{
	return container_of(ctx, struct dp_ctx, sw.base)->epfd;
}

const struct kn__tp_ops kn__tp_dpdk_ops = {
	.name = "dpdk",
	.max_len = DP_MAX_POST,
	.ctx_create = dp_ctx_create,
	.ctx_destroy = dp_ctx_destroy,
	.mr_reg = dp_mr_reg,
	.mr_dereg = dp_mr_dereg,
	.listen = dp_listen,
	.listener_addr = dp_listener_addr,
	.listener_close = dp_listener_close,
	.connect = dp_connect,
	.adopt = NULL,
	.ep_close = dp_ep_close,
	.ep_grant = dp_ep_grant,
	.ep_peer = dp_ep_peer,
	.post_write_imm = dp_post_write_imm,
	.post_read = dp_post_read,
	.post_send = dp_post_send,
	.post_recv = dp_post_recv,
	.poll = dp_poll,
	.fd = dp_fd,
};
