/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config_table.c - the job configuration of config.h: the option table, and
 * what is made from it (usage, export, the names of choices), and the
 * resolution of an address.
 *
 * One table describes every option: its flag, its variable, its default
 * (a string that goes through the option's own parser, so the default is
 * written once) and its help line, which kn__config_usage prints.  The
 * protocols' parameters are sync/'s table (kn__sync_param_table), read
 * as options of the job in the same places (kn__cfg_opt_at).  Values
 * are parsed one option at a time, flag before variable
 * (config_parse.c); what depends on several options (role, rank and
 * counts, the launcher's mapping) is settled afterwards, once every
 * value is known.
 */
#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_opt.h"

struct name_val {
	const char *name;
	int val;
};

static const struct name_val role_names[] = {
	{ "coordinator", KN__ROLE_COORDINATOR },
	{ "server", KN__ROLE_SERVER },
	{ "worker", KN__ROLE_WORKER },
};

static const struct name_val transport_names[] = {
	{ "tcp", KN__CONFIG_TCP },
	{ "verbs", KN__CONFIG_VERBS },
	{ "dpdk", KN__CONFIG_DPDK },
};

static const struct name_val optimizer_names[] = {
	{ "sgd", KN__CONFIG_SGD },   { "momentum", KN__CONFIG_MOMENTUM },
	{ "adam", KN__CONFIG_ADAM }, { "sum", KN__CONFIG_SUM },
	{ "auto", KN__CONFIG_AUTO },
};

#define NAMES_AT(table)                                          \
	static const char *table##_at(uint32_t i, uint32_t *val) \
	{                                                        \
		if (i >= ARRAY_SIZE(table))                      \
			return NULL;                             \
		*val = (uint32_t)table[i].val;                   \
		return table[i].name;                            \
	}

NAMES_AT(role_names)
NAMES_AT(transport_names)
NAMES_AT(optimizer_names)

/* The first name of @val, the one printed; NULL for none. */
static const char *name_of(names_fn *names, uint32_t val)
{
	const char *name;
	uint32_t v;

	for (uint32_t i = 0; (name = names(i, &v)); i++)
		if (v == val)
			return name;
	return NULL;
}

const char *kn__role_name(enum kn__role role)
{
	return name_of(role_names_at, (uint32_t)role);
}

const char *kn__config_transport_name(enum kn__config_transport t)
{
	return name_of(transport_names_at, (uint32_t)t);
}

const char *kn__config_optimizer_name(enum kn__config_optimizer o)
{
	return name_of(optimizer_names_at, (uint32_t)o);
}

static int opt_rank(struct parse *p, const char *src, const char *val)
{
	if (!kn__cfg_parse_u32(val, &p->cfg.rank, NULL))
		return kn__cfg_bad(p, "%s='%s': %s", src, val,
				   kn__cfg_not_u32(val));
	return 0;
}

static int opt_coordinator(struct parse *p, const char *src, const char *val)
{
	return kn__cfg_parse_addr(p, src, val, false, false,
				  &p->cfg.coordinator);
}

static int opt_listen(struct parse *p, const char *src, const char *val)
{
	return kn__cfg_parse_addr(p, src, val, true, true, &p->cfg.listen);
}

static int opt_chunk(struct parse *p, const char *src, const char *val)
{
	uint32_t bytes = 0;
	int ret = kn__cfg_parse_bytes(p, src, val, CHUNK_MIN, CHUNK_MAX,
				      "4K and 1024M", &bytes);

	if (ret)
		return ret;
	if (bytes % 4)
		return kn__cfg_bad(p, "%s='%s': not a multiple of 4 bytes", src,
				   val);
	p->cfg.chunk_bytes = bytes;
	return 0;
}

static int opt_fuse(struct parse *p, const char *src, const char *val)
{
	return kn__cfg_parse_bytes(p, src, val, 0, MIB, "0 (no fusion) and 1M",
				   &p->cfg.fuse_bytes);
}

static int opt_window(struct parse *p, const char *src, const char *val)
{
	return kn__cfg_parse_bytes(p, src, val, 0, CHUNK_MAX,
				   "0 (no limit) and 1024M",
				   &p->cfg.push_window);
}

static int opt_lr(struct parse *p, const char *src, const char *val)
{
	return kn__cfg_parse_float(p, src, val, 0, true, INFINITY, &p->cfg.lr);
}

static int opt_momentum(struct parse *p, const char *src, const char *val)
{
	return kn__cfg_parse_float(p, src, val, 0, false, 1, &p->cfg.momentum);
}

static int opt_heartbeat(struct parse *p, const char *src, const char *val)
{
	return kn__cfg_parse_duration(p, src, val, 1,
				      &p->cfg.heartbeat_timeout_ms);
}

static int opt_startup(struct parse *p, const char *src, const char *val)
{
	return kn__cfg_parse_duration(p, src, val, 1000,
				      &p->cfg.startup_timeout_ms);
}

static int opt_checkpoint_every(struct parse *p, const char *src,
				const char *val)
{
	return kn__cfg_parse_range(p, src, val, 1, UINT32_MAX,
				   &p->cfg.checkpoint_every);
}

/* --resume DIR: --checkpoint-dir DIR and --restore in one. */
static int opt_resume(struct parse *p, const char *src, const char *val)
{
	int ret = kn__cfg_parse_path(p, src, val, p->cfg.checkpoint_dir,
				     sizeof(p->cfg.checkpoint_dir));

	if (!ret)
		p->cfg.restore = true;
	return ret;
}

/* F_NAME reads an enum field as a uint32_t. */
_Static_assert(sizeof(enum kn__role) == sizeof(uint32_t) &&
		       sizeof(enum kn__config_transport) == sizeof(uint32_t) &&
		       sizeof(enum kn__config_optimizer) == sizeof(uint32_t),
	       "enum fields are read as uint32_t");

#define CHOICE(f) .names = f
#define FIELD(k, member)                                       \
	.kind = k, .off = offsetof(struct kn__config, member), \
	.size = sizeof(((struct kn__config *)0)->member)

static const struct opt opts[O_COUNT] = {
	[O_ROLE] = { "--role", "KANEL_ROLE", CHOICE(role_names_at),
		     .none = "default from the launcher",
		     .help = "what this process is",
		     .group = KN__CONFIG_OPT_ROLE, FIELD(F_NAME, role) },
	[O_RANK] = { "--rank", "KANEL_RANK", "R",
		     .none = "default from the launcher",
		     .help = "index within the role, from 0 (with --role)",
		     .parse = opt_rank, .group = KN__CONFIG_OPT_RANK,
		     FIELD(F_U32, rank) },
	[O_SERVERS] = { "--servers", "KANEL_SERVERS", "M", .deflt = "1",
			.help = "number of servers",
			.group = KN__CONFIG_OPT_COUNTS,
			FIELD(F_COUNT, servers) },
	[O_WORKERS] = { "--workers", "KANEL_WORKERS", "N",
			.none = "default launcher size - 1 - M",
			.help = "number of workers",
			.group = KN__CONFIG_OPT_COUNTS,
			FIELD(F_COUNT, workers) },
	[O_COORDINATOR] = { "--coordinator", "KANEL_COORDINATOR", "HOST:PORT",
			    .none = "required",
			    .help = "the coordinator's address, which every "
				    "process needs",
			    .parse = opt_coordinator,
			    .group = KN__CONFIG_OPT_COORDINATOR,
			    FIELD(F_ADDR, coordinator) },
	[O_LISTEN] = { "--listen", "KANEL_LISTEN", "HOST:PORT",
		       .deflt = "0.0.0.0:0",
		       .help = "a server's bind address (port 0: any)",
		       .parse = opt_listen, .group = KN__CONFIG_OPT_LISTEN,
		       FIELD(F_ADDR, listen) },
	[O_TRANSPORT] = { "--transport", "KANEL_TRANSPORT",
			  CHOICE(transport_names_at), .deflt = "tcp",
			  .help = "tcp (io_uring) or verbs (RDMA)",
			  .group = KN__CONFIG_OPT_COMMON,
			  FIELD(F_NAME, transport) },
	[O_SYNC] = { "--sync", "KANEL_SYNC", CHOICE(kn__sync_protocol_name_at),
		     .deflt = "bsp", .help = "synchronization protocol",
		     .group = KN__CONFIG_OPT_JOB, FIELD(F_NAME, sync) },
	[O_OPTIMIZER] = { "--optimizer", "KANEL_OPTIMIZER",
			  CHOICE(optimizer_names_at), .deflt = "auto",
			  .help = "the optimizer; sum: the workers' own; "
				  "auto: sum for kanel.torch, else sgd",
			  .group = KN__CONFIG_OPT_JOB,
			  FIELD(F_NAME, optimizer) },
	[O_LR] = { "--lr", "KANEL_LR", "RATE", .deflt = "0.01",
		   .help = "learning rate, above 0", .parse = opt_lr,
		   .group = KN__CONFIG_OPT_JOB, FIELD(F_FLOAT, lr) },
	[O_MOMENTUM] = { "--momentum", "KANEL_MOMENTUM", "MU", .deflt = "0.9",
			 .help = "momentum, in [0, 1)", .parse = opt_momentum,
			 .group = KN__CONFIG_OPT_JOB,
			 FIELD(F_FLOAT, momentum) },
	[O_CHUNK] = { "--chunk-bytes", "KANEL_CHUNK_BYTES", "BYTES",
		      .deflt = "512K",
		      .help = "chunk size; K or M suffix; a multiple of 4, "
			      "4K to 1024M",
		      .parse = opt_chunk, .group = KN__CONFIG_OPT_JOB,
		      FIELD(F_U32, chunk_bytes) },
	[O_FUSE] = { "--fuse-bytes", "KANEL_FUSE_BYTES", "BYTES",
		     .deflt = "64K",
		     .help = "smaller tensors share chunks; 0: never; K "
			     "or M suffix, at most 1M",
		     .parse = opt_fuse, .group = KN__CONFIG_OPT_JOB,
		     FIELD(F_U32, fuse_bytes) },
	[O_WINDOW] = { "--push-window", "KANEL_PUSH_WINDOW", "BYTES",
		       .deflt = "4M",
		       .help = "push bytes in flight per worker, most "
			       "urgent first; 0: no limit",
		       .parse = opt_window, .group = KN__CONFIG_OPT_JOB,
		       FIELD(F_U32, push_window) },
	[O_HEARTBEAT] = { "--heartbeat-timeout", "KANEL_HEARTBEAT_TIMEOUT",
			  "MS", .deflt = "3000",
			  .help = "silence after which a peer is dead; "
				  "ms, or an ms or s suffix",
			  .parse = opt_heartbeat,
			  .group = KN__CONFIG_OPT_HEARTBEAT,
			  FIELD(F_MS, heartbeat_timeout_ms) },
	[O_STARTUP] = { "--startup-timeout", "KANEL_STARTUP_TIMEOUT", "S",
			.deflt = "30",
			.help = "how long the job may take to assemble; "
				"s, or an ms or s suffix",
			.parse = opt_startup, .group = KN__CONFIG_OPT_COMMON,
			FIELD(F_MS, startup_timeout_ms) },
	[O_SECRET_FILE] = { "--secret-file", "KANEL_SECRET_FILE", "PATH",
			    .none = "else KANEL_SECRET",
			    .help = "file holding the job secret "
				    "(mode 600 or stricter)",
			    .group = KN__CONFIG_OPT_COMMON,
			    FIELD(F_PATH, secret_file) },
	[O_METRICS] = { "--metrics", "KANEL_METRICS", "PATH",
			.none = "not written",
			.help = "append this process's figures to PATH as "
				"one JSON line when it ends",
			.group = KN__CONFIG_OPT_METRICS,
			FIELD(F_PATH, metrics) },
	[O_CHECKPOINT_DIR] = { "--checkpoint-dir", "KANEL_CHECKPOINT_DIR",
			       "DIR", .none = "no checkpoints",
			       .help = "servers: write checkpoints into DIR, "
				       "and restore from it",
			       .group = KN__CONFIG_OPT_CHECKPOINT,
			       FIELD(F_PATH, checkpoint_dir) },
	[O_CHECKPOINT_EVERY] = { "--checkpoint-every", "KANEL_CHECKPOINT_EVERY",
				 "N", .deflt = "100",
				 .help = "servers: a checkpoint at every N-th "
					 "model version",
				 .parse = opt_checkpoint_every,
				 .group = KN__CONFIG_OPT_CHECKPOINT,
				 FIELD(F_U32, checkpoint_every) },
	[O_RESTORE] = { "--restore", "KANEL_RESTORE", NULL, .deflt = "0",
			.help = "start from the servers' newest "
				"checkpoint (variable: 1/0)",
			.group = KN__CONFIG_OPT_CHECKPOINT,
			FIELD(F_BOOL, restore) },
	[O_RESUME] = { "--resume", NULL, "DIR",
		       .help = "go on from the checkpoints in DIR "
			       "(--checkpoint-dir DIR --restore)",
		       .parse = opt_resume,
		       .group = KN__CONFIG_OPT_CHECKPOINT },
	[O_RESTORE_SECRET_FILE] = { "--restore-secret-file",
				    "KANEL_RESTORE_SECRET_FILE", "PATH",
				    .none = "the job's own",
				    .help = "servers: also restore checkpoints "
					    "sealed with the secret in PATH",
				    .group = KN__CONFIG_OPT_CHECKPOINT,
				    FIELD(F_PATH, restore_secret_file) },
	[O_VERBOSE] = { "--verbose", "KANEL_VERBOSE", NULL, .deflt = "0",
			.help = "log more (the variable: 1 or 0)",
			.group = KN__CONFIG_OPT_COMMON,
			FIELD(F_BOOL, verbose) },
	[O_HELP] = { "--help", NULL, NULL, .help = "print this and exit" },
};

/*
 * Option @i: ours, or (O_PARAM + k) sync/'s parameter k as an option of
 * the job, written into @tmp.
 */
const struct opt *kn__cfg_opt_at(int i, struct opt *tmp)
{
	const struct kn__sync_param *t;

	if (i < O_PARAM || i >= O_CHUNK)
		return &opts[i];
	t = &kn__sync_param_table[i - O_PARAM];
	*tmp = (struct opt){
		.flag = t->flag,
		.env = t->env,
		.deflt = t->deflt,
		.help = t->help,
		.param = t,
		.group = KN__CONFIG_OPT_JOB,
		.off = offsetof(struct kn__config, proto) + t->off,
	};
	switch (t->type) {
	case KN__SYNC_PARAM_U32:
		tmp->arg = t->arg;
		tmp->kind = F_U32;
		break;
	case KN__SYNC_PARAM_FLOAT:
		tmp->arg = t->arg;
		tmp->kind = F_FLOAT;
		break;
	default: /* KN__SYNC_PARAM_SOLVER */
		tmp->names = kn__sync_cgp_solver_name_at;
		tmp->kind = F_NAME;
		break;
	}
	return tmp;
}

/*
 * An option without a parser of its own (a name, a count, a path or a
 * switch): its field, read as its kind says.
 */
static int opt_field(struct parse *p, const struct opt *o, const char *src,
		     const char *val)
{
	char *field = (char *)&p->cfg + o->off;
	uint32_t u = 0;
	int v, ret;

	switch (o->kind) {
	case F_NAME:
		ret = kn__cfg_parse_name(p, src, val, o->names, &v);
		u = (uint32_t)v;
		break;
	case F_COUNT:
		ret = kn__cfg_parse_count(p, src, val, &u);
		break;
	case F_PATH:
		return kn__cfg_parse_path(p, src, val, field, o->size);
	default: /* F_BOOL */
		return kn__cfg_parse_bool(p, src, val, (bool *)(void *)field);
	}
	if (!ret)
		memcpy(field, &u, sizeof(u));
	return ret;
}

/* sync/'s parameter @o->param, in the range its table gives. */
static int opt_param(struct parse *p, const struct opt *o, const char *src,
		     const char *val)
{
	const struct kn__sync_param *t = o->param;
	char *field = (char *)&p->cfg + o->off;
	uint32_t u = 0;
	float f = 0;
	int ret;

	switch (t->type) {
	case KN__SYNC_PARAM_U32:
		ret = kn__cfg_parse_range(p, src, val, (uint32_t)t->lo,
					  (uint32_t)t->hi, &u);
		break;
	case KN__SYNC_PARAM_FLOAT:
		ret = kn__cfg_parse_float(p, src, val, t->lo, !t->lo_closed,
					  t->hi, &f);
		if (!ret)
			memcpy(field, &f, sizeof(f));
		return ret;
	default: /* KN__SYNC_PARAM_SOLVER: a name */
		return opt_field(p, o, src, val);
	}
	if (!ret)
		memcpy(field, &u, sizeof(u));
	return ret;
}

int kn__cfg_parse_opt(struct parse *p, const struct opt *o, const char *src,
		      const char *val)
{
	if (o->param)
		return opt_param(p, o, src, val);
	return o->parse ? o->parse(p, src, val) : opt_field(p, o, src, val);
}

bool kn__cfg_is_switch(const struct opt *o)
{
	return !o->arg && !o->names;
}

void kn__config_usage(FILE *out)
{
	fprintf(out, "Usage: kanel [OPTION]...\n");
	kn__config_usage_of(out, KN__CONFIG_OPT_ALL);
}

void kn__config_usage_of(FILE *out, unsigned int options)
{
	fprintf(out,
		"Each option can be set by its variable instead; a flag wins "
		"over its\nvariable, a variable over the launcher.  Under "
		"srun or mpirun, global\nrank 0 is the coordinator, ranks "
		"1..M the servers, the rest the workers.\n"
		"The job secret is read from --secret-file, else "
		"KANEL_SECRET.\n\n");
	for (int i = 0; i < O_COUNT; i++) {
		struct opt tmp;
		const struct opt *o = kn__cfg_opt_at(i, &tmp);

		if (o->group && !(options & o->group))
			continue;
		fprintf(out, "  %s", o->flag);
		if (o->names) {
			const char *name;
			uint32_t v;

			for (uint32_t k = 0; (name = o->names(k, &v)); k++)
				fprintf(out, "%s%s", k ? "|" : " ", name);
		} else if (o->arg) {
			fprintf(out, " %s", o->arg);
		}
		if (o->env && o->deflt)
			fprintf(out, "  [%s, default %s]", o->env, o->deflt);
		else if (o->env)
			fprintf(out, "  [%s, %s]", o->env, o->none);
		fprintf(out, "\n      %s", o->help);
		fputc('\n', out);
	}
}

/* @o's value in @cfg as its parser reads it; false: none to give. */
static bool format_value(const struct opt *o, const struct kn__config *cfg,
			 char *buf, size_t cap)
{
	const char *field = (const char *)cfg + o->off;
	const struct kn__config_addr *a;
	const char *name;
	uint32_t u;
	float f;

	switch (o->kind) {
	case F_NAME:
		memcpy(&u, field, sizeof(u));
		name = name_of(o->names, u);
		if (!name)
			return false;
		snprintf(buf, cap, "%s", name);
		return true;
	case F_U32:
	case F_COUNT:
	case F_MS:
		memcpy(&u, field, sizeof(u));
		snprintf(buf, cap, "%u%s", u, o->kind == F_MS ? "ms" : "");
		return true;
	case F_FLOAT:
		memcpy(&f, field, sizeof(f));
		/* nine digits give a float back exactly */
		snprintf(buf, cap, "%.9g", (double)f);
		return true;
	case F_ADDR:
		a = (const struct kn__config_addr *)(const void *)field;
		if (!a->host[0])
			return false;
		name = strchr(a->host, ':') ? "[" : "";
		snprintf(buf, cap, "%s%s%s:%u", name, a->host,
			 name[0] ? "]" : "", (unsigned int)a->port);
		return true;
	case F_PATH:
		if (!field[0])
			return false;
		snprintf(buf, cap, "%s", field);
		return true;
	case F_BOOL:
		snprintf(buf, cap, "%d", *(const bool *)(const void *)field);
		return true;
	case F_NONE:
		break;
	}
	return false;
}

int kn__config_export(const struct kn__config *cfg, unsigned int options)
{
	char v[KN_CONFIG_PATH_MAX + 16];

	if (!cfg)
		return -EINVAL;
	for (int i = 0; i < O_COUNT; i++) {
		struct opt tmp;
		const struct opt *o = kn__cfg_opt_at(i, &tmp);

		if (!o->env || !o->group || !(options & o->group) ||
		    !format_value(o, cfg, v, sizeof(v)))
			continue;
		if (setenv(o->env, v, 1))
			return -errno;
	}
	return 0;
}

const char *kn__config_resolve_strerror(const struct kn__config_addr *addr,
					int err)
{
	if (err == -ENOENT)
		return strchr(addr->host, ':')
			       ? "not an IPv6 address this machine can use"
			       : "no such host, or it has no IPv4 address";
	if (err == -EAGAIN)
		return "the name service failed for now; try again";
	return strerror(-err);
}

int kn__config_resolve_why(const struct kn__config_addr *addr,
			   struct sockaddr_storage *out, socklen_t *len,
			   char why[KN__CONFIG_WHY_MAX])
{
	int ret = kn__config_resolve(addr, out, len);

	if (ret)
		snprintf(why, KN__CONFIG_WHY_MAX, "%s:%u: %s", addr->host,
			 addr->port, kn__config_resolve_strerror(addr, ret));
	return ret;
}

int kn__config_resolve(const struct kn__config_addr *addr,
		       struct sockaddr_storage *out, socklen_t *len)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_NUMERICSERV },
			*res;
	char port[8];
	int rc;

	if (!addr || !out || !len || !addr->host[0])
		return -EINVAL;
	/* IPv4 unless the address is an IPv6 literal: "localhost" must be
	 * the same address for the process that listens and those that
	 * connect, whatever order the resolver returns */
	hints.ai_family = strchr(addr->host, ':') ? AF_INET6 : AF_INET;
	snprintf(port, sizeof(port), "%u", (unsigned int)addr->port);
	rc = getaddrinfo(addr->host, port, &hints, &res);
	switch (rc) {
	case 0:
		break;
	case EAI_AGAIN:
		return -EAGAIN;
	case EAI_MEMORY:
		return -ENOMEM;
	case EAI_SYSTEM:
		return errno ? -errno : -EIO;
	case EAI_NONAME:
#ifdef EAI_NODATA
	case EAI_NODATA:
#endif
#ifdef EAI_ADDRFAMILY
	case EAI_ADDRFAMILY:
#endif
		return -ENOENT;
	default:
		return -EINVAL;
	}
	if (res->ai_addrlen > sizeof(*out)) {
		freeaddrinfo(res);
		return -EINVAL;
	}
	memcpy(out, res->ai_addr, res->ai_addrlen);
	*len = res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}
