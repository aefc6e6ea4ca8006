/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mr.c - the verbs provider's memory: registrations (one per range and
 * rights, shared by every region over it), the RLIMIT_MEMLOCK
 * accounting of what the process pins, and grants, which open a range
 * to one endpoint's peer: a type-2 memory window bound on that
 * endpoint's queue pair (a BIND_MW operation, posted through
 * datapath.c), or without windows a registration of just the range.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "verbs_priv.h"

static bool has_cap_ipc_lock(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	bool yes = false;

	if (!f)
		return false;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long caps;

		if (sscanf(line, "CapEff: %llx", &caps) == 1) {
			yes = caps & (1ull << 14); /* CAP_IPC_LOCK */
			break;
		}
	}
	fclose(f);
	return yes;
}

/* bytes registered by every verbs context of the process */
static _Atomic size_t locked_bytes;

static const char memlock_advice[] =
	"raise RLIMIT_MEMLOCK: `ulimit -l unlimited` in the shell, "
	"LimitMEMLOCK=infinity for a systemd unit, a memlock line in "
	"/etc/security/limits.conf, or `--ulimit memlock=-1` for a container";

/*
 * Registered memory is pinned and counts against RLIMIT_MEMLOCK unless
 * the process may lock any amount; say so here, with the fix, rather than
 * let ibv_reg_mr fail with a bare ENOMEM.
 */
int kn__verbs_memlock_check(size_t len)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_MEMLOCK, &rl) || rl.rlim_cur == RLIM_INFINITY ||
	    has_cap_ipc_lock())
		return 0;
	if (atomic_load(&locked_bytes) + len <= rl.rlim_cur)
		return 0;
	vlog("registering %zu bytes would pin %zu bytes in all, above "
	     "RLIMIT_MEMLOCK (%llu bytes): %s",
	     len, atomic_load(&locked_bytes) + len,
	     (unsigned long long)rl.rlim_cur, memlock_advice);
	return -ENOMEM;
}

void kn__verbs_memlock_warn_once(void)
{
	static bool warned;
	struct rlimit rl;

	if (warned || getrlimit(RLIMIT_MEMLOCK, &rl) ||
	    rl.rlim_cur == RLIM_INFINITY || has_cap_ipc_lock())
		return;
	warned = true;
	vlog("RLIMIT_MEMLOCK is %llu KiB, so at most that much memory can be "
	     "registered; to register more, %s",
	     (unsigned long long)rl.rlim_cur / 1024, memlock_advice);
}

struct ibv_mr *kn__verbs_reg_private(struct vctx *c, void *p, size_t len,
				     int access)
{
	struct ibv_mr *mr = ibv_reg_mr(c->pd, p, len, access);

	if (mr)
		atomic_fetch_add(&locked_bytes, len);
	return mr;
}

void kn__verbs_dereg_private(struct ibv_mr *mr)
{
	if (mr) {
		atomic_fetch_sub(&locked_bytes, mr->length);
		ibv_dereg_mr(mr);
	}
}

/* ---- memory regions ---- */

/* Remote rights as verbs spells them. */
static int ibv_remote(uint32_t access)
{
	return (access & KN_TP_REMOTE_WRITE ? IBV_ACCESS_REMOTE_WRITE : 0) |
	       (access & KN_TP_REMOTE_READ ? IBV_ACCESS_REMOTE_READ : 0);
}

/*
 * A registration never has remote rights of its own: peers reach only
 * grants (windows bound over it, or registrations of their ranges).
 */
static int ibv_access(const struct vctx *c, uint32_t access)
{
	return IBV_ACCESS_LOCAL_WRITE |
	       (access && c->mw2 ? IBV_ACCESS_MW_BIND : 0);
}

/*
 * A live registration @addr/@len can share: the same range and rights,
 * or, for local-only use, any local-only registration that holds it
 * (it exposes nothing to peers).  Idle registrations are not kept: the
 * allocator may hand the same addresses out over other pages.
 */
static struct reg *reg_find(struct vctx *c, char *addr, size_t len,
			    uint32_t access)
{
	for (struct reg *r = c->regs; r; r = r->next) {
		if (r->access != access)
			continue;
		if (r->addr == addr && r->len == len)
			return r;
		if (access == 0 && r->mr && addr >= r->addr && len <= r->len &&
		    (size_t)(addr - r->addr) <= r->len - len)
			return r;
	}
	return NULL;
}

int kn__verbs_mr_reg(struct kn__tp_ctx *ctx, void *addr, size_t len,
		     uint32_t access, struct kn__tp_mr **out)
{
	struct vctx *c = vctx_of(ctx);
	struct reg *r = reg_find(c, addr, len, access);
	struct vmr *m = calloc(1, sizeof(*m));
	int ret;

	if (!m)
		return -ENOMEM;
	if (!r) {
		r = calloc(1, sizeof(*r));
		if (!r) {
			free(m);
			return -ENOMEM;
		}
		r->addr = addr;
		r->len = len;
		r->access = access;
		if (len) {
			ret = kn__verbs_memlock_check(len);
			if (!ret) {
				r->mr = kn__verbs_reg_private(
					c, addr, len, ibv_access(c, access));
				if (!r->mr) {
					ret = errno ? -errno : -ENOMEM;
					vlog("ibv_reg_mr of %zu bytes: %s", len,
					     strerror(-ret));
				}
			}
			if (ret) {
				free(r);
				free(m);
				return ret;
			}
		}
		r->next = c->regs;
		c->regs = r;
	}
	r->refs++;
	m->base.ctx = ctx;
	m->base.addr = addr;
	m->base.len = len;
	m->base.access = access;
	m->reg = r;
	kn__list_push(&c->mrs, &m->link);
	*out = &m->base;
	return 0;
}

