/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config.c - the job configuration of config.h: flags, KANEL_* variables,
 * launcher variables, defaults.
 *
 * One table describes every option: its flag, its variable, its default
 * (a string that goes through the option's own parser, so the default is
 * written once) and its help line, which kn__config_usage prints.  The
 * protocols' parameters are sync/'s table (kn__sync_param_table), read
 * as options of the job in the same places (opt_at).  Values
 * are parsed one option at a time, flag before variable; what depends on
 * several options (role, rank and counts, the launcher's mapping) is
 * settled afterwards, once every value is known.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <netdb.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config.h"

extern char **environ;

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#define KIB	       1024u
#define MIB	       (1024u * 1024u)
#define CHUNK_MIN      (4u * KIB)
#define CHUNK_MAX      (1024u * MIB)
#define TIMEOUT_MAX_MS (24u * 3600u * 1000u)

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

/*
 * A choice's names: the @i-th, from 0, and its value in @val; NULL past
 * the last.  The protocols and CGP's solvers are sync/'s, listed the same
 * way (kn__sync_protocol_name_at, kn__sync_cgp_solver_name_at); the
 * tables above get theirs from NAMES_AT.
 */
typedef const char *names_fn(uint32_t i, uint32_t *val);

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

/* One parse: the configuration being built and where errors go. */
struct parse {
	struct kn__config cfg;
	char *err;
	size_t errlen;
};

__attribute__((format(printf, 2, 3))) static int bad(struct parse *p,
						     const char *fmt, ...)
{
	va_list ap;

	if (p->err && p->errlen) {
		va_start(ap, fmt);
		vsnprintf(p->err, p->errlen, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

/* A decimal number without sign, spaces or junk, at most UINT32_MAX. */
static bool parse_u32(const char *s, uint32_t *out, const char **rest)
{
	uint64_t v = 0;
	const char *c = s;

	if (*c < '0' || *c > '9')
		return false;
	for (; *c >= '0' && *c <= '9'; c++) {
		v = v * 10 + (uint64_t)(*c - '0');
		if (v > UINT32_MAX)
			return false;
	}
	if (!rest && *c)
		return false;
	if (rest)
		*rest = c;
	*out = (uint32_t)v;
	return true;
}

/* For messages: "1 worker", "2 workers". */
static const char *plural(uint32_t n)
{
	return n == 1 ? "" : "s";
}

/* Why @s is not a uint32_t, for a message. */
static const char *not_u32(const char *s)
{
	return *s && !s[strspn(s, "0123456789")] ? "too large" : "not a number";
}

static int parse_name(struct parse *p, const char *src, const char *val,
		      names_fn *names, int *out)
{
	char list[128] = "";
	const char *name;
	uint32_t v;

	/* written on every path, so that no caller reads it unset */
	*out = -1;
	for (uint32_t i = 0; (name = names(i, &v)); i++) {
		if (!strcmp(val, name)) {
			*out = (int)v;
			return 0;
		}
	}
	for (uint32_t i = 0; (name = names(i, &v)); i++) {
		strncat(list, i ? ", " : "", sizeof(list) - strlen(list) - 1);
		strncat(list, name, sizeof(list) - strlen(list) - 1);
	}
	return bad(p, "%s='%s': unknown value (one of %s)", src, val, list);
}

static int parse_count(struct parse *p, const char *src, const char *val,
		       uint32_t *out)
{
	uint32_t v;

	if (!parse_u32(val, &v, NULL))
		return bad(p, "%s='%s': %s", src, val, not_u32(val));
	if (v < 1 || v > KN_CONFIG_MAX_COUNT)
		return bad(p, "%s=%s: must be between 1 and %u", src, val,
			   KN_CONFIG_MAX_COUNT);
	*out = v;
	return 0;
}

/*
 * HOST:PORT, [IPV6]:PORT, or (@empty_host) :PORT for 0.0.0.0.  Hostnames
 * are letters, digits, '.', '-' and '_', not starting with '-'.
 */
static int parse_addr(struct parse *p, const char *src, const char *val,
		      bool empty_host, bool zero_port,
		      struct kn__config_addr *out)
{
	struct kn__config_addr a = { .host = "" };
	const char *colon, *host = val;
	size_t hlen;
	uint32_t port;
	bool v6 = false;

	if (val[0] == '[') {
		const char *rb = strchr(val, ']');

		if (!rb || rb[1] != ':')
			return bad(p, "%s='%s': expected [IPV6]:PORT", src,
				   val);
		host = val + 1;
		hlen = (size_t)(rb - host);
		colon = rb + 1;
		v6 = true;
	} else {
		colon = strrchr(val, ':');
		if (!colon)
			return bad(p, "%s='%s': expected HOST:PORT", src, val);
		hlen = (size_t)(colon - val);
		if (memchr(val, ':', hlen))
			return bad(p,
				   "%s='%s': an IPv6 address goes in brackets, "
				   "[ADDRESS]:PORT",
				   src, val);
	}
	if (hlen >= sizeof(a.host))
		return bad(p, "%s: host longer than %zu bytes", src,
			   sizeof(a.host) - 1);
	memcpy(a.host, host, hlen);
	a.host[hlen] = '\0';
	if (!hlen && !(empty_host && !v6))
		return bad(p, "%s='%s': no host before the port", src, val);
	if (!hlen)
		strcpy(a.host, "0.0.0.0");
	if (v6) {
		struct in6_addr in6;

		if (inet_pton(AF_INET6, a.host, &in6) != 1)
			return bad(p, "%s='%s': not an IPv6 address", src, val);
	} else if (a.host[strspn(a.host, "0123456789.")] == '\0') {
		struct in_addr in4;

		/* digits and dots only: no host name looks like that, so it
		 * must be an IPv4 literal, four numbers up to 255 each (the
		 * resolver would otherwise just not find "999.0.0.1") */
		if (inet_pton(AF_INET, a.host, &in4) != 1)
			return bad(p,
				   "%s='%s': '%s' is not an IPv4 address "
				   "(four numbers from 0 to 255, as "
				   "10.0.0.1)",
				   src, val, a.host);
	} else {
		for (size_t i = 0; i < hlen; i++) {
			char c = a.host[i];

			if (!((c >= 'a' && c <= 'z') ||
			      (c >= 'A' && c <= 'Z') ||
			      (c >= '0' && c <= '9') || c == '.' || c == '-' ||
			      c == '_') ||
			    (i == 0 && c == '-'))
				return bad(p,
					   "%s='%s': '%s' is not a host name",
					   src, val, a.host);
		}
	}
	if (!parse_u32(colon + 1, &port, NULL) || port > 65535)
		return bad(p, "%s='%s': the port is not a number up to 65535",
			   src, val);
	if (!port && !zero_port)
		return bad(p, "%s='%s': the port must not be 0", src, val);
	a.port = (uint16_t)port;
	*out = a;
	return 0;
}

/* A number of @unit_ms, or of ms or s with a suffix; above 0, below a day. */
static int parse_duration(struct parse *p, const char *src, const char *val,
			  uint32_t unit_ms, uint32_t *out_ms)
{
	const char *rest;
	uint32_t v;
	uint64_t ms;

	if (!parse_u32(val, &v, &rest))
		return bad(p, "%s='%s': not a number", src, val);
	if (!strcmp(rest, "ms"))
		unit_ms = 1;
	else if (!strcmp(rest, "s"))
		unit_ms = 1000;
	else if (*rest)
		return bad(p, "%s='%s': unknown unit '%s' (ms or s)", src, val,
			   rest);
	ms = (uint64_t)v * unit_ms;
	if (!ms || ms > TIMEOUT_MAX_MS)
		return bad(p, "%s='%s': must be above 0 and at most a day", src,
			   val);
	*out_ms = (uint32_t)ms;
	return 0;
}

/* A finite number in (lo, hi) or [lo, hi), once rounded to a float. */
static int parse_float(struct parse *p, const char *src, const char *val,
		       double lo, bool lo_open, double hi, float *out)
{
	char *end;
	double v;
	float f;

	errno = 0;
	v = strtod(val, &end);
	f = (float)v;
	if (end == val || *end || isnan(v))
		return bad(p, "%s='%s': not a number", src, val);
	if (errno || !isfinite(f))
		return bad(p, "%s='%s': out of range", src, val);
	if (f < lo || (lo_open && f == lo) || f >= hi) {
		if (isinf(hi))
			return bad(p, "%s='%s': must be above %g", src, val,
				   lo);
		return bad(p, "%s='%s': must be in %s%g, %g)", src, val,
			   lo_open ? "(" : "[", lo, hi);
	}
	*out = f;
	return 0;
}

static int opt_role(struct parse *p, const char *src, const char *val)
{
	int v;
	int ret = parse_name(p, src, val, role_names_at, &v);

	if (!ret)
		p->cfg.role = (enum kn__role)v;
	return ret;
}

static int opt_rank(struct parse *p, const char *src, const char *val)
{
	if (!parse_u32(val, &p->cfg.rank, NULL))
		return bad(p, "%s='%s': %s", src, val, not_u32(val));
	return 0;
}

static int opt_workers(struct parse *p, const char *src, const char *val)
{
	return parse_count(p, src, val, &p->cfg.workers);
}

static int opt_servers(struct parse *p, const char *src, const char *val)
{
	return parse_count(p, src, val, &p->cfg.servers);
}

static int opt_coordinator(struct parse *p, const char *src, const char *val)
{
	return parse_addr(p, src, val, false, false, &p->cfg.coordinator);
}

static int opt_listen(struct parse *p, const char *src, const char *val)
{
	return parse_addr(p, src, val, true, true, &p->cfg.listen);
}

static int opt_transport(struct parse *p, const char *src, const char *val)
{
	int v;
	int ret = parse_name(p, src, val, transport_names_at, &v);

	if (!ret)
		p->cfg.transport = (enum kn__config_transport)v;
	return ret;
}

static int opt_sync(struct parse *p, const char *src, const char *val)
{
	int v;
	int ret = parse_name(p, src, val, kn__sync_protocol_name_at, &v);

	if (!ret)
		p->cfg.sync = (uint32_t)v;
	return ret;
}

static int opt_optimizer(struct parse *p, const char *src, const char *val)
{
	int v;
	int ret = parse_name(p, src, val, optimizer_names_at, &v);

	if (!ret)
		p->cfg.optimizer = (enum kn__config_optimizer)v;
	return ret;
}

/*
 * Bytes, or KiB and MiB with a K, KiB, M or MiB suffix (any case), from
 * @min to @max (@range says so in the error).
 */
static int parse_bytes(struct parse *p, const char *src, const char *val,
		       uint64_t min, uint64_t max, const char *range,
		       uint32_t *out)
{
	const char *rest;
	uint32_t v, unit = 1;
	uint64_t bytes;

	if (!parse_u32(val, &v, &rest))
		return bad(p, "%s='%s': not a number", src, val);
	if (!strcasecmp(rest, "k") || !strcasecmp(rest, "kib"))
		unit = KIB;
	else if (!strcasecmp(rest, "m") || !strcasecmp(rest, "mib"))
		unit = MIB;
	else if (*rest)
		return bad(p, "%s='%s': unknown suffix '%s' (K or M)", src, val,
			   rest);
	bytes = (uint64_t)v * unit;
	if (bytes < min || bytes > max)
		return bad(p, "%s='%s': must be between %s", src, val, range);
	*out = (uint32_t)bytes;
	return 0;
}

static int opt_chunk(struct parse *p, const char *src, const char *val)
{
	uint32_t bytes = 0;
	int ret = parse_bytes(p, src, val, CHUNK_MIN, CHUNK_MAX, "4K and 1024M",
			      &bytes);

	if (ret)
		return ret;
	if (bytes % 4)
		return bad(p, "%s='%s': not a multiple of 4 bytes", src, val);
	p->cfg.chunk_bytes = bytes;
	return 0;
}

static int opt_fuse(struct parse *p, const char *src, const char *val)
{
	return parse_bytes(p, src, val, 0, MIB, "0 (no fusion) and 1M",
			   &p->cfg.fuse_bytes);
}

static int opt_window(struct parse *p, const char *src, const char *val)
{
	return parse_bytes(p, src, val, 0, CHUNK_MAX, "0 (no limit) and 1024M",
			   &p->cfg.push_window);
}

static int opt_lr(struct parse *p, const char *src, const char *val)
{
	return parse_float(p, src, val, 0, true, INFINITY, &p->cfg.lr);
}

static int parse_range(struct parse *p, const char *src, const char *val,
		       uint32_t lo, uint32_t hi, uint32_t *out)
{
	uint32_t v;

	if (!parse_u32(val, &v, NULL))
		return bad(p, "%s='%s': %s", src, val, not_u32(val));
	if (v < lo || v > hi)
		return bad(p, "%s=%s: must be between %u and %u", src, val, lo,
			   hi);
	*out = v;
	return 0;
}

static int opt_momentum(struct parse *p, const char *src, const char *val)
{
	return parse_float(p, src, val, 0, false, 1, &p->cfg.momentum);
}

static int opt_heartbeat(struct parse *p, const char *src, const char *val)
{
	return parse_duration(p, src, val, 1, &p->cfg.heartbeat_timeout_ms);
}

static int opt_startup(struct parse *p, const char *src, const char *val)
{
	return parse_duration(p, src, val, 1000, &p->cfg.startup_timeout_ms);
}

static int parse_path(struct parse *p, const char *src, const char *val,
		      char *dst, size_t cap)
{
	size_t n = strlen(val);

	if (!n)
		return bad(p, "%s: empty path", src);
	if (n >= cap)
		return bad(p, "%s: path longer than %zu bytes", src, cap - 1);
	memcpy(dst, val, n + 1);
	return 0;
}

static int opt_secret_file(struct parse *p, const char *src, const char *val)
{
	return parse_path(p, src, val, p->cfg.secret_file,
			  sizeof(p->cfg.secret_file));
}

static int opt_metrics(struct parse *p, const char *src, const char *val)
{
	return parse_path(p, src, val, p->cfg.metrics, sizeof(p->cfg.metrics));
}

static int parse_bool(struct parse *p, const char *src, const char *val,
		      bool *dst)
{
	static const char *const yes[] = { "1", "true", "yes", "on" };
	static const char *const no[] = { "0", "false", "no", "off" };

	for (size_t i = 0; i < ARRAY_SIZE(yes); i++) {
		if (!strcasecmp(val, yes[i]) || !strcasecmp(val, no[i])) {
			*dst = !strcasecmp(val, yes[i]);
			return 0;
		}
	}
	return bad(p, "%s='%s': expected 1 or 0 (true/false, yes/no, on/off)",
		   src, val);
}

static int opt_verbose(struct parse *p, const char *src, const char *val)
{
	return parse_bool(p, src, val, &p->cfg.verbose);
}

static int opt_checkpoint_dir(struct parse *p, const char *src, const char *val)
{
	return parse_path(p, src, val, p->cfg.checkpoint_dir,
			  sizeof(p->cfg.checkpoint_dir));
}

static int opt_checkpoint_every(struct parse *p, const char *src,
				const char *val)
{
	return parse_range(p, src, val, 1, UINT32_MAX,
			   &p->cfg.checkpoint_every);
}

static int opt_restore(struct parse *p, const char *src, const char *val)
{
	return parse_bool(p, src, val, &p->cfg.restore);
}

/* --resume DIR: --checkpoint-dir DIR and --restore in one. */
static int opt_resume(struct parse *p, const char *src, const char *val)
{
	int ret = opt_checkpoint_dir(p, src, val);

	if (!ret)
		p->cfg.restore = true;
	return ret;
}

static int opt_restore_secret_file(struct parse *p, const char *src,
				   const char *val)
{
	return parse_path(p, src, val, p->cfg.restore_secret_file,
			  sizeof(p->cfg.restore_secret_file));
}

/*
 * How an option's field is written back as its variable's value
 * (kn__config_export): each as its parser reads it.
 */
enum field_kind {
	F_NONE = 0, /* not exported (--help) */
	F_NAME,	    /* a uint32_t or an enum: the first name of its value */
	F_U32,
	F_MS, /* a uint32_t of milliseconds: "1500ms" */
	F_FLOAT,
	F_ADDR, /* struct kn__config_addr; an empty host is left alone */
	F_PATH, /* char[]; "" is left alone */
	F_BOOL,
};

/* F_NAME reads an enum field as a uint32_t. */
_Static_assert(sizeof(enum kn__role) == sizeof(uint32_t) &&
		       sizeof(enum kn__config_transport) == sizeof(uint32_t) &&
		       sizeof(enum kn__config_optimizer) == sizeof(uint32_t),
	       "enum fields are read as uint32_t");

enum opt_id {
	O_ROLE,
	O_RANK,
	O_SERVERS,
	O_WORKERS,
	O_COORDINATOR,
	O_LISTEN,
	O_TRANSPORT,
	O_SYNC,
	O_OPTIMIZER,
	O_LR,
	O_MOMENTUM,
	/* sync/'s parameters: O_PARAM + i is kn__sync_param_table[i] */
	O_PARAM,
	O_CHUNK = O_PARAM + KN__SYNC_PARAMS_WORDS,
	O_FUSE,
	O_WINDOW,
	O_HEARTBEAT,
	O_STARTUP,
	O_SECRET_FILE,
	O_METRICS,
	O_CHECKPOINT_DIR,
	O_CHECKPOINT_EVERY,
	O_RESTORE,
	O_RESUME,
	O_RESTORE_SECRET_FILE,
	O_VERBOSE,
	O_HELP,
	O_COUNT
};

struct opt {
	const char *flag;  /* with its "--" */
	const char *env;   /* NULL: a flag only */
	const char *arg;   /* the value's name for usage; NULL: a switch */
	names_fn *names;   /* the values, for a choice */
	const char *deflt; /* parsed before flags and variables */
	const char *none;  /* usage: what happens when not given */
	const char *help;
	int (*parse)(struct parse *p, const char *src, const char *val);
	/* or sync/'s parameter, which opt_param parses (opt_at) */
	const struct kn__sync_param *param;
	unsigned int group; /* KN__CONFIG_OPT_*; 0: every command's */
	/* the field it sets, for kn__config_export to write back */
	enum field_kind kind;
	size_t off;
};

#define CHOICE(f)	 .names = f
#define FIELD(k, member) .kind = k, .off = offsetof(struct kn__config, member)

static const struct opt opts[O_COUNT] = {
	[O_ROLE] = { "--role", "KANEL_ROLE", CHOICE(role_names_at),
		     .none = "default from the launcher",
		     .help = "what this process is", .parse = opt_role,
		     .group = KN__CONFIG_OPT_ROLE, FIELD(F_NAME, role) },
	[O_RANK] = { "--rank", "KANEL_RANK", "R",
		     .none = "default from the launcher",
		     .help = "index within the role, from 0 (with --role)",
		     .parse = opt_rank, .group = KN__CONFIG_OPT_RANK,
		     FIELD(F_U32, rank) },
	[O_SERVERS] = { "--servers", "KANEL_SERVERS", "M", .deflt = "1",
			.help = "number of servers", .parse = opt_servers,
			.group = KN__CONFIG_OPT_COUNTS, FIELD(F_U32, servers) },
	[O_WORKERS] = { "--workers", "KANEL_WORKERS", "N",
			.none = "default launcher size - 1 - M",
			.help = "number of workers", .parse = opt_workers,
			.group = KN__CONFIG_OPT_COUNTS, FIELD(F_U32, workers) },
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
			  .parse = opt_transport,
			  .group = KN__CONFIG_OPT_COMMON,
			  FIELD(F_NAME, transport) },
	[O_SYNC] = { "--sync", "KANEL_SYNC", CHOICE(kn__sync_protocol_name_at),
		     .deflt = "bsp", .help = "synchronization protocol",
		     .parse = opt_sync, .group = KN__CONFIG_OPT_JOB,
		     FIELD(F_NAME, sync) },
	[O_OPTIMIZER] = { "--optimizer", "KANEL_OPTIMIZER",
			  CHOICE(optimizer_names_at), .deflt = "auto",
			  .help = "the optimizer; sum: the workers' own; "
				  "auto: sum for kanel.torch, else sgd",
			  .parse = opt_optimizer, .group = KN__CONFIG_OPT_JOB,
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
			    .parse = opt_secret_file,
			    .group = KN__CONFIG_OPT_COMMON,
			    FIELD(F_PATH, secret_file) },
	[O_METRICS] = { "--metrics", "KANEL_METRICS", "PATH",
			.none = "not written",
			.help = "append this process's figures to PATH as "
				"one JSON line when it ends",
			.parse = opt_metrics, .group = KN__CONFIG_OPT_METRICS,
			FIELD(F_PATH, metrics) },
	[O_CHECKPOINT_DIR] = { "--checkpoint-dir", "KANEL_CHECKPOINT_DIR",
			       "DIR", .none = "no checkpoints",
			       .help = "servers: write checkpoints into DIR, "
				       "and restore from it",
			       .parse = opt_checkpoint_dir,
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
			.parse = opt_restore,
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
				    .parse = opt_restore_secret_file,
				    .group = KN__CONFIG_OPT_CHECKPOINT,
				    FIELD(F_PATH, restore_secret_file) },
	[O_VERBOSE] = { "--verbose", "KANEL_VERBOSE", NULL, .deflt = "0",
			.help = "log more (the variable: 1 or 0)",
			.parse = opt_verbose, .group = KN__CONFIG_OPT_COMMON,
			FIELD(F_BOOL, verbose) },
	[O_HELP] = { "--help", NULL, NULL, .help = "print this and exit" },
};

/*
 * Option @i: ours, or (O_PARAM + k) sync/'s parameter k as an option of
 * the job, written into @tmp.
 */
static const struct opt *opt_at(int i, struct opt *tmp)
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

/* sync/'s parameter @o->param, in the range its table gives. */
static int opt_param(struct parse *p, const struct opt *o, const char *src,
		     const char *val)
{
	const struct kn__sync_param *t = o->param;
	char *field = (char *)&p->cfg + o->off;
	uint32_t u = 0;
	float f = 0;
	int v, ret;

	switch (t->type) {
	case KN__SYNC_PARAM_U32:
		ret = parse_range(p, src, val, (uint32_t)t->lo, (uint32_t)t->hi,
				  &u);
		break;
	case KN__SYNC_PARAM_FLOAT:
		ret = parse_float(p, src, val, t->lo, !t->lo_closed, t->hi, &f);
		if (!ret)
			memcpy(field, &f, sizeof(f));
		return ret;
	default: /* KN__SYNC_PARAM_SOLVER */
		ret = parse_name(p, src, val, o->names, &v);
		u = (uint32_t)v;
		break;
	}
	if (!ret)
		memcpy(field, &u, sizeof(u));
	return ret;
}

static int parse_opt(struct parse *p, const struct opt *o, const char *src,
		     const char *val)
{
	return o->param ? opt_param(p, o, src, val) : o->parse(p, src, val);
}

static bool is_switch(const struct opt *o)
{
	return !o->arg && !o->names;
}

static const char *env_lookup(char *const *envp, const char *name)
{
	size_t n = strlen(name);

	for (; envp && *envp; envp++)
		if (!strncmp(*envp, name, n) && (*envp)[n] == '=')
			return *envp + n + 1;
	return NULL;
}

/*
 * Flags into @val (switches as "1"); -EINVAL for anything else, and for
 * a flag outside @scope's options.
 */
static int scan_flags(struct parse *p, const struct kn__config_scope *scope,
		      int argc, char **argv, const char *val[O_COUNT])
{
	struct option lo[O_COUNT + 1];
	struct opt tmp;
	int saved_opterr = opterr, c, ret = 0;

	if (argc <= 1 || !argv)
		return 0;
	for (int i = 0; i < O_COUNT; i++) {
		const struct opt *o = opt_at(i, &tmp);

		lo[i] = (struct option){ o->flag + 2,
					 is_switch(o) ? no_argument
						      : required_argument,
					 NULL, 256 + i };
	}
	lo[O_COUNT] = (struct option){ 0 };

	/* 0, not 1: glibc then forgets a previous scan's state too */
	optind = 0;
	opterr = 0;
	/* +: stop at the first operand, so argv is never permuted */
	while ((c = getopt_long(argc, argv, "+:", lo, NULL)) != -1) {
		const char *arg = argv[optind - 1];

		if (c >= 256 && c < 256 + O_COUNT) {
			const struct opt *o = opt_at(c - 256, &tmp);

			if (o->group && !(scope->options & o->group)) {
				ret = bad(p,
					  "%s is not an option of %s (see "
					  "%s --help)",
					  o->flag, scope->command,
					  scope->command);
				break;
			}
			/* "--lr --momentum 0.9": the value is missing, and
			 * no value of ours starts with "--" */
			if (optarg && !strncmp(optarg, "--", 2) &&
			    optind - 1 > 0 && argv[optind - 1] == optarg) {
				ret = bad(p,
					  "%s needs a value, but the next "
					  "argument is '%s'",
					  o->flag, optarg);
				break;
			}
			val[c - 256] = optarg ? optarg : "1";
			continue;
		}
		if (c == ':' && optopt >= 256 && optopt < 256 + O_COUNT)
			ret = bad(p, "%s needs a value",
				  opt_at(optopt - 256, &tmp)->flag);
		else if (c == ':')
			ret = bad(p, "%s needs a value", arg);
		else if (optopt >= 256 && optopt < 256 + O_COUNT)
			ret = bad(p, "%s takes no value",
				  opt_at(optopt - 256, &tmp)->flag);
		else if (optopt)
			ret = bad(p, "unknown option '-%c' (see --help)",
				  optopt);
		else
			ret = bad(p, "unknown option '%s' (see --help)", arg);
		break;
	}
	if (!ret && optind < argc)
		ret = bad(p, "unexpected argument '%s' (see --help)",
			  argv[optind]);
	opterr = saved_opterr;
	return ret;
}

/*
 * Role and rank from the launcher: Open MPI first (mpirun inside a Slurm
 * allocation leaves SLURM_PROCID behind, the same for every process),
 * then Slurm.  Counts not given are derived from the size.
 */
static int from_launcher(struct parse *p, char *const *envp,
			 const bool set[O_COUNT], const char *src[O_COUNT])
{
	static const struct {
		const char *rank, *size;
	} launchers[] = {
		{ "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE" },
		{ "SLURM_PROCID", "SLURM_NTASKS" },
	};
	struct kn__config *cfg = &p->cfg;

	for (size_t i = 0; i < ARRAY_SIZE(launchers); i++) {
		const char *rn = launchers[i].rank, *sn = launchers[i].size;
		const char *rv = env_lookup(envp, rn);
		const char *sv = env_lookup(envp, sn);
		uint32_t r, size, m = cfg->servers, n = cfg->workers;

		if (!rv && !sv)
			continue;
		if (!rv || !sv)
			return bad(p, "%s is set but %s is not", rv ? rn : sn,
				   rv ? sn : rn);
		if (!parse_u32(rv, &r, NULL))
			return bad(p, "%s='%s': %s", rn, rv, not_u32(rv));
		if (!parse_u32(sv, &size, NULL))
			return bad(p, "%s='%s': %s", sn, sv, not_u32(sv));
		if (r >= size)
			return bad(p, "%s=%u is not below %s=%u", rn, r, sn,
				   size);
		if (set[O_SERVERS] && set[O_WORKERS]) {
			if (size != 1 + m + n)
				return bad(p,
					   "%s=%u, but 1 coordinator + %u "
					   "server%s (%s) + %u worker%s (%s) "
					   "= %u processes",
					   sn, size, m, plural(m),
					   src[O_SERVERS], n, plural(n),
					   src[O_WORKERS], 1 + m + n);
		} else if (set[O_WORKERS]) {
			if (size < 2 + n)
				return bad(p,
					   "%s=%u leaves no server: 1 "
					   "coordinator + %u worker%s (%s) "
					   "+ at least 1 server",
					   sn, size, n, plural(n),
					   src[O_WORKERS]);
			m = size - 1 - n;
		} else {
			if (size < 2 + m)
				return bad(p,
					   "%s=%u leaves no worker: 1 "
					   "coordinator + %u server%s + at "
					   "least 1 worker",
					   sn, size, m, plural(m));
			n = size - 1 - m;
		}
		if (m > KN_CONFIG_MAX_COUNT || n > KN_CONFIG_MAX_COUNT)
			return bad(p, "%s=%u: more than %u %s", sn, size,
				   KN_CONFIG_MAX_COUNT,
				   m > n ? "servers" : "workers");
		cfg->servers = m;
		cfg->workers = n;
		if (r == 0) {
			cfg->role = KN__ROLE_COORDINATOR;
			cfg->rank = 0;
		} else if (r <= m) {
			cfg->role = KN__ROLE_SERVER;
			cfg->rank = r - 1;
		} else {
			cfg->role = KN__ROLE_WORKER;
			cfg->rank = r - 1 - m;
		}
		cfg->role_source = rn;
		return 0;
	}
	return bad(p, "no role: pass --role coordinator|server|worker (or "
		      "KANEL_ROLE), or start under srun or mpirun");
}

/* Role given: the counts must be too, and the rank must fit them. */
static int check_rank(struct parse *p, const bool set[O_COUNT],
		      const char *src[O_COUNT])
{
	struct kn__config *cfg = &p->cfg;
	const char *name = kn__role_name(cfg->role);
	uint32_t count = 1;

	if (!set[O_WORKERS])
		return bad(p, "the number of workers is unknown: pass "
			      "--workers N (or KANEL_WORKERS)");
	if (cfg->role == KN__ROLE_SERVER)
		count = cfg->servers;
	else if (cfg->role == KN__ROLE_WORKER)
		count = cfg->workers;
	if (!set[O_RANK] && count > 1)
		return bad(p,
			   "--rank missing: there are %u %ss, which one is "
			   "this (--rank or KANEL_RANK)?",
			   count, name);
	if (cfg->rank >= count)
		return bad(p, "%s=%u is out of range: %u %s%s, ranks from 0",
			   src[O_RANK], cfg->rank, count, name, plural(count));
	cfg->role_source = src[O_ROLE];
	return 0;
}

int kn__config_parse(int argc, char **argv, char *const *envp,
		     struct kn__config *cfg, char *err, size_t errlen)
{
	return kn__config_parse_as(NULL, argc, argv, envp, cfg, err, errlen);
}

int kn__config_parse_as(const struct kn__config_scope *scope, int argc,
			char **argv, char *const *envp, struct kn__config *cfg,
			char *err, size_t errlen)
{
	static const struct kn__config_scope any = {
		.command = "kanel", .options = KN__CONFIG_OPT_ALL
	};
	static const int needs_dir[] = { O_CHECKPOINT_EVERY,
					 O_RESTORE_SECRET_FILE };
	struct parse p = { .err = err, .errlen = errlen };
	const char *val[O_COUNT] = { NULL }, *src[O_COUNT] = { NULL };
	bool set[O_COUNT] = { false };
	struct opt tmp;
	int ret;

	if (err && errlen)
		err[0] = '\0';
	if (!cfg)
		return bad(&p, "no configuration to fill");
	if (!envp)
		envp = environ;
	for (int i = 0; i < O_COUNT; i++) {
		const struct opt *o = opt_at(i, &tmp);

		if (o->deflt) {
			ret = parse_opt(&p, o, "default", o->deflt);
			if (ret)
				return ret;
		}
	}
	if (!scope)
		scope = &any;
	ret = scan_flags(&p, scope, argc, argv, val);
	if (ret)
		return ret;
	if (val[O_HELP]) {
		p.cfg.help = true;
		*cfg = p.cfg;
		return 0;
	}
	for (int i = 0; i < O_COUNT; i++) {
		const struct opt *o = opt_at(i, &tmp);
		const char *v = val[i];

		src[i] = o->flag;
		/* the command's own role; a variable outside the command's
		 * options is not its business (a job shares one environment) */
		if ((i == O_ROLE && scope->role) ||
		    (o->group && !(scope->options & o->group)))
			continue;
		if (!v && o->env) {
			v = env_lookup(envp, o->env);
			src[i] = o->env;
			/* an empty variable counts as unset */
			if (v && !*v)
				v = NULL;
		}
		if (!v || (!o->parse && !o->param))
			continue;
		ret = parse_opt(&p, o, src[i], v);
		if (ret)
			return ret;
		set[i] = true;
	}
	/* given on the command line, each names the checkpoint folder's
	 * business; without a folder it would do nothing, silently (a
	 * launcher's children read every value back, so the variables
	 * alone are not held against them) */
	for (size_t k = 0; k < ARRAY_SIZE(needs_dir); k++)
		if (val[needs_dir[k]] && !p.cfg.checkpoint_dir[0])
			return bad(&p,
				   "%s without a checkpoint folder: pass "
				   "--checkpoint-dir DIR (or "
				   "KANEL_CHECKPOINT_DIR) or --resume DIR",
				   opts[needs_dir[k]].flag);

	if (scope->role) {
		p.cfg.role = scope->role;
		set[O_ROLE] = true;
		src[O_ROLE] = scope->command;
	}
	if (set[O_ROLE])
		ret = check_rank(&p, set, src);
	else if (set[O_RANK])
		ret = bad(&p, "%s needs a role: pass --role (or KANEL_ROLE)",
			  src[O_RANK]);
	else
		ret = from_launcher(&p, envp, set, src);
	if (ret)
		return ret;
	/* a command without the option places the coordinator itself */
	if (!set[O_COORDINATOR] &&
	    (scope->options & KN__CONFIG_OPT_COORDINATOR))
		return bad(&p, "missing coordinator address: pass "
			       "--coordinator HOST:PORT or set "
			       "KANEL_COORDINATOR");
	*cfg = p.cfg;
	return 0;
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
		const struct opt *o = opt_at(i, &tmp);

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
		const struct opt *o = opt_at(i, &tmp);

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
