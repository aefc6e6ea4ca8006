/* SPDX-License-Identifier: Apache-2.0 */
/*
 * command.c - the public face of what the kanel command needs (kanel.h,
 * "The kanel command's API"): the job configuration as an opaque
 * struct kn_config over config.h's, the coordinator's and the servers'
 * entry points with the job secret loaded for them, and the imbalance
 * models of sync/imbalance.h with their workers' state.  Thin wrappers:
 * parsing, the roles and the models stay where they are; this file only
 * allocates, converts and checks arguments, so that tools/ and any other
 * program can start a job's processes through kanel.h alone.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "auth.h"
#include "config.h"
#include "imbalance.h"
#include "kanel.h"
#include "roles.h"

struct kn_config {
	struct kn__config c;
};

int kn_config_parse(const struct kn_config_scope *scope, int argc, char **argv,
		    char *err, size_t errlen, struct kn_config **cfg)
{
	struct kn__config_scope sc;
	struct kn_config *c;
	int ret;

	if (err && errlen)
		err[0] = '\0';
	if (!cfg)
		return -EINVAL;
	c = malloc(sizeof(*c));
	if (!c)
		return -ENOMEM;
	if (scope)
		sc = (struct kn__config_scope){
			.command = scope->command,
			.options = scope->options,
			.role = (enum kn__role)scope->role
		};
	ret = kn__config_parse_as(scope ? &sc : NULL, argc, argv, NULL, &c->c,
				  err, errlen);
	if (ret) {
		free(c);
		return ret;
	}
	*cfg = c;
	return 0;
}

void kn_config_destroy(struct kn_config *cfg)
{
	free(cfg);
}

void kn_config_usage(FILE *out, unsigned int options)
{
	kn__config_usage_of(out, options);
}

int kn_config_help(const struct kn_config *cfg)
{
	return cfg && cfg->c.help;
}

enum kn_role kn_config_role(const struct kn_config *cfg)
{
	return cfg ? (enum kn_role)cfg->c.role : (enum kn_role)0;
}

unsigned int kn_config_rank(const struct kn_config *cfg)
{
	return cfg ? cfg->c.rank : 0;
}

int kn_config_verbose(const struct kn_config *cfg)
{
	return cfg && cfg->c.verbose;
}

const char *kn_config_metrics(const struct kn_config *cfg)
{
	return cfg && cfg->c.metrics[0] ? cfg->c.metrics : NULL;
}

void kn__job_info(const struct kn__config *c, struct kn_job_info *info)
{
	bool sum = c->optimizer == KN__CONFIG_SUM;
	/* AUTO, not settled yet: what a program without its own gets */
	enum kn__config_optimizer o =
		c->optimizer == KN__CONFIG_AUTO ? KN__CONFIG_SGD : c->optimizer;

	*info = (struct kn_job_info){
		.protocol = (enum kn_sync)c->sync,
		.protocol_name = kn__sync_protocol_name(c->sync),
		.optimizer = sum ? KN_OPT_SGD : (enum kn_optimizer)o,
		.summation = sum,
		.local_steps = kn__job_deltas((uint32_t)c->sync, (uint32_t)o),
		.lr = c->lr,
		.momentum = c->momentum,
		.workers = c->workers,
		.servers = c->servers,
		.staleness = c->proto.staleness,
		.max_skip = c->proto.max_skip,
		.gamma = c->proto.gamma,
		.theta = c->proto.theta,
		.max_steps = c->proto.max_steps,
		.warmup = c->proto.warmup,
		.alpha = c->proto.alpha,
		.miss = c->proto.miss,
		.bound = c->proto.bound,
		.outer_lr = c->proto.outer_lr,
		.outer_momentum = c->proto.outer_momentum,
	};
	for (uint32_t i = 0; i < KN__SYNC_PARAMS_WORDS; i++)
		info->params[i] = kn__sync_param_value(&c->proto, i);
}

int kn_config_job(const struct kn_config *cfg, struct kn_job_info *info)
{
	if (!cfg || !info)
		return -EINVAL;
	kn__job_info(&cfg->c, info);
	return 0;
}

int kn_config_export(const struct kn_config *cfg, unsigned int options)
{
	return cfg ? kn__config_export(&cfg->c, options) : -EINVAL;
}

/* Resolve @a, or say why not, naming it: 0 or a negative errno. */
static int check_address(const char *what, const struct kn__config_addr *a,
			 char *err, size_t errlen)
{
	struct sockaddr_storage ss;
	bool v6 = strchr(a->host, ':') != NULL;
	socklen_t len;
	int ret = kn__config_resolve(a, &ss, &len);

	if (ret && err && errlen)
		snprintf(err, errlen, "%s %s%s%s:%u: %s", what, v6 ? "[" : "",
			 a->host, v6 ? "]" : "", (unsigned int)a->port,
			 kn__config_resolve_strerror(a, ret));
	return ret;
}

