/* SPDX-License-Identifier: Apache-2.0 */
/*
 * worker.c - the worker library's public face, kanel.h's kn_worker_*, on
 * the application's side: create (the job joined), register, start,
 * post operations, the job's facts, destroy.  A call hands the progress
 * thread (worker_loop.c) its request under the lock and waits on the
 * condition variable (worker_base.c, where an operation's post, test and
 * wait are); kn_worker_step_done's rule is in worker_rule.c.
 * worker_priv.h says how the files fit.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "auth.h"
#include "roles.h"
#include "worker_priv.h"

/* ---- the application's side ---- */

static bool joined(struct kn_worker *w, uint64_t unused)
{
	(void)unused;
	return w->state >= WK_JOINED && w->state != WK_FAILED;
}

static bool running(struct kn_worker *w, uint64_t unused)
{
	(void)unused;
	return w->state == WK_RUNNING;
}

static pthread_mutex_t parse_lock = PTHREAD_MUTEX_INITIALIZER;

/*
 * Whether this process takes its role and rank from the launcher's rank
 * (Open MPI's, Slurm's), as the kanel command does: no rank given, by
 * the options or KANEL_RANK, and no KANEL_ROLE.
 */
static bool role_from_launcher(const struct kn_worker_options *opt)
{
	if ((opt && opt->rank >= 0) || getenv("KANEL_RANK") ||
	    getenv("KANEL_ROLE"))
		return false;
	return getenv("OMPI_COMM_WORLD_RANK") || getenv("SLURM_PROCID");
}

static int options(const struct kn_worker_options *opt, struct kn__config *cfg)
{
	char rank[16], timeout[16], err[256];
	char *argv[16] = { "kanel-worker", "--role", "worker" };
	bool launcher = role_from_launcher(opt);
	int argc = launcher ? 1 : 3, ret;

	if (opt && opt->coordinator) {
		argv[argc++] = "--coordinator";
		argv[argc++] = (char *)opt->coordinator;
	}
	if (opt && opt->transport) {
		argv[argc++] = "--transport";
		argv[argc++] = (char *)opt->transport;
	}
	if (opt && opt->secret_file) {
		argv[argc++] = "--secret-file";
		argv[argc++] = (char *)opt->secret_file;
	}
	if (opt && opt->rank >= 0) {
		snprintf(rank, sizeof(rank), "%d", opt->rank);
		argv[argc++] = "--rank";
		argv[argc++] = rank;
	}
	if (opt && opt->timeout_ms) {
		snprintf(timeout, sizeof(timeout), "%ums", opt->timeout_ms);
		argv[argc++] = "--startup-timeout";
		argv[argc++] = timeout;
	}
	/* getopt's state is the process's: one parse at a time */
	pthread_mutex_lock(&parse_lock);
	ret = kn__config_parse(argc, argv, NULL, cfg, err, sizeof(err));
	pthread_mutex_unlock(&parse_lock);
	if (ret)
		kn__log_as("worker", "%s", err);
	else if (cfg->role != KN__ROLE_WORKER) {
		kn__log_as("worker",
			   "%s makes this process the job's %s, not a "
			   "worker: start the kanel command on it "
			   "(docs/engine.md, the role script)",
			   cfg->role_source,
			   cfg->role == KN__ROLE_COORDINATOR ? "coordinator"
							     : "server");
		ret = -EINVAL;
	}
	return ret;
}

int kn_worker_create(const struct kn_worker_options *opt,
		     struct kn_worker **out)
{
	struct kn_worker *w = calloc(1, sizeof(*w));
	int ret;

