/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_net.c - a job whose links misbehave: each worker in a network
 * namespace of its own, the coordinator and the server in this one, as
 * tests/net/netns.sh lays them out (it runs in the rxe VM, whose kernel
 * has veth and netem).  One worker is cut off for 10 s while the others
 * go on; it must be removed, the others must not wait for it, and once
 * the link heals it must rejoin and finish.  Without netns.sh's
 * namespaces every test skips, naming the suite that runs them.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kanel.h"
#include "job_util.h"

#define LEN	2000
#define CUT	2 /* the worker cut off */
#define CUT_S	10
#define STEP_US 50000
#define MAX_S	90 /* a worker's own deadline */
#define REJOINS 5

/* The test's word to the workers, in the shared page's last row. */
#define FLAGS	 sh->values[MAXW - 1]
#define F_CUT	 0 /* the link is cut */
#define F_HEALED 1 /* and healed again */
#define F_BACK	 2 /* the cut-off worker made 5 steps after its rejoin */

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static volatile float *flag(int i)
{
	return &FLAGS[i];
}

/*
 * BSP steps 50 ms apart until the cut-off worker is back and has made 5
 * steps, rejoining whenever a step fails.  Reported: the steps made
 * while the link was cut, the rejoins, all steps.
 */
static int net_worker(unsigned int rank)
{
	float *p = malloc(LEN * 4), *g = malloc(LEN * 4);
	struct kn_worker *w = NULL;
	unsigned int rejoins = 0, during = 0, steps = 0, after = 0;
	double t0 = now();
	int ret = p && g ? 0 : -ENOMEM;

	for (size_t i = 0; i < LEN; i++)
		p[i] = 1;
	while (!ret) {
		if (now() - t0 > MAX_S) {
			ret = -ETIMEDOUT;
			break;
		}
		if (!w) {
			w = join(rank);
			ret = w ? kn_worker_register(w, "p", KN_DTYPE_FP32, LEN,
						     p, g)
				: -ENOMEM;
			if (!ret)
				ret = kn_worker_start(w);
			if (ret && rejoins < REJOINS) {
				/* not back yet: the link may still be cut */
				kn_worker_destroy(w);
				w = NULL;
				rejoins++;
				ret = 0;
				usleep(500000);
				continue;
			}
			if (ret)
				break;
		}
		for (size_t i = 0; i < LEN; i++)
			g[i] = 0.001f;
		usleep(STEP_US);
		ret = kn_worker_step(w, NULL);
		if (ret && rejoins < REJOINS) {
			kn_worker_destroy(w);
			w = NULL;
			rejoins++;
			ret = 0;
			continue;
		}
		if (ret)
			break;
		steps++;
		if (*flag(F_CUT) && !*flag(F_HEALED))
			during++;
		if (rank == CUT && rejoins && ++after >= 5) {
			*flag(F_BACK) = 1;
			break;
		}
		if (rank != CUT && *flag(F_BACK))
			break;
	}
	sh->values[rank][0] = (float)during;
	sh->values[rank][1] = (float)rejoins;
	sh->values[rank][2] = (float)steps;
	kn_worker_destroy(w);
	free(p);
	free(g);
	return ret;
}

/* Drop every packet both ways between worker @rank and the rest, or
 * (@cut false) give the link back its 20 ms delay. */
static void set_link(unsigned int rank, bool cut)
{
	const char *ifp = getenv("KANEL_TEST_NET_IF");
	const char *ns = getenv("KANEL_TEST_WORKER_NETNS");
	const char *q = cut ? "loss 100%" : "delay 20ms";
	char cmd[256];

	snprintf(cmd, sizeof(cmd),
		 "tc qdisc change dev %s%u root netem %s && "
		 "ip netns exec %s%u tc qdisc change dev %s%u root netem %s",
		 ifp, rank, q, ns, rank, ns, rank, q);
	cr_assert_eq(system(cmd), 0, "%s", cmd);
}

Test(net, a_cut_off_worker_is_removed_and_rejoins_once_healed, .timeout = 240)
{
	struct job j = { 0 };

	if (!getenv("KANEL_TEST_NET_IF") || !getenv("KANEL_TEST_WORKER_NETNS"))
		cr_skip_test("needs the namespaces of tests/net/netns.sh (the "
			     "net suite runs it in the rxe VM)");
	job_env(&j, 3, 1, "bsp", "sgd", "0.01");
	start_job(&j);
	memset(sh->values, 0, sizeof(sh->values));
	for (unsigned int w = 0; w < 3; w++)
		spawn_worker(&j, w, net_worker);
	sleep(2);
	set_link(CUT, true);
	*flag(F_CUT) = 1;
	sleep(CUT_S);
	set_link(CUT, false);
	*flag(F_HEALED) = 1;
	end_job(&j, true);
	for (unsigned int w = 0; w < 3; w++) {
		cr_expect_eq(sh->status[w], 0, "worker %u: %s", w,
			     strerror(-sh->status[w]));
		fprintf(stderr,
			"worker %u: %.0f steps, %.0f while cut off, %.0f "
			"rejoins, %.1f s\n",
			w, (double)sh->values[w][2], (double)sh->values[w][0],
			(double)sh->values[w][1], sh->seconds[w]);
	}
	/* the others went on: 10 s at 50 ms a step, less the heartbeat
	 * timeout (1 s) they waited for the cut-off one */
	for (unsigned int w = 0; w < 3; w++)
		if (w != CUT)
			cr_expect_geq(sh->values[w][0], 40,
				      "worker %u waited for the cut-off one",
				      w);
	cr_expect_geq(sh->values[CUT][1], 1,
		      "the cut-off worker never "
		      "rejoined");
	cr_expect_eq(*flag(F_BACK), 1, "the cut-off worker never came back");
}