int kn_config_check_addresses(const struct kn_config *cfg, char *err,
			      size_t errlen)
{
	int ret;

	if (err && errlen)
		err[0] = '\0';
	if (!cfg)
		return -EINVAL;
	ret = check_address("the coordinator's address", &cfg->c.coordinator,
			    err, errlen);
	if (!ret && cfg->c.role == KN__ROLE_SERVER)
		ret = check_address("--listen", &cfg->c.listen, err, errlen);
	return ret;
}

/* The secret, the addresses, then the role until the job ends. */
static int run_role(const struct kn_config *cfg, enum kn__role role, char *err,
		    size_t errlen)
{
	uint8_t secret[KN_AUTH_SECRET_MAX];
	const struct kn__config *c;
	size_t len;
	int ret;

	if (err && errlen)
		err[0] = '\0';
	if (!cfg)
		return -EINVAL;
	c = &cfg->c;
	if (c->role != role) {
		if (err && errlen)
			snprintf(err, errlen,
				 "the configuration is a %s's, not a %s's",
				 kn__role_name(c->role), kn__role_name(role));
		return -EINVAL;
	}
	ret = kn__auth_load_secret(c->secret_file[0] ? c->secret_file : NULL,
				   NULL, secret, sizeof(secret), &len, err,
				   errlen);
	if (ret)
		return ret;
	ret = kn_config_check_addresses(cfg, err, errlen);
	if (!ret) {
		ret = role == KN__ROLE_COORDINATOR
			      ? kn__coordinator_run(c, secret, len)
			      : kn__server_run(c, secret, len);
		/* the engine logged it; an empty @err says so */
		if (ret && err && errlen)
			err[0] = '\0';
	}
	kn__auth_wipe(secret, sizeof(secret));
	return ret;
}

int kn_run_coordinator(const struct kn_config *cfg, char *err, size_t errlen)
{
	return run_role(cfg, KN__ROLE_COORDINATOR, err, errlen);
}

int kn_run_server(const struct kn_config *cfg, char *err, size_t errlen)
{
	return run_role(cfg, KN__ROLE_SERVER, err, errlen);
}

const char *kn_optimizer_name(enum kn_optimizer opt)
{
	/* the names of config_table.c's table; "sum" is not an optimizer */
	switch (opt) {
	case KN_OPT_SGD:
	case KN_OPT_MOMENTUM:
	case KN_OPT_ADAM:
		return kn__config_optimizer_name(
			(enum kn__config_optimizer)opt);
	}
	return NULL;
}

/* ---- imbalance models ---- */

struct kn_imbalance {
	struct kn__imb m;
	char name[16]; /* the kind: the canonical spec up to its first ':' */
	unsigned int workers;
	struct kn__imb_worker w[]; /* one per worker, in rank order */
};

int kn_imbalance_parse(const char *spec, uint64_t seed, unsigned int workers,
		       char *err, size_t errlen, struct kn_imbalance **model)
{
	struct kn_imbalance *im;
	struct kn__imb m;
	char canon[128];
	int ret;

	if (err && errlen)
		err[0] = '\0';
	if (!spec || !model)
		return -EINVAL;
	ret = kn__imb_parse(spec, seed, &m, err, err ? errlen : 0);
	if (ret)
		return ret;
	im = calloc(1, sizeof(*im) + (size_t)workers * sizeof(im->w[0]));
	if (!im)
		return -ENOMEM;
	im->m = m;
	im->workers = workers;
	if (kn__imb_format(&m, canon, sizeof(canon)) < 0)
		canon[0] = '\0';
	canon[strcspn(canon, ":")] = '\0';
	snprintf(im->name, sizeof(im->name), "%s", canon);
	for (unsigned int r = 0; r < workers; r++) {
		ret = kn__imb_worker_init(&m, r, workers, &im->w[r]);
		if (ret) {
			/* the one refusal that needs the count: K > n */
			if (err && errlen)
				snprintf(err, errlen,
					 "%s K %u is more than the %u worker%s",
					 im->name, m.k, workers,
					 workers == 1 ? "" : "s");
			free(im);
			return ret;
		}
	}
	*model = im;
	return 0;
}

int kn_imbalance_format(const struct kn_imbalance *model, char *buf, size_t cap)
{
	if (!model || (!buf && cap))
		return -EINVAL;
	return kn__imb_format(&model->m, buf, cap);
}

const char *kn_imbalance_name(const struct kn_imbalance *model)
{
	return model ? model->name : NULL;
}

double kn_imbalance_factor(struct kn_imbalance *model, unsigned int worker,
			   double t)
{
	if (!model || worker >= model->workers)
		return NAN;
	return kn__imb_factor(&model->m, &model->w[worker], t);
}

void kn_imbalance_destroy(struct kn_imbalance *model)
{
	free(model);
}