	if (!w)
		return -ENOMEM;
	w->wake = -1;
	w->own_optimizer = opt && opt->own_optimizer;
	ret = options(opt, &w->cfg);
	if (!ret) {
		char err[512];

		ret = kn__auth_load_secret(
			w->cfg.secret_file[0] ? w->cfg.secret_file : NULL, NULL,
			w->secret, sizeof(w->secret), &w->secret_len, err,
			sizeof(err));
		if (ret)
			kn__log_as("worker", "%s", err);
	}
	if (!ret) {
		ret = kn__config_resolve(&w->cfg.coordinator, &w->coord_addr,
					 &w->coord_len);
		if (ret)
			kn__log_as("worker",
				   "the coordinator's address %s:%u: %s",
				   w->cfg.coordinator.host,
				   w->cfg.coordinator.port,
				   kn__config_resolve_strerror(
					   &w->cfg.coordinator, ret));
	}
	if (ret) {
		free(w);
		return ret;
	}
	ret = kn__node_init(&w->node,
			    kn__config_transport_name(w->cfg.transport),
			    KN__ROLE_WORKER, w->cfg.rank, w->secret,
			    w->secret_len, &kn__wk_ops, w);
	if (ret) {
		free(w);
		return ret;
	}
	w->node.verbose = w->cfg.verbose;
	w->node.news = &w->news;
	w->node.retry_until = kn__now() + w->cfg.startup_timeout_ms / 1000.0;
	w->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cond, NULL);
	ret = w->wake < 0 ? -errno : 0;
	if (!ret)
		ret = -pthread_create(&w->thread, NULL, kn__wk_progress, w);
	if (ret) {
		kn__node_fini(&w->node);
		if (w->wake >= 0)
			close(w->wake);
		free(w);
		return ret;
	}
	pthread_mutex_lock(&w->lock);
	ret = kn__wk_wait_for(w, joined, 0, (int)w->cfg.startup_timeout_ms,
			      "waiting for the coordinator and the servers");
	w->local =
		kn__job_deltas(w->job.u.job.protocol, w->job.u.job.optimizer);
	pthread_mutex_unlock(&w->lock);
	if (ret) {
		kn_worker_destroy(w);
		return ret;
	}
	*out = w;
	return 0;
}

int kn_worker_register(struct kn_worker *w, const char *key,
		       enum kn_dtype dtype, size_t count, void *params,
		       void *grads)
{
	struct wk_tensor *t;
	int ret = 0;

	if (!w || !key || !params || !grads || !count ||
	    !kn_dtype_size(dtype) || strlen(key) >= KN__KEY_MAX)
		return -EINVAL;
	if (!strncmp(key, FUSED_PREFIX, strlen(FUSED_PREFIX))) {
		kn__log_as("worker",
			   "tensor key '%s': keys starting '" FUSED_PREFIX
			   "' name the engine's fused groups",
			   key);
		return -EINVAL;
	}
	pthread_mutex_lock(&w->lock);
	for (uint32_t i = 0; i < w->ntensors; i++)
		if (strcmp(w->tensors[i].d.key, key) == 0)
			ret = -EEXIST;
	if (!ret && w->state != WK_JOINED)
		ret = w->state == WK_FAILED ? w->error : -EBUSY;
	if (!ret) {
		t = realloc(w->tensors, (w->ntensors + 1) * sizeof(*t));
		if (!t) {
			ret = -ENOMEM;
		} else {
			w->tensors = t;
			t += w->ntensors++;
			memset(t, 0, sizeof(*t));
			strcpy(t->d.key, key);
			t->d.dtype = dtype;
			t->d.len = count;
			t->params = params;
			t->grads = grads;
			t->priority = w->next_priority++;
			if (w->local)
				ret = kn__wk_local_buffers(
					t, w->job.u.job.optimizer);
			if (ret)
				w->ntensors--;
		}
	}
	pthread_mutex_unlock(&w->lock);
	return ret;
}

int kn_worker_set_inbox(struct kn_worker *w, const char *key, void *inbox)
{
	int ret = -ENOENT;

	if (!w || !key || !inbox)
		return -EINVAL;
	if (w->local) {
		kn__log_as("worker",
			   "the job runs %s: the engine "
			   "keeps the inbox itself (kn_worker_step_done)",
			   kn__sync_protocol_name(w->job.u.job.protocol));
		return -EINVAL;
	}
	pthread_mutex_lock(&w->lock);
	for (uint32_t i = 0; i < w->ntensors; i++)
		if (strcmp(w->tensors[i].d.key, key) == 0) {
			w->tensors[i].inbox = inbox;
			ret = 0;
		}
	if (!ret && w->state != WK_JOINED)
		ret = -EBUSY;
	pthread_mutex_unlock(&w->lock);
	return ret;
}

int kn_worker_set_priority(struct kn_worker *w, const char *key, int priority)
{
	int ret = -ENOENT;

	if (!w || !key)
		return -EINVAL;
	pthread_mutex_lock(&w->lock);
	for (uint32_t i = 0; i < w->ntensors; i++)
		if (strcmp(w->tensors[i].d.key, key) == 0) {
			ret = w->state == WK_JOINED ? 0 : -EBUSY;
			if (!ret)
				w->tensors[i].priority = priority;
		}
	pthread_mutex_unlock(&w->lock);
	return ret;
}

