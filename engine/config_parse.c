/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config_parse.c - kn__config_parse_as: a configuration from defaults,
 * flags (getopt_long over config_table.c's table), KANEL_* variables and the
 * launcher's variables, in that order of weight; then what spans several
 * options is checked (role, rank and counts, the launcher's mapping of
 * its global rank, options that need a checkpoint folder).
 */
#include <errno.h>
#include <getopt.h>
#include <string.h>

#include "config_opt.h"

extern char **environ;

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
		const struct opt *o = kn__cfg_opt_at(i, &tmp);

		lo[i] = (struct option){ o->flag + 2,
					 kn__cfg_is_switch(o)
						 ? no_argument
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
			const struct opt *o = kn__cfg_opt_at(c - 256, &tmp);

			if (o->group && !(scope->options & o->group)) {
				ret = kn__cfg_bad(
					p,
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
				ret = kn__cfg_bad(
					p,
					"%s needs a value, but the next "
					"argument is '%s'",
					o->flag, optarg);
				break;
			}
			val[c - 256] = optarg ? optarg : "1";
			continue;
		}
		if (c == ':' && optopt >= 256 && optopt < 256 + O_COUNT)
			ret = kn__cfg_bad(
				p, "%s needs a value",
				kn__cfg_opt_at(optopt - 256, &tmp)->flag);
		else if (c == ':')
			ret = kn__cfg_bad(p, "%s needs a value", arg);
		else if (optopt >= 256 && optopt < 256 + O_COUNT)
			ret = kn__cfg_bad(
				p, "%s takes no value",
				kn__cfg_opt_at(optopt - 256, &tmp)->flag);
		else if (optopt)
			ret = kn__cfg_bad(
				p, "unknown option '-%c' (see --help)", optopt);
		else
			ret = kn__cfg_bad(p, "unknown option '%s' (see --help)",
					  arg);
		break;
	}
	if (!ret && optind < argc)
		ret = kn__cfg_bad(p, "unexpected argument '%s' (see --help)",
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
			return kn__cfg_bad(p, "%s is set but %s is not",
					   rv ? rn : sn, rv ? sn : rn);
		if (!kn__cfg_parse_u32(rv, &r, NULL))
			return kn__cfg_bad(p, "%s='%s': %s", rn, rv,
					   kn__cfg_not_u32(rv));
		if (!kn__cfg_parse_u32(sv, &size, NULL))
			return kn__cfg_bad(p, "%s='%s': %s", sn, sv,
					   kn__cfg_not_u32(sv));
		if (r >= size)
			return kn__cfg_bad(p, "%s=%u is not below %s=%u", rn, r,
					   sn, size);
		if (set[O_SERVERS] && set[O_WORKERS]) {
			if (size != 1 + m + n)
				return kn__cfg_bad(
					p,
					"%s=%u, but 1 coordinator + %u "
					"server%s (%s) + %u worker%s (%s) "
					"= %u processes",
					sn, size, m, kn__cfg_plural(m),
					src[O_SERVERS], n, kn__cfg_plural(n),
					src[O_WORKERS], 1 + m + n);
		} else if (set[O_WORKERS]) {
			if (size < 2 + n)
				return kn__cfg_bad(
					p,
					"%s=%u leaves no server: 1 "
					"coordinator + %u worker%s (%s) "
					"+ at least 1 server",
					sn, size, n, kn__cfg_plural(n),
					src[O_WORKERS]);
			m = size - 1 - n;
		} else {
			if (size < 2 + m)
				return kn__cfg_bad(
					p,
					"%s=%u leaves no worker: 1 "
					"coordinator + %u server%s + at "
					"least 1 worker",
					sn, size, m, kn__cfg_plural(m));
			n = size - 1 - m;
		}
		if (m > KN_CONFIG_MAX_COUNT || n > KN_CONFIG_MAX_COUNT)
			return kn__cfg_bad(p, "%s=%u: more than %u %s", sn,
					   size, KN_CONFIG_MAX_COUNT,
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
	return kn__cfg_bad(p,
			   "no role: pass --role coordinator|server|worker (or "
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
		return kn__cfg_bad(p, "the number of workers is unknown: pass "
				      "--workers N (or KANEL_WORKERS)");
	if (cfg->role == KN__ROLE_SERVER)
		count = cfg->servers;
	else if (cfg->role == KN__ROLE_WORKER)
		count = cfg->workers;
	if (!set[O_RANK] && count > 1)
		return kn__cfg_bad(
			p,
			"--rank missing: there are %u %ss, which one is "
			"this (--rank or KANEL_RANK)?",
			count, name);
	if (cfg->rank >= count)
		return kn__cfg_bad(
			p, "%s=%u is out of range: %u %s%s, ranks from 0",
			src[O_RANK], cfg->rank, count, name,
			kn__cfg_plural(count));
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
		return kn__cfg_bad(&p, "no configuration to fill");
	if (!envp)
		envp = environ;
	for (int i = 0; i < O_COUNT; i++) {
		const struct opt *o = kn__cfg_opt_at(i, &tmp);

		if (o->deflt) {
			ret = kn__cfg_parse_opt(&p, o, "default", o->deflt);
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
		const struct opt *o = kn__cfg_opt_at(i, &tmp);
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
		if (!v || (!o->parse && o->kind == F_NONE))
			continue;
		ret = kn__cfg_parse_opt(&p, o, src[i], v);
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
			return kn__cfg_bad(
				&p,
				"%s without a checkpoint folder: pass "
				"--checkpoint-dir DIR (or "
				"KANEL_CHECKPOINT_DIR) or --resume DIR",
				kn__cfg_opt_at(needs_dir[k], &tmp)->flag);

	if (scope->role) {
		p.cfg.role = scope->role;
		set[O_ROLE] = true;
		src[O_ROLE] = scope->command;
	}
	if (set[O_ROLE])
		ret = check_rank(&p, set, src);
	else if (set[O_RANK])
		ret = kn__cfg_bad(
			&p, "%s needs a role: pass --role (or KANEL_ROLE)",
			src[O_RANK]);
	else
		ret = from_launcher(&p, envp, set, src);
	if (ret)
		return ret;
	/* a command without the option places the coordinator itself */
	if (!set[O_COORDINATOR] &&
	    (scope->options & KN__CONFIG_OPT_COORDINATOR))
		return kn__cfg_bad(&p, "missing coordinator address: pass "
				       "--coordinator HOST:PORT or set "
				       "KANEL_COORDINATOR");
	*cfg = p.cfg;
	return 0;
}