void kn__verbs_mr_dereg(struct kn__tp_mr *mr)
{
	struct vmr *m = (struct vmr *)mr;
	struct vctx *c = vctx_of(mr->ctx);
	struct reg *r = m->reg;

	kn__list_del(&m->link);
	free(m);
	if (--r->refs)
		return;
	for (struct reg **p = &c->regs; *p; p = &(*p)->next)
		if (*p == r) {
			*p = r->next;
			break;
		}
	kn__verbs_grants_drop(c, NULL, r); /* windows over it go first */
	kn__verbs_dereg_private(r->mr);
	free(r);
}

static void grant_free(struct vgrant *g)
{
	if (g->mw) /* first: a registration with a window bound stays busy */
		ibv_dealloc_mw(g->mw);
	if (g->mr)
		ibv_dereg_mr(g->mr);
	free(g);
}

/* Free the grants of @ep (NULL: any) on @reg (NULL: any). */
void kn__verbs_grants_drop(struct vctx *c, const struct vep *ep,
			   const struct reg *reg)
{
	for (struct vgrant **p = &c->grants; *p;) {
		struct vgrant *g = *p;

		if ((!ep || g->ep == ep) && (!reg || g->reg == reg)) {
			*p = g->next;
			grant_free(g);
		} else {
			p = &g->next;
		}
	}
}

/*
 * Open [@addr, +@len) of @mr to @ep's peer with the remote rights
 * @access (IBV_ACCESS_REMOTE_*): a type-2 window bound to @ep's queue
 * pair (its BIND_MW goes before anything posted after it), or without
 * windows a registration of the range.  The rkey in *@rkey.
 */
int kn__verbs_grant_new(struct vep *ep, struct reg *reg, struct ibv_mr *mr,
			char *addr, uint64_t len, int access, uint32_t *rkey)
{
	struct vctx *c = ep_ctx(ep);
	struct vgrant *g = calloc(1, sizeof(*g));
	struct vop *op;
	uint8_t salt;
	int err = 0;

	if (!g)
		return -ENOMEM;
	g->ep = ep;
	g->reg = reg;
	if (!c->mw2) {
		g->mr = ibv_reg_mr(c->pd, addr, len,
				   IBV_ACCESS_LOCAL_WRITE | access);
		if (!g->mr) {
			err = errno ? -errno : -ENOMEM;
			goto fail;
		}
		*rkey = g->mr->rkey;
		goto done;
	}
	op = kn__verbs_op_new(ep, VOP_BIND, &err);
	if (!op)
		goto fail;
	if (addr != (char *)mr->addr || len != mr->length) {
		/*
		 * Part of a region: the window goes over a registration of
		 * just that part, so that the range is enforced whether the
		 * device checks a window's bounds or (rxe on Linux 6.1)
		 * only those of the registration under it.
		 */
		g->mr = ibv_reg_mr(c->pd, addr, len,
				   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
		if (!g->mr) {
			err = errno ? -errno : -ENOMEM;
			goto fail;
		}
		mr = g->mr;
	}
	g->mw = ibv_alloc_mw(c->pd, IBV_MW_TYPE_2);
	if (!g->mw) {
		err = errno ? -errno : -ENOMEM;
		goto fail;
	}
	/* the window's index, with a key byte nobody can predict */
	err = kn__tp_random(&salt, sizeof(salt));
	if (err)
		goto fail;
	op->rkey = (g->mw->rkey & ~0xffu) | salt;
	if (op->rkey == g->mw->rkey)
		op->rkey ^= 1;
	op->mw = g->mw;
	op->bind_mr = mr;
	op->laddr = addr;
	op->len = len;
	op->mw_access = (uint32_t)access;
	*rkey = op->rkey;
	kn__verbs_op_post(ep, op, NULL);
done:
	g->next = c->grants;
	c->grants = g;
	return 0;
fail:
	grant_free(g);
	return err;
}

int kn__verbs_ep_grant(struct kn__tp_ep *e, struct kn__tp_mr *mr, uint64_t off,
		       uint64_t len, uint32_t access,
		       struct kn__tp_rdesc *rdesc)
{
	struct vep *ep = vep_of(e);
	struct reg *r = ((struct vmr *)mr)->reg;
	uint32_t rkey = 0;
	int ret;

	if (ep->state == EP_ERROR)
		return -ENOTCONN;
	if (len) {
		ret = kn__verbs_grant_new(ep, r, r->mr, mr->addr + off, len,
					  ibv_remote(access), &rkey);
		if (ret)
			return ret;
	}
	*rdesc = (struct kn__tp_rdesc){ .addr = (uintptr_t)(mr->addr + off),
					.len = len,
					.key = rkey,
					.access = access };
	return 0;
}