/*
 * A BSP job under --optimizer sum has started: the servers' answers land
 * in the gradient buffers, the initial model too.  It becomes the
 * parameters, and the gradients start from zero again (autograd adds
 * into them).
 */
static void sum_start(struct kn_worker *w)
{
	for (uint32_t i = 0; i < w->ntensors; i++) {
		struct wk_tensor *t = &w->tensors[i];
		size_t bytes = t->d.len * kn_dtype_size(t->d.dtype);

		if (t->nmembers || t->inbox)
			continue;
		memcpy(t->params, t->grads, bytes);
		memset(t->grads, 0, bytes);
	}
	for (uint32_t i = 0; i < w->nmembers; i++) {
		struct wk_member *m = &w->members[i];
		size_t bytes = m->d.len * kn_dtype_size(m->d.dtype);

		if (m->inbox)
			continue;
		memcpy(m->params, m->grads, bytes);
		memset(m->grads, 0, bytes);
	}
}

int kn_worker_start(struct kn_worker *w)
{
	int ret = 0;

	pthread_mutex_lock(&w->lock);
	if (w->state != WK_JOINED || !w->ntensors) {
		ret = w->state == WK_FAILED ? w->error : -EINVAL;
		pthread_mutex_unlock(&w->lock);
		return ret;
	}
	qsort(w->tensors, w->ntensors, sizeof(*w->tensors), kn__wk_by_key);
	/* local-step jobs push whole-model deltas of their own buffers */
	if (!w->local && w->job.u.job.fuse_bytes && !w->members)
		ret = kn__wk_fuse(w);
	if (!ret && !w->keys)
		ret = kn__wk_keys_build(w);
	if (ret) {
		pthread_mutex_unlock(&w->lock);
		return ret;
	}
	w->start_requested = true;
	kn__wk_wake(w);
	ret = kn__wk_wait_for(
		w, running, 0, (int)w->cfg.startup_timeout_ms,
		"starting: waiting for the servers, the model and "
		"the other workers");
	pthread_mutex_unlock(&w->lock);
	if (!ret && w->local)
		ret = kn__wk_local_start(w);
	else if (!ret &&
		 kn__job_sums(w->job.u.job.protocol, w->job.u.job.optimizer))
		sum_start(w);
	w->step_return = kn__now();
	return ret;
}

/*
 * ESP and PSP workers take local steps and push model deltas: a program
 * that pushes gradients itself would train as no protocol says, so it is
 * told at its first try.
 */
static int refuse_local(struct kn_worker *w)
{
	if (!w->told_local)
		kn__log(&w->node,
			"the job runs %s, whose workers push model deltas: "
			"train with kn_worker_step_done() (after each step), "
			"not with push, pull or kn_worker_step "
			"(docs/engine.md)",
			kn__sync_protocol_name(w->job.u.job.protocol));
	w->told_local = true;
	return -EPROTO;
}

/* The program's own operations: not under a local-step protocol. */
static int post(struct kn_worker *w, const char *key, bool push, bool pull,
		uint64_t *handle)
{
	if (!w || !handle)
		return -EINVAL;
	if (w->local)
		return refuse_local(w);
	return kn__wk_post_op(w, key, push, pull, handle);
}

int kn_worker_push(struct kn_worker *w, const char *key, uint64_t *handle)
{
	return post(w, key, true, false, handle);
}

int kn_worker_pull(struct kn_worker *w, const char *key, uint64_t *handle)
{
	return post(w, key, false, true, handle);
}

int kn_worker_pushpull(struct kn_worker *w, const char *key, uint64_t *handle)
{
	return post(w, key, true, true, handle);
}

int kn_worker_step(struct kn_worker *w, const char *key)
{
	double t = kn__now();
	uint64_t h;
	int ret = kn_worker_pushpull(w, key, &h);

	/* CGP groups workers by their compute time: the time since the
	 * last step returned, as kn_worker_step_done takes it */
	if (!ret &&
	    kn__sync_traits(w->job.u.job.protocol)->timing ==
		    KN__SYNC_TIMING_PLANNER &&
	    !key && w->step_return > 0)
		ret = kn__wk_report_timing(w, t - w->step_return);
	if (!ret)
		ret = kn_worker_wait(w, h, -1);
	w->step_return = kn__now();
	return ret;
}

