/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config_opt.h - what config.h's three files share.  They call
 * downwards only:
 *
 *   config_parse.c  flags, KANEL_* variables and the launcher's, and the
 *                   checks that span options (kn__config_parse_as)
 *   config_table.c  the option table: names, usage, export, resolve
 *   config_value.c  one value each: a number, a size, an address...
 */
#ifndef KN_ENGINE_CONFIG_OPT_H
#define KN_ENGINE_CONFIG_OPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#define KIB	  1024u
#define MIB	  (1024u * 1024u)
#define CHUNK_MIN (4u * KIB)
#define CHUNK_MAX (1024u * MIB)

/* One parse: the configuration being built and where errors go. */
struct parse {
	struct kn__config cfg;
	char *err;
	size_t errlen;
};

/*
 * A choice's names: the @i-th, from 0, and its value in @val; NULL past
 * the last.  The protocols and CGP's solvers are sync/'s, listed the same
 * way (kn__sync_protocol_name_at, kn__sync_cgp_solver_name_at); the
 * tables above get theirs from NAMES_AT.
 */
typedef const char *names_fn(uint32_t i, uint32_t *val);

/*
 * How an option's field is read when it has no parser of its own
 * (opt_field), and written back as its variable's value
 * (kn__config_export): each as its parser reads it.
 */
enum field_kind {
	F_NONE = 0, /* not exported (--help) */
	F_NAME,	    /* a uint32_t or an enum: the first name of its value */
	F_U32,
	F_COUNT, /* a uint32_t from 1 to KN_CONFIG_MAX_COUNT */
	F_MS,	 /* a uint32_t of milliseconds: "1500ms" */
	F_FLOAT,
	F_ADDR, /* struct kn__config_addr; an empty host is left alone */
	F_PATH, /* char[]; "" is left alone */
	F_BOOL,
};

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
	/* NULL: its field is read as its kind says (opt_field) */
	int (*parse)(struct parse *p, const char *src, const char *val);
	/* or sync/'s parameter, which opt_param parses (opt_at) */
	const struct kn__sync_param *param;
	unsigned int group; /* KN__CONFIG_OPT_*; 0: every command's */
	/* the field it sets, for kn__config_export to write back */
	enum field_kind kind;
	size_t off;
	size_t size;
};

/* ---- config_value.c: each parses one value from @src (its flag or
 * variable, for the message) into its out-parameter: 0 or -EINVAL, with
 * the reason in @p's error ---- */

__attribute__((format(printf, 2, 3))) int kn__cfg_bad(struct parse *p,
						      const char *fmt, ...);
/* A decimal number without sign, spaces or junk (@rest: what follows
 * it, else nothing may), at most UINT32_MAX. */
bool kn__cfg_parse_u32(const char *s, uint32_t *out, const char **rest);
/* For messages: "" for 1, "s" otherwise. */
const char *kn__cfg_plural(uint32_t n);
/* Why @s is not a uint32_t, for a message. */
const char *kn__cfg_not_u32(const char *s);
int kn__cfg_parse_name(struct parse *p, const char *src, const char *val,
		       names_fn *names, int *out);
int kn__cfg_parse_count(struct parse *p, const char *src, const char *val,
			uint32_t *out);
int kn__cfg_parse_addr(struct parse *p, const char *src, const char *val,
		       bool empty_host, bool zero_port,
		       struct kn__config_addr *out);
int kn__cfg_parse_duration(struct parse *p, const char *src, const char *val,
			   uint32_t unit_ms, uint32_t *out_ms);
int kn__cfg_parse_float(struct parse *p, const char *src, const char *val,
			double lo, bool lo_open, double hi, float *out);
int kn__cfg_parse_bytes(struct parse *p, const char *src, const char *val,
			uint64_t min, uint64_t max, const char *range,
			uint32_t *out);
int kn__cfg_parse_range(struct parse *p, const char *src, const char *val,
			uint32_t lo, uint32_t hi, uint32_t *out);
int kn__cfg_parse_path(struct parse *p, const char *src, const char *val,
		       char *dst, size_t cap);
int kn__cfg_parse_bool(struct parse *p, const char *src, const char *val,
		       bool *dst);

/* ---- config_table.c: the table ---- */

/*
 * Option @i: ours, or (O_PARAM + k) sync/'s parameter k as an option of
 * the job, written into @tmp.
 */
const struct opt *kn__cfg_opt_at(int i, struct opt *tmp);
/* Option @o's value @val from @src into @p's configuration. */
int kn__cfg_parse_opt(struct parse *p, const struct opt *o, const char *src,
		      const char *val);
/* A flag without a value (--verbose). */
bool kn__cfg_is_switch(const struct opt *o);

#endif /* KN_ENGINE_CONFIG_OPT_H */