uint64_t kn_worker_clock(const struct kn_worker *w)
{
	return w->clock;
}

unsigned int kn_worker_rank(const struct kn_worker *w)
{
	return w->cfg.rank;
}

unsigned int kn_worker_size(const struct kn_worker *w)
{
	return w->job.u.job.workers;
}

int kn_worker_job(const struct kn_worker *w, struct kn_job_info *info)
{
	struct kn__config c = { 0 };

	if (!w || !info)
		return -EINVAL;
	if (kn__msg_job_config(&w->job, &c))
		return -EAGAIN; /* not after kn_worker_create: it waits */
	kn__job_info(&c, info);
	return 0;
}

int kn_worker_global_model(struct kn_worker *w, const char *key, void *dst)
{
	const struct wk_tensor *t;
	uint32_t i;

	if (!w || !key || !dst)
		return -EINVAL;
	if (kn__wk_tensor_index(w, key, &i))
		return -ENOENT;
	if (i & MEMBER_BIT) {
		const struct wk_member *m = &w->members[i & ~MEMBER_BIT];

		memcpy(dst, m->params, m->d.len * kn_dtype_size(m->d.dtype));
		return 0;
	}
	t = &w->tensors[i];
	memcpy(dst, w->local && w->rule ? (const void *)t->anchor : t->params,
	       t->d.len * kn_dtype_size(t->d.dtype));
	return 0;
}

int kn_worker_finish(struct kn_worker *w)
{
	int ret = 0;

	if (!w)
		return -EINVAL;
	if (w->pending)
		ret = kn__wk_local_wait(w);
	if (ret)
		return ret;
	pthread_mutex_lock(&w->lock);
	w->finished = true;
	kn__wk_wake(w);
	pthread_mutex_unlock(&w->lock);
	return 0;
}

/* --metrics: one JSON line, as the servers write theirs. */
static void write_metrics(const struct kn_worker *w)
{
	const struct wk_stages *st = &w->stages;
	char line[1024];
	size_t n;
	int m, fd;

	m = snprintf(line, sizeof(line),
		     "{\"role\":\"worker\",\"rank\":%u,\"status\":%d,"
		     "\"stages\":{",
		     w->cfg.rank, w->state == WK_FAILED ? w->error : 0);
	n = m > 0 ? (size_t)m : sizeof(line);
	n = kn__hist_json(line, n, sizeof(line), "handoff", &st->handoff);
	n = kn__hist_json(line, n, sizeof(line), "send", &st->send);
	n = kn__hist_json(line, n, sizeof(line), "answer", &st->answer);
	n = kn__hist_json(line, n, sizeof(line), "wake", &st->wake);
	n = kn__hist_json(line, n, sizeof(line), "round", &st->round);
	if (n + 3 >= sizeof(line))
		return;
	n += (size_t)snprintf(line + n, sizeof(line) - n, "}}\n");
	fd = open(w->cfg.metrics, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC,
		  0644);
	if (fd < 0 || write(fd, line, n) != (ssize_t)n)
		kn__log_as("worker", "cannot write the figures to %s: %s",
			   w->cfg.metrics, strerror(errno));
	if (fd >= 0)
		close(fd);
}

void kn_worker_destroy(struct kn_worker *w)
{
	if (!w)
		return;
	pthread_mutex_lock(&w->lock);
	w->stop = true;
	kn__wk_wake(w);
	pthread_mutex_unlock(&w->lock);
	pthread_join(w->thread, NULL);
	if (w->cfg.metrics[0])
		write_metrics(w);
	for (uint32_t i = 0; i < MAX_OPS; i++)
		free(w->ops[i].targets);
	for (uint32_t i = 0; i < w->ntensors; i++) {
		kn__wk_local_free(&w->tensors[i]);
		kn__wk_fused_free(&w->tensors[i]);
	}
	kn__sync_worker_destroy(w->rule);
	free(w->keys);
	free(w->tensors);
	free(w->members);
	free(w->servers);
	free(w->chunks);
	free(w->order);
	free(w->place);
	free(w->ready);
	kn__layout_free(w->layout);
	close(w->wake);
	pthread_mutex_destroy(&w->lock);
	pthread_cond_destroy(&w->cond);
	kn__auth_wipe(w->secret, sizeof(w->secret));
	free(w);
}
