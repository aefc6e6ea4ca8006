/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_config.c - the job configuration of engine/config.h: defaults,
 * flags, KANEL_* variables, flag over variable over launcher, the Slurm
 * and Open MPI rank mapping, chunk sizes and durations, every error with
 * a message naming what is wrong, the usage text, name resolution.
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

#define ERRLEN 512

/* A valid command line, so that each test changes only what it tests. */
#define BASE \
	"--role", "coordinator", "--coordinator", "head:5000", "--workers", "2"

#define ARGV(...) ((char *[]){ "kanel", __VA_ARGS__, NULL })
#define ARGV0	  ((char *[]){ "kanel", NULL })
#define ENV(...)  ((char *[]){ __VA_ARGS__, NULL })

static char *no_env[] = { NULL };
static char err[ERRLEN];

static int parse(char **argv, char **env, struct kn__config *cfg)
{
	int argc = 0;

	while (argv[argc])
		argc++;
	memset(err, 0, sizeof(err));
	return kn__config_parse(argc, argv, env ? env : no_env, cfg, err,
				sizeof(err));
}

static void parse_ok(char **argv, char **env, struct kn__config *cfg)
{
	cr_assert_eq(parse(argv, env, cfg), 0, "unexpected error: %s", err);
	cr_assert_eq(err[0], '\0');
}

Test(config, defaults)
{
	struct kn__config c;

	parse_ok(ARGV(BASE), NULL, &c);
	cr_assert_eq(c.role, KN__ROLE_COORDINATOR);
	cr_assert_eq(c.rank, 0);
	cr_assert_eq(c.servers, 1);
	cr_assert_eq(c.workers, 2);
	cr_assert_str_eq(c.role_source, "--role");
	cr_assert_str_eq(c.coordinator.host, "head");
	cr_assert_eq(c.coordinator.port, 5000);
	cr_assert_str_eq(c.listen.host, "0.0.0.0");
	cr_assert_eq(c.listen.port, 0);
	cr_assert_eq(c.transport, KN__CONFIG_TCP);
	cr_assert_eq(c.sync, KN_SYNC_BSP);
	/* settled by worker 0's program: sgd, or sum for kanel.torch */
	cr_assert_eq(c.optimizer, KN__CONFIG_AUTO);
	cr_assert_eq(c.chunk_bytes, 512 * 1024);
	cr_assert_eq(c.fuse_bytes, 64 * 1024);
	cr_assert_eq(c.push_window, 4 * 1024 * 1024);
	cr_assert_float_eq(c.lr, 0.01f, 1e-9);
	cr_assert_float_eq(c.momentum, 0.9f, 1e-9);
	cr_assert_eq(c.heartbeat_timeout_ms, 3000);
	cr_assert_eq(c.startup_timeout_ms, 30000);
	cr_assert_str_eq(c.secret_file, "");
	cr_assert(!c.verbose);
	cr_assert(!c.help);
}

Test(config, every_flag)
{
	struct kn__config c;

	parse_ok(ARGV("--role", "worker", "--rank", "3", "--workers", "4",
		      "--servers=2", "--coordinator", "10.0.0.1:7000",
		      "--listen", "10.0.0.9:7001", "--transport", "verbs",
		      "--sync=asp", "--optimizer", "adam", "--lr", "0.5",
		      "--momentum", "0", "--chunk-bytes", "64K",
		      "--heartbeat-timeout", "250", "--startup-timeout", "5",
		      "--secret-file", "/run/job.secret", "--verbose"),
		 NULL, &c);
	cr_assert_eq(c.role, KN__ROLE_WORKER);
	cr_assert_eq(c.rank, 3);
	cr_assert_eq(c.workers, 4);
	cr_assert_eq(c.servers, 2);
	cr_assert_str_eq(c.coordinator.host, "10.0.0.1");
	cr_assert_eq(c.coordinator.port, 7000);
	cr_assert_str_eq(c.listen.host, "10.0.0.9");
	cr_assert_eq(c.listen.port, 7001);
	cr_assert_eq(c.transport, KN__CONFIG_VERBS);
	cr_assert_eq(c.sync, KN_SYNC_ASP);
	cr_assert_eq(c.optimizer, KN__CONFIG_ADAM);
	cr_assert_float_eq(c.lr, 0.5f, 1e-9);
	cr_assert_float_eq(c.momentum, 0.0f, 1e-9);
	cr_assert_eq(c.chunk_bytes, 64 * 1024);
	cr_assert_eq(c.heartbeat_timeout_ms, 250);
	cr_assert_eq(c.startup_timeout_ms, 5000);
	cr_assert_str_eq(c.secret_file, "/run/job.secret");
	cr_assert(c.verbose);
}

Test(config, every_variable)
{
	struct kn__config c;

	parse_ok(ARGV0,
		 ENV("KANEL_ROLE=server", "KANEL_RANK=1", "KANEL_WORKERS=8",
		     "KANEL_SERVERS=2", "KANEL_COORDINATOR=head.example:1",
		     "KANEL_LISTEN=:9000", "KANEL_TRANSPORT=verbs",
		     "KANEL_SYNC=asp", "KANEL_OPTIMIZER=sum", "KANEL_LR=2e-3",
		     "KANEL_MOMENTUM=0.95", "KANEL_CHUNK_BYTES=2M",
		     "KANEL_HEARTBEAT_TIMEOUT=2s",
		     "KANEL_STARTUP_TIMEOUT=1500ms",
		     "KANEL_SECRET_FILE=job.secret", "KANEL_VERBOSE=yes"),
		 &c);
	cr_assert_eq(c.role, KN__ROLE_SERVER);
	cr_assert_eq(c.rank, 1);
	cr_assert_str_eq(c.role_source, "KANEL_ROLE");
	cr_assert_eq(c.workers, 8);
	cr_assert_eq(c.servers, 2);
	cr_assert_str_eq(c.coordinator.host, "head.example");
	cr_assert_eq(c.coordinator.port, 1);
	cr_assert_str_eq(c.listen.host, "0.0.0.0");
	cr_assert_eq(c.listen.port, 9000);
	cr_assert_eq(c.transport, KN__CONFIG_VERBS);
	cr_assert_eq(c.sync, KN_SYNC_ASP);
	cr_assert_eq(c.optimizer, KN__CONFIG_SUM);
	cr_assert_float_eq(c.lr, 2e-3f, 1e-9);
	cr_assert_float_eq(c.momentum, 0.95f, 1e-7);
	cr_assert_eq(c.chunk_bytes, 2 * 1024 * 1024);
	cr_assert_eq(c.heartbeat_timeout_ms, 2000);
	cr_assert_eq(c.startup_timeout_ms, 1500);
	cr_assert_str_eq(c.secret_file, "job.secret");
	cr_assert(c.verbose);
}

Test(config, a_flag_wins_over_its_variable)
{
	struct kn__config c;

	parse_ok(ARGV("--role", "worker", "--rank", "0", "--workers", "3",
		      "--servers", "1", "--coordinator", "flag:1", "--listen",
		      "flag:2", "--transport", "tcp", "--sync", "bsp",
		      "--optimizer", "momentum", "--lr", "0.1", "--momentum",
		      "0.5", "--chunk-bytes", "8K", "--heartbeat-timeout", "7",
		      "--startup-timeout", "8", "--secret-file", "flag.secret",
		      "--verbose"),
		 ENV("KANEL_ROLE=server", "KANEL_RANK=1", "KANEL_WORKERS=8",
		     "KANEL_SERVERS=2", "KANEL_COORDINATOR=env:1",
		     "KANEL_LISTEN=env:2", "KANEL_TRANSPORT=verbs",
		     "KANEL_SYNC=asp", "KANEL_OPTIMIZER=sum", "KANEL_LR=9",
		     "KANEL_MOMENTUM=0.9", "KANEL_CHUNK_BYTES=2M",
		     "KANEL_HEARTBEAT_TIMEOUT=9", "KANEL_STARTUP_TIMEOUT=9",
		     "KANEL_SECRET_FILE=env.secret", "KANEL_VERBOSE=0"),
		 &c);
	cr_assert_eq(c.role, KN__ROLE_WORKER);
	cr_assert_eq(c.rank, 0);
	cr_assert_str_eq(c.role_source, "--role");
	cr_assert_eq(c.workers, 3);
	cr_assert_eq(c.servers, 1);
	cr_assert_str_eq(c.coordinator.host, "flag");
	cr_assert_str_eq(c.listen.host, "flag");
	cr_assert_eq(c.transport, KN__CONFIG_TCP);
	cr_assert_eq(c.sync, KN_SYNC_BSP);
	cr_assert_eq(c.optimizer, KN__CONFIG_MOMENTUM);
	cr_assert_float_eq(c.lr, 0.1f, 1e-9);
	cr_assert_float_eq(c.momentum, 0.5f, 1e-9);
	cr_assert_eq(c.chunk_bytes, 8192);
	cr_assert_eq(c.heartbeat_timeout_ms, 7);
	cr_assert_eq(c.startup_timeout_ms, 8000);
	cr_assert_str_eq(c.secret_file, "flag.secret");
	cr_assert(c.verbose);
}

/* A variable under a flag is not even read: a bad one is no error. */
Test(config, a_variable_under_a_flag_is_ignored)
{
	struct kn__config c;

	parse_ok(ARGV(BASE, "--sync", "asp"),
		 ENV("KANEL_ROLE=boss", "KANEL_SYNC=bogus"), &c);
	cr_assert_eq(c.role, KN__ROLE_COORDINATOR);
	cr_assert_eq(c.sync, KN_SYNC_ASP);
}

/* psp is another name for predicted, which is the name printed. */
Test(config, psp_names_predicted)
{
	struct kn__config c;

	parse_ok(ARGV(BASE, "--sync", "psp"), ENV(NULL), &c);
	cr_assert_eq(c.sync, KN_SYNC_PSP);
	cr_assert_str_eq(kn__sync_protocol_name(c.sync), "predicted");
	parse_ok(ARGV(BASE), ENV("KANEL_SYNC=psp"), &c);
	cr_assert_eq(c.sync, KN_SYNC_PSP);
}

Test(config, an_empty_variable_counts_as_unset)
{
	struct kn__config c;

	parse_ok(ARGV(BASE), ENV("KANEL_SYNC=", "KANEL_CHUNK_BYTES="), &c);
	cr_assert_eq(c.sync, KN_SYNC_BSP);
	cr_assert_eq(c.chunk_bytes, 512 * 1024);
}

/*
 * The defaults the option table gives the protocols' parameters (and
 * shows in the usage) are sync/'s own: a parse without options holds
 * what kn__sync_params_resolve makes of an empty block.
 */
Test(config, protocol_defaults_are_sync_s)
{
	struct kn__sync_params want = { 0 };
	struct kn__config c;

	parse_ok(ARGV(BASE), NULL, &c);
	cr_assert_eq(kn__sync_params_resolve(&want), 0);
	c.proto.protocol = want.protocol;
	c.proto.max_workers = want.max_workers;
	c.proto.members = want.members;
	c.proto.bytes = want.bytes;
	cr_assert_eq(memcmp(&c.proto, &want, sizeof(want)), 0);
	cr_assert_float_eq(c.proto.outer_lr, 1.0f, 1e-9);
	cr_assert_float_eq(c.proto.outer_momentum, 0.0f, 1e-9);

	parse_ok(ARGV(BASE, "--sync", "esp", "--outer-lr", "0.5",
		      "--outer-momentum", "0.9"),
		 NULL, &c);
	cr_assert_float_eq(c.proto.outer_lr, 0.5f, 1e-9);
	cr_assert_float_eq(c.proto.outer_momentum, 0.9f, 1e-7);
	cr_assert_eq(parse(ARGV(BASE, "--outer-momentum", "1"), NULL, &c),
		     -EINVAL);
	cr_assert(strstr(err, "--outer-momentum"), "%s", err);
	cr_assert_eq(parse(ARGV(BASE, "--outer-lr", "0"), NULL, &c), -EINVAL);
	cr_assert(strstr(err, "--outer-lr"), "%s", err);
}

/* CGP's options: defaults, flags, variables, a flag over its variable. */
Test(config, cgp_options)
{
	struct kn__config c;

	parse_ok(ARGV(BASE), NULL, &c);
	cr_assert_eq(c.proto.solver, KN__SYNC_CGP_AUTO);
	cr_assert_float_eq(c.proto.bound, 8.0f, 1e-9);
	cr_assert_eq(c.proto.epoch_rounds, 40);
	cr_assert_eq(c.proto.period, 100);
	cr_assert_float_eq(c.proto.latency, 100e-6f, 1e-12);
	cr_assert_float_eq(c.proto.bandwidth, 1e9f, 1);
	/* the PSP options CGP shares keep their defaults */
	cr_assert_eq(c.proto.warmup, 3);
	cr_assert_float_eq(c.proto.alpha, 0.5f, 1e-9);

	parse_ok(ARGV(BASE, "--sync", "cgp", "--cgp-solver", "pls",
		      "--cgp-bound=0.5", "--cgp-epoch", "4095", "--cgp-period",
		      "1", "--cgp-latency", "1e-9", "--cgp-bandwidth", "12.5e9",
		      "--psp-warmup", "7", "--psp-alpha", "1"),
		 NULL, &c);
	cr_assert_eq(c.sync, KN_SYNC_CGP);
	cr_assert_eq(c.proto.solver, KN__SYNC_CGP_PLS);
	cr_assert_float_eq(c.proto.bound, 0.5f, 1e-9);
	cr_assert_eq(c.proto.epoch_rounds, 4095);
	cr_assert_eq(c.proto.period, 1);
	cr_assert_float_eq(c.proto.latency, 1e-9f, 1e-15);
	cr_assert_float_eq(c.proto.bandwidth, 12.5e9f, 1);
	cr_assert_eq(c.proto.warmup, 7);
	cr_assert_float_eq(c.proto.alpha, 1.0f, 1e-9);

	parse_ok(ARGV(BASE),
		 ENV("KANEL_SYNC=cgp", "KANEL_CGP_SOLVER=aga",
		     "KANEL_CGP_BOUND=8", "KANEL_CGP_EPOCH=1",
		     "KANEL_CGP_PERIOD=4294967295", "KANEL_CGP_LATENCY=2e-3",
		     "KANEL_CGP_BANDWIDTH=1e6"),
		 &c);
	cr_assert_eq(c.sync, KN_SYNC_CGP);
	cr_assert_eq(c.proto.solver, KN__SYNC_CGP_AGA);
	cr_assert_float_eq(c.proto.bound, 8.0f, 1e-9);
	cr_assert_eq(c.proto.epoch_rounds, 1);
	cr_assert_eq(c.proto.period, 4294967295u);
	cr_assert_float_eq(c.proto.latency, 2e-3f, 1e-12);
	cr_assert_float_eq(c.proto.bandwidth, 1e6f, 1e-3);

	parse_ok(ARGV(BASE, "--cgp-solver", "auto", "--cgp-epoch", "3"),
		 ENV("KANEL_CGP_SOLVER=pls", "KANEL_CGP_EPOCH=bogus"), &c);
	cr_assert_eq(c.proto.solver, KN__SYNC_CGP_AUTO);
	cr_assert_eq(c.proto.epoch_rounds, 3);
}

/* Slurm, 1 coordinator + 2 servers + 3 workers. */
Test(config, slurm_ranks_map_to_roles)
{
	static const struct {
		enum kn__role role;
		uint32_t rank;
	} want[6] = {
		{ KN__ROLE_COORDINATOR, 0 }, { KN__ROLE_SERVER, 0 },
		{ KN__ROLE_SERVER, 1 },	     { KN__ROLE_WORKER, 0 },
		{ KN__ROLE_WORKER, 1 },	     { KN__ROLE_WORKER, 2 },
	};

	for (int r = 0; r < 6; r++) {
		char procid[32];
		struct kn__config c;

		snprintf(procid, sizeof(procid), "SLURM_PROCID=%d", r);
		parse_ok(ARGV("--servers", "2", "--coordinator", "n1:1"),
			 ENV(procid, "SLURM_NTASKS=6"), &c);
		cr_assert_eq(c.role, want[r].role, "rank %d", r);
		cr_assert_eq(c.rank, want[r].rank, "rank %d", r);
		cr_assert_eq(c.servers, 2);
		cr_assert_eq(c.workers, 3);
		cr_assert_str_eq(c.role_source, "SLURM_PROCID");
	}
}

/* Open MPI, 1 + 1 (the default) + 2; MPI wins over a stale Slurm rank. */
Test(config, mpi_ranks_map_to_roles)
{
	static const enum kn__role role[4] = { KN__ROLE_COORDINATOR,
					       KN__ROLE_SERVER, KN__ROLE_WORKER,
					       KN__ROLE_WORKER };
	static const uint32_t rank[4] = { 0, 0, 0, 1 };

	for (int r = 0; r < 4; r++) {
		char ompi[40];
		struct kn__config c;

		snprintf(ompi, sizeof(ompi), "OMPI_COMM_WORLD_RANK=%d", r);
		parse_ok(ARGV("--coordinator", "n1:1"),
			 ENV("SLURM_PROCID=0", "SLURM_NTASKS=1", ompi,
			     "OMPI_COMM_WORLD_SIZE=4"),
			 &c);
		cr_assert_eq(c.role, role[r], "rank %d", r);
		cr_assert_eq(c.rank, rank[r], "rank %d", r);
		cr_assert_eq(c.servers, 1);
		cr_assert_eq(c.workers, 2);
		cr_assert_str_eq(c.role_source, "OMPI_COMM_WORLD_RANK");
	}
}

Test(config, launcher_counts_are_derived_from_the_size)
{
	struct kn__config c;

	/* workers given: the servers are the rest */
	parse_ok(ARGV("--workers", "5", "--coordinator", "n1:1"),
		 ENV("SLURM_PROCID=3", "SLURM_NTASKS=9"), &c);
	cr_assert_eq(c.servers, 3);
	cr_assert_eq(c.workers, 5);
	cr_assert_eq(c.role, KN__ROLE_SERVER);
	cr_assert_eq(c.rank, 2);
	/* both given and consistent */
	parse_ok(ARGV("--workers", "5", "--servers", "3", "--coordinator",
		      "n1:1"),
		 ENV("SLURM_PROCID=8", "SLURM_NTASKS=9"), &c);
	cr_assert_eq(c.role, KN__ROLE_WORKER);
	cr_assert_eq(c.rank, 4);
	/* the counts from the environment, the size from the launcher */
	parse_ok(ARGV("--coordinator", "n1:1"),
		 ENV("KANEL_SERVERS=2", "SLURM_PROCID=2", "SLURM_NTASKS=4"),
		 &c);
	cr_assert_eq(c.role, KN__ROLE_SERVER);
	cr_assert_eq(c.rank, 1);
	cr_assert_eq(c.workers, 1);
}

Test(config, a_variable_wins_over_the_launcher)
{
	struct kn__config c;

	/* an explicit role means the launcher's variables are not used */
	parse_ok(ARGV("--coordinator", "n1:1"),
		 ENV("KANEL_ROLE=worker", "KANEL_RANK=1", "KANEL_WORKERS=2",
		     "SLURM_PROCID=0", "SLURM_NTASKS=99"),
		 &c);
	cr_assert_eq(c.role, KN__ROLE_WORKER);
	cr_assert_eq(c.rank, 1);
	cr_assert_eq(c.workers, 2);
	cr_assert_str_eq(c.role_source, "KANEL_ROLE");
	/* a count from a variable beats the derived one */
	parse_ok(ARGV("--coordinator", "n1:1"),
		 ENV("KANEL_WORKERS=2", "KANEL_SERVERS=1", "SLURM_PROCID=3",
		     "SLURM_NTASKS=4"),
		 &c);
	cr_assert_eq(c.role, KN__ROLE_WORKER);
	cr_assert_eq(c.rank, 1);
}

Test(config, a_flag_wins_over_variable_and_launcher)
{
	struct kn__config c;

	parse_ok(ARGV("--role", "server", "--rank", "0", "--workers", "1",
		      "--coordinator", "n1:1"),
		 ENV("KANEL_ROLE=worker", "KANEL_RANK=1", "KANEL_WORKERS=2",
		     "OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=4"),
		 &c);
	cr_assert_eq(c.role, KN__ROLE_SERVER);
	cr_assert_eq(c.rank, 0);
	cr_assert_eq(c.workers, 1);
	cr_assert_str_eq(c.role_source, "--role");
}

/* A single server or worker needs no rank; the coordinator's is 0. */
Test(config, rank_defaults_to_zero_when_there_is_one)
{
	struct kn__config c;

	parse_ok(ARGV("--role", "server", "--workers", "3", "--coordinator",
		      "n1:1"),
		 NULL, &c);
	cr_assert_eq(c.role, KN__ROLE_SERVER);
	cr_assert_eq(c.rank, 0);
	parse_ok(ARGV("--role", "worker", "--workers", "1", "--coordinator",
		      "n1:1"),
		 NULL, &c);
	cr_assert_eq(c.rank, 0);
	parse_ok(ARGV(BASE, "--rank", "0"), NULL, &c);
	cr_assert_eq(c.role, KN__ROLE_COORDINATOR);
}

Test(config, addresses)
{
	struct kn__config c;

	parse_ok(ARGV(BASE, "--coordinator", "[::1]:65535", "--listen",
		      "node-7.cluster_a.local:0"),
		 NULL, &c);
	cr_assert_str_eq(c.coordinator.host, "::1");
	cr_assert_eq(c.coordinator.port, 65535);
	cr_assert_str_eq(c.listen.host, "node-7.cluster_a.local");
	cr_assert_eq(c.listen.port, 0);
}

/* A value of a size option and what it gives (@ok false: refused). */
struct size_case {
	const char *val;
	uint32_t bytes;
	bool ok;
};

/* @opt with each of the @n @cases: accepted, the uint32_t at @field of
 * the config then the case's bytes, or refused with @opt named. */
static void check_sizes(const char *opt, size_t field,
			const struct size_case *cases, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct kn__config c;
		char *v = (char *)cases[i].val;
		int ret = parse(ARGV(BASE, (char *)opt, v), NULL, &c);
		uint32_t got;

		if (cases[i].ok) {
			cr_assert_eq(ret, 0, "%s: %s", v, err);
			memcpy(&got, (const char *)&c + field, sizeof(got));
			cr_assert_eq(got, cases[i].bytes, "%s", v);
		} else {
			cr_assert_eq(ret, -EINVAL, "%s accepted", v);
			cr_assert_not_null(strstr(err, opt), "%s", err);
		}
	}
}

Test(config, chunk_sizes_take_suffixes_and_limits)
{
	static const struct size_case cases[] = {
		{ "4096", 4096, true },
		{ "4K", 4096, true },
		{ "4k", 4096, true },
		{ "4KiB", 4096, true },
		{ "1M", 1u << 20, true },
		{ "8m", 8u << 20, true },
		{ "3MiB", 3u << 20, true },
		{ "1024M", 1u << 30, true },
		{ "1048576", 1u << 20, true },
		{ "5000", 5000, true },
		{ "4092", 0, false },	  /* below 4 KiB */
		{ "3K", 0, false },	  /* below 4 KiB */
		{ "4098", 0, false },	  /* not a multiple of 4 */
		{ "1025M", 0, false },	  /* above 1 GiB */
		{ "4194304K", 0, false }, /* above 1 GiB */
		{ "99999999999", 0, false },
		{ "4G", 0, false },
		{ "4 K", 0, false },
		{ "4KB", 0, false },
		{ "K", 0, false },
		{ "-4K", 0, false },
		{ "+4K", 0, false },
		{ "", 0, false },
		{ "0x1000", 0, false },
	};

	check_sizes("--chunk-bytes", offsetof(struct kn__config, chunk_bytes),
		    cases, sizeof(cases) / sizeof(cases[0]));
}

Test(config, fuse_bytes_is_0_to_1M)
{
	static const struct size_case cases[] = {
		{ "0", 0, true },
		{ "100", 100, true },
		{ "64K", 65536, true },
		{ "1m", 1048576, true },
		{ "1024KiB", 1048576, true },
		{ "1025K", 0, false },
		{ "2M", 0, false },
		{ "4KB", 0, false },
		{ "-1", 0, false },
		{ "", 0, false },
	};

	check_sizes("--fuse-bytes", offsetof(struct kn__config, fuse_bytes),
		    cases, sizeof(cases) / sizeof(cases[0]));
}

Test(config, push_window_is_0_to_1024M)
{
	struct kn__config c;

	parse_ok(ARGV(BASE, "--push-window", "0"), NULL, &c);
	cr_assert_eq(c.push_window, 0);
	parse_ok(ARGV(BASE, "--push-window", "512K"), NULL, &c);
	cr_assert_eq(c.push_window, 512 * 1024);
	cr_assert_eq(parse(ARGV(BASE, "--push-window", "1025M"), NULL, &c),
		     -EINVAL);
	cr_assert_not_null(strstr(err, "--push-window"), "%s", err);
}

Test(config, durations_take_units)
{
	struct kn__config c;

	parse_ok(ARGV(BASE, "--heartbeat-timeout", "2s", "--startup-timeout",
		      "250ms"),
		 NULL, &c);
	cr_assert_eq(c.heartbeat_timeout_ms, 2000);
	cr_assert_eq(c.startup_timeout_ms, 250);
	parse_ok(ARGV(BASE, "--startup-timeout", "86400"), NULL, &c);
	cr_assert_eq(c.startup_timeout_ms, 86400000);
}

/* Every error: -EINVAL, a message naming the culprit, @cfg untouched. */
Test(config, every_error_names_the_culprit)
{
	static const struct {
		char *argv[16];
		char *env[6];
		const char *needle, *needle2;
	} cases[] = {
		{ { "--bogus", BASE }, { NULL }, "'--bogus'" },
		{ { BASE, "--workers" }, { NULL }, "--workers needs a value" },
		{ { BASE, "--verbose=1" },
		  { NULL },
		  "--verbose takes no value" },
		{ { BASE, "-v" }, { NULL }, "'-v'" },
		{ { BASE, "stray" }, { NULL }, "'stray'" },
		{ { BASE, "--", "stray" }, { NULL }, "'stray'" },
		{ { "--s", BASE }, { NULL }, "'--s'" },
		{ { "--role", "boss", "--coordinator", "h:1", "--workers",
		    "2" },
		  { NULL },
		  "--role='boss'",
		  "coordinator, server, worker" },
		{ { "--coordinator", "h:1", "--workers", "2" },
		  { "KANEL_ROLE=boss" },
		  "KANEL_ROLE='boss'" },
		{ { BASE, "--workers", "abc" }, { NULL }, "--workers='abc'" },
		{ { BASE, "--workers", "0" }, { NULL }, "--workers=0" },
		{ { BASE, "--workers", "65537" }, { NULL }, "--workers=65537" },
		{ { BASE, "--workers", "4294967296" },
		  { NULL },
		  "--workers='4294967296': too large" },
		{ { BASE, "--servers", "-1" }, { NULL }, "--servers='-1'" },
		{ { "--role", "coordinator", "--coordinator", "h:1" },
		  { "KANEL_WORKERS=two" },
		  "KANEL_WORKERS='two'" },
		{ { BASE, "--rank", "x" }, { NULL }, "--rank='x'" },
		{ { BASE, "--transport", "udp" },
		  { NULL },
		  "--transport='udp'" },
		{ { BASE, "--sync", "hogwild" },
		  { NULL },
		  "--sync='hogwild'",
		  "bsp, asp, ssp, esp, predicted, psp, cgp" },
		{ { BASE, "--cgp-solver", "ga" },
		  { NULL },
		  "--cgp-solver='ga'",
		  "aga, pls, auto" },
		{ { BASE },
		  { "KANEL_CGP_SOLVER=AGA" },
		  "KANEL_CGP_SOLVER='AGA'" },
		{ { BASE, "--cgp-bound", "0" }, { NULL }, "--cgp-bound='0'" },
		{ { BASE, "--cgp-bound", "-1" }, { NULL }, "--cgp-bound='-1'" },
		{ { BASE, "--cgp-bound", "inf" },
		  { NULL },
		  "--cgp-bound='inf'" },
		{ { BASE, "--cgp-epoch", "0" }, { NULL }, "--cgp-epoch=0" },
		{ { BASE, "--cgp-epoch", "4096" },
		  { NULL },
		  "--cgp-epoch=4096",
		  "between 1 and 4095" },
		{ { BASE }, { "KANEL_CGP_EPOCH=x" }, "KANEL_CGP_EPOCH='x'" },
		{ { BASE, "--cgp-period", "0" }, { NULL }, "--cgp-period=0" },
		{ { BASE, "--cgp-period", "4294967296" },
		  { NULL },
		  "--cgp-period='4294967296': too large" },
		{ { BASE, "--cgp-latency", "-1e-6" },
		  { NULL },
		  "--cgp-latency='-1e-6'" },
		{ { BASE, "--cgp-latency", "nan" },
		  { NULL },
		  "--cgp-latency='nan'" },
		{ { BASE, "--cgp-latency", "0" },
		  { NULL },
		  "--cgp-latency='0'" },
		{ { BASE, "--cgp-bandwidth", "0" },
		  { NULL },
		  "--cgp-bandwidth='0'" },
		{ { BASE },
		  { "KANEL_CGP_BANDWIDTH=1e39" },
		  "KANEL_CGP_BANDWIDTH" },
		{ { BASE, "--staleness", "0" }, { NULL }, "--staleness=0" },
		{ { BASE }, { "KANEL_SYNC=BSP" }, "KANEL_SYNC='BSP'" },
		{ { BASE, "--optimizer", "lamb" },
		  { NULL },
		  "--optimizer='lamb'" },
		{ { BASE, "--lr", "0" }, { NULL }, "--lr='0'" },
		{ { BASE, "--lr", "-1" }, { NULL }, "--lr='-1'" },
		{ { BASE, "--lr", "fast" }, { NULL }, "--lr='fast'" },
		{ { BASE, "--lr", "nan" }, { NULL }, "--lr='nan'" },
		{ { BASE, "--lr", "inf" }, { NULL }, "--lr='inf'" },
		{ { BASE, "--lr", "1e999" }, { NULL }, "--lr='1e999'" },
		{ { BASE, "--momentum", "1" }, { NULL }, "--momentum='1'" },
		{ { BASE, "--momentum", "0.999999999" },
		  { NULL },
		  "--momentum='0.999999999'" }, /* 1 as a float */
		{ { BASE, "--lr", "1e-50" }, { NULL }, "--lr='1e-50'" },
		{ { BASE, "--lr", "1e39" }, { NULL }, "--lr='1e39'" },
		{ { BASE, "--momentum", "-0.1" },
		  { NULL },
		  "--momentum='-0.1'" },
		{ { BASE, "--heartbeat-timeout", "0" },
		  { NULL },
		  "--heartbeat-timeout='0'" },
		{ { BASE, "--heartbeat-timeout", "5h" },
		  { NULL },
		  "--heartbeat-timeout='5h'" },
		{ { BASE, "--startup-timeout", "86401" },
		  { NULL },
		  "--startup-timeout='86401'" },
		{ { BASE, "--startup-timeout", "4294967295" },
		  { NULL },
		  "--startup-timeout" },
		{ { BASE, "--secret-file", "" }, { NULL }, "--secret-file" },
		{ { BASE },
		  { "KANEL_VERBOSE=maybe" },
		  "KANEL_VERBOSE='maybe'" },
		{ { "--role", "coordinator", "--workers", "2" },
		  { NULL },
		  "--coordinator",
		  "KANEL_COORDINATOR" },
		{ { BASE, "--coordinator", "head" },
		  { NULL },
		  "--coordinator='head'" },
		{ { BASE, "--coordinator", "head:" },
		  { NULL },
		  "--coordinator" },
		{ { BASE, "--coordinator", ":5000" },
		  { NULL },
		  "--coordinator" },
		{ { BASE, "--coordinator", "head:0" },
		  { NULL },
		  "must not be 0" },
		{ { BASE, "--coordinator", "head:65536" },
		  { NULL },
		  "--coordinator" },
		{ { BASE, "--coordinator", "head:5x" },
		  { NULL },
		  "--coordinator" },
		{ { BASE, "--coordinator", "he ad:1" },
		  { NULL },
		  "--coordinator" },
		{ { BASE, "--coordinator", "-head:1" },
		  { NULL },
		  "--coordinator" },
		{ { BASE, "--coordinator", "::1:5" }, { NULL }, "brackets" },
		{ { BASE, "--coordinator", "[::1]5" },
		  { NULL },
		  "--coordinator" },
		{ { BASE, "--coordinator", "[zz]:5" }, { NULL }, "IPv6" },
		{ { BASE, "--coordinator", "[]:5" },
		  { NULL },
		  "--coordinator" },
		{ { BASE }, { "KANEL_LISTEN=x y:1" }, "KANEL_LISTEN" },
		{ { BASE, "--listen", "[::1]:" }, { NULL }, "--listen" },
		{ { "--rank", "1", "--coordinator", "h:1", "--workers", "2" },
		  { NULL },
		  "--rank needs a role" },
		{ { "--coordinator", "h:1", "--workers", "2" },
		  { "KANEL_RANK=1", "SLURM_PROCID=0", "SLURM_NTASKS=4" },
		  "KANEL_RANK needs a role" },
		{ { "--role", "worker", "--workers", "4", "--coordinator",
		    "h:1" },
		  { NULL },
		  "--rank missing",
		  "4 workers" },
		{ { "--role", "worker", "--rank", "4", "--workers", "4",
		    "--coordinator", "h:1" },
		  { NULL },
		  "--rank=4",
		  "4 workers" },
		{ { "--role", "server", "--workers", "4", "--coordinator",
		    "h:1" },
		  { "KANEL_RANK=1" },
		  "KANEL_RANK=1",
		  "1 server," },
		{ { BASE, "--rank", "1" },
		  { NULL },
		  "--rank=1",
		  "coordinator" },
		{ { "--role", "worker", "--coordinator", "h:1" },
		  { NULL },
		  "--workers",
		  "KANEL_WORKERS" },
		{ { "--coordinator", "h:1", "--workers", "2" },
		  { NULL },
		  "--role",
		  "KANEL_ROLE" },
		{ { "--coordinator", "h:1" },
		  { "SLURM_PROCID=1" },
		  "SLURM_PROCID is set but SLURM_NTASKS is not" },
		{ { "--coordinator", "h:1" },
		  { "OMPI_COMM_WORLD_SIZE=4", "SLURM_PROCID=1",
		    "SLURM_NTASKS=4" },
		  "OMPI_COMM_WORLD_SIZE is set but OMPI_COMM_WORLD_RANK" },
		{ { "--coordinator", "h:1" },
		  { "SLURM_PROCID=one", "SLURM_NTASKS=4" },
		  "SLURM_PROCID='one'" },
		{ { "--coordinator", "h:1" },
		  { "SLURM_PROCID=1", "SLURM_NTASKS=" },
		  "SLURM_NTASKS=''" },
		{ { "--coordinator", "h:1" },
		  { "SLURM_PROCID=4", "SLURM_NTASKS=4" },
		  "SLURM_PROCID=4 is not below SLURM_NTASKS=4" },
		{ { "--coordinator", "h:1" },
		  { "SLURM_PROCID=0", "SLURM_NTASKS=2" },
		  "SLURM_NTASKS=2 leaves no worker" },
		{ { "--coordinator", "h:1", "--workers", "3" },
		  { "SLURM_PROCID=0", "SLURM_NTASKS=4" },
		  "SLURM_NTASKS=4 leaves no server" },
		{ { "--coordinator", "h:1", "--workers", "3", "--servers",
		    "2" },
		  { "OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=7" },
		  "OMPI_COMM_WORLD_SIZE=7",
		  "2 servers (--servers) + 3 workers (--workers) = 6" },
		{ { "--coordinator", "h:1" },
		  { "KANEL_WORKERS=3", "KANEL_SERVERS=2", "SLURM_PROCID=0",
		    "SLURM_NTASKS=5" },
		  "SLURM_NTASKS=5",
		  "(KANEL_SERVERS) + 3 workers (KANEL_WORKERS) = 6" },
		{ { "--coordinator", "h:1" },
		  { "SLURM_PROCID=0", "SLURM_NTASKS=100000" },
		  "SLURM_NTASKS=100000",
		  "65536 workers" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *argv[17] = { "kanel" };
		struct kn__config c, before;
		int ret;

		memcpy(argv + 1, cases[i].argv, sizeof(cases[i].argv));
		memset(&c, 0x5a, sizeof(c));
		before = c;
		ret = parse(argv, (char **)cases[i].env, &c);
		cr_assert_eq(ret, -EINVAL, "case %zu (%s) accepted", i,
			     cases[i].needle);
		cr_assert_not_null(strstr(err, cases[i].needle),
				   "case %zu: '%s' not in '%s'", i,
				   cases[i].needle, err);
		if (cases[i].needle2)
			cr_assert_not_null(strstr(err, cases[i].needle2),
					   "case %zu: '%s' not in '%s'", i,
					   cases[i].needle2, err);
		cr_assert_eq(memcmp(&c, &before, sizeof(c)), 0,
			     "case %zu wrote the configuration", i);
		cr_assert_null(strchr(err, '\n'), "one line: %s", err);
	}
}

Test(config, a_long_host_or_path_is_refused)
{
	char host[KN_CONFIG_HOST_MAX + 8], path[KN_CONFIG_PATH_MAX + 1];
	struct kn__config c;

	memset(host, 'h', sizeof(host));
	strcpy(host + KN_CONFIG_HOST_MAX, ":1");
	cr_assert_eq(parse(ARGV(BASE, "--coordinator", host), NULL, &c),
		     -EINVAL);
	cr_assert_not_null(strstr(err, "--coordinator"), "%s", err);
	/* the longest that fits is fine */
	strcpy(host + KN_CONFIG_HOST_MAX - 1, ":1");
	parse_ok(ARGV(BASE, "--coordinator", host), NULL, &c);
	cr_assert_eq(strlen(c.coordinator.host), KN_CONFIG_HOST_MAX - 1);

	memset(path, 'p', sizeof(path) - 1);
	path[sizeof(path) - 1] = '\0';
	cr_assert_eq(parse(ARGV(BASE, "--secret-file", path), NULL, &c),
		     -EINVAL);
	cr_assert_not_null(strstr(err, "--secret-file"), "%s", err);
}

/* Parsing again starts afresh (optind is reset), and argv stays as is. */
Test(config, parse_is_repeatable_and_leaves_argv_alone)
{
	char **a = ARGV(BASE, "--sync", "asp");
	char *copy[8];
	struct kn__config c;

	memcpy(copy, a, sizeof(copy));
	parse_ok(a, NULL, &c);
	cr_assert_eq(c.sync, KN_SYNC_ASP);
	cr_assert_eq(memcmp(copy, a, sizeof(copy)), 0);
	cr_assert_eq(parse(ARGV(BASE, "--nope"), NULL, &c), -EINVAL);
	/* an operand stops the scan: nothing is moved behind it */
	a = ARGV("--sync", "asp", "stray", BASE);
	memcpy(copy, a, sizeof(copy));
	cr_assert_eq(parse(a, NULL, &c), -EINVAL);
	cr_assert_not_null(strstr(err, "'stray'"), "%s", err);
	cr_assert_eq(memcmp(copy, a, sizeof(copy)), 0);
	parse_ok(ARGV(BASE), NULL, &c);
	cr_assert_eq(c.sync, KN_SYNC_BSP);
	/* no flags at all (argc 1) and no argv at all */
	parse_ok(ARGV0,
		 ENV("KANEL_ROLE=coordinator", "KANEL_WORKERS=1",
		     "KANEL_COORDINATOR=h:1"),
		 &c);
	cr_assert_eq(kn__config_parse(0, NULL,
				      ENV("KANEL_ROLE=coordinator",
					  "KANEL_WORKERS=1",
					  "KANEL_COORDINATOR=h:1"),
				      &c, NULL, 0),
		     0);
	cr_assert_eq(
		kn__config_parse(1, ARGV(BASE), no_env, NULL, err, sizeof(err)),
		-EINVAL);
}

Test(config, help_needs_nothing_else)
{
	struct kn__config c;

	parse_ok(ARGV("--help"), NULL, &c);
	cr_assert(c.help);
	parse_ok(ARGV("--sync", "asp", "--help"), ENV("KANEL_SYNC=bogus"), &c);
	cr_assert(c.help);
	cr_assert_eq(parse(ARGV("--bogus", "--help"), NULL, &c), -EINVAL);
}

Test(config, usage_lists_every_option_variable_and_default)
{
	static const char *const want[] = {
		"--role coordinator|server|worker",
		"KANEL_ROLE",
		"--rank R",
		"KANEL_RANK",
		"--servers M",
		"KANEL_SERVERS",
		"--workers N",
		"KANEL_WORKERS",
		"--coordinator HOST:PORT",
		"KANEL_COORDINATOR",
		"--listen HOST:PORT",
		"KANEL_LISTEN",
		"default 0.0.0.0:0]",
		"--transport tcp|verbs",
		"KANEL_TRANSPORT",
		"default tcp]",
		"--sync bsp|asp|ssp|esp|predicted|psp|cgp",
		"KANEL_SYNC",
		"default bsp]",
		"--cgp-solver aga|pls|auto",
		"KANEL_CGP_SOLVER, default auto]",
		"--cgp-bound S",
		"KANEL_CGP_BOUND, default 8]",
		"--cgp-epoch R",
		"KANEL_CGP_EPOCH, default 40]",
		"--cgp-period T",
		"KANEL_CGP_PERIOD, default 100]",
		"--cgp-latency SECONDS",
		"KANEL_CGP_LATENCY, default 100e-6]",
		"--cgp-bandwidth BYTES_PER_S",
		"KANEL_CGP_BANDWIDTH, default 1e9]",
		"predicted, cgp: barriers under BSP",
		"predicted, cgp: weight of the newest timing",
		"--optimizer sgd|momentum|adam|sum|auto",
		"KANEL_OPTIMIZER",
		"--lr RATE",
		"KANEL_LR",
		"--momentum MU",
		"KANEL_MOMENTUM",
		"--chunk-bytes BYTES",
		"KANEL_CHUNK_BYTES",
		"default 512K]",
		"--heartbeat-timeout MS",
		"KANEL_HEARTBEAT_TIMEOUT",
		"default 3000]",
		"--startup-timeout S",
		"KANEL_STARTUP_TIMEOUT",
		"default 30]",
		"--secret-file PATH",
		"KANEL_SECRET_FILE",
		"KANEL_SECRET",
		"--restore-secret-file PATH",
		"KANEL_RESTORE_SECRET_FILE, the job's own]",
		"--verbose",
		"KANEL_VERBOSE",
		"--help",
	};
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	char *line;

	cr_assert_not_null(f);
	kn__config_usage(f);
	fclose(f);
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		cr_assert_not_null(strstr(text, want[i]), "'%s' missing",
				   want[i]);
	for (line = text; *line;) {
		char *nl = strchr(line, '\n');
		size_t n = nl ? (size_t)(nl - line) : strlen(line);

		cr_assert_leq(n, 79, "line too long: %.*s", (int)n, line);
		line += n + (nl != NULL);
	}
	free(text);
}

Test(config, names)
{
	cr_assert_str_eq(kn__role_name(KN__ROLE_COORDINATOR), "coordinator");
	cr_assert_str_eq(kn__role_name(KN__ROLE_SERVER), "server");
	cr_assert_str_eq(kn__role_name(KN__ROLE_WORKER), "worker");
	cr_assert_null(kn__role_name((enum kn__role)0));
	cr_assert_str_eq(kn__config_transport_name(KN__CONFIG_VERBS), "verbs");
	cr_assert_str_eq(kn__sync_protocol_name(KN_SYNC_ASP), "asp");
	cr_assert_str_eq(kn__config_optimizer_name(KN__CONFIG_SUM), "sum");
	cr_assert_str_eq(kn__sync_protocol_name(KN_SYNC_CGP), "cgp");
	cr_assert_str_eq(kn__sync_cgp_solver_name(KN__SYNC_CGP_AUTO), "auto");
	cr_assert_str_eq(kn__sync_cgp_solver_name(KN__SYNC_CGP_AGA), "aga");
	cr_assert_str_eq(kn__sync_cgp_solver_name(KN__SYNC_CGP_PLS), "pls");
	cr_assert_null(kn__sync_cgp_solver_name(3));
	cr_assert_null(kn__config_optimizer_name((enum kn__config_optimizer)9));
}

Test(config, resolve)
{
	struct kn__config_addr v4 = { "127.0.0.1", 5000 };
	struct kn__config_addr v6 = { "::1", 7 };
	struct kn__config_addr any = { "0.0.0.0", 0 };
	struct kn__config_addr local = { "localhost", 80 };
	struct kn__config_addr empty = { "", 1 };
	struct sockaddr_storage ss;
	struct sockaddr_in *in = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
	socklen_t len;

	cr_assert_eq(kn__config_resolve(&v4, &ss, &len), 0);
	cr_assert_eq(ss.ss_family, AF_INET);
	cr_assert_eq(len, sizeof(*in));
	cr_assert_eq(ntohs(in->sin_port), 5000);
	cr_assert_eq(ntohl(in->sin_addr.s_addr), INADDR_LOOPBACK);

	cr_assert_eq(kn__config_resolve(&any, &ss, &len), 0);
	cr_assert_eq(in->sin_addr.s_addr, htonl(INADDR_ANY));
	cr_assert_eq(in->sin_port, 0);

	cr_assert_eq(kn__config_resolve(&v6, &ss, &len), 0);
	cr_assert_eq(ss.ss_family, AF_INET6);
	cr_assert_eq(ntohs(in6->sin6_port), 7);
	cr_assert(IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr));

	/* a name gives IPv4, whatever the resolver lists first */
	cr_assert_eq(kn__config_resolve(&local, &ss, &len), 0);
	cr_assert_eq(ss.ss_family, AF_INET);
	cr_assert_eq(ntohl(in->sin_addr.s_addr) >> 24, 127);

	cr_assert_eq(kn__config_resolve(&empty, &ss, &len), -EINVAL);
}

/* A value that is the next option is a missing value, named as such. */
Test(config, a_missing_value_names_its_option)
{
	struct kn__config c;

	cr_assert_eq(parse(ARGV(BASE, "--lr", "--momentum", "0.9"), NULL, &c),
		     -EINVAL);
	cr_assert_not_null(strstr(err, "--lr needs a value"), "%s", err);
	cr_assert_not_null(strstr(err, "'--momentum'"), "%s", err);
	/* at the end of argv, even written short (getopt's prefix match) */
	cr_assert_eq(parse(ARGV(BASE, "--lr"), NULL, &c), -EINVAL);
	cr_assert_str_eq(err, "--lr needs a value");
	cr_assert_eq(parse(ARGV(BASE, "--moment"), NULL, &c), -EINVAL);
	cr_assert_str_eq(err, "--momentum needs a value");
	/* given with '=', a value is taken as it is */
	cr_assert_eq(parse(ARGV(BASE, "--metrics=--x"), NULL, &c), 0, "%s",
		     err);
	cr_assert_str_eq(c.metrics, "--x");
}

/* Digits and dots only: an IPv4 literal, checked as one. */
Test(config, a_bad_ipv4_literal_is_named)
{
	struct kn__config c;
	static char *bad_hosts[] = { "999.0.0.1:7000", "1.2.3:7000",
				     "1.2.3.4.5:7000", "256.1.1.1:1" };

	for (size_t i = 0; i < sizeof(bad_hosts) / sizeof(bad_hosts[0]); i++) {
		char host[32];

		cr_assert_eq(parse(ARGV(BASE, "--coordinator", bad_hosts[i]),
				   NULL, &c),
			     -EINVAL, "%s accepted", bad_hosts[i]);
		snprintf(host, sizeof(host), "'%.*s' is not an IPv4 address",
			 (int)(strchr(bad_hosts[i], ':') - bad_hosts[i]),
			 bad_hosts[i]);
		cr_assert_not_null(strstr(err, host), "%s", err);
		cr_assert_not_null(strstr(err, "--coordinator"), "%s", err);
	}
	cr_assert_eq(parse(ARGV(BASE), ENV("KANEL_LISTEN=10.0.0.300:0"), &c),
		     -EINVAL);
	cr_assert_not_null(strstr(err, "KANEL_LISTEN='10.0.0.300:0'"), "%s",
			   err);
	parse_ok(ARGV(BASE, "--listen", "10.1.2.3:0", "--coordinator",
		      "127.0.0.1:7000"),
		 NULL, &c);
	cr_assert_str_eq(c.listen.host, "10.1.2.3");
	/* a name with a digit-only label is still a name */
	parse_ok(ARGV(BASE, "--coordinator", "node01.1:7000"), NULL, &c);
}

/* A command's scope: its flags only, its variables only, its role. */
Test(config, a_scope_refuses_other_flags)
{
	static const struct kn__config_scope train = {
		.command = "kanel train",
		.options = KN__CONFIG_OPT_COUNTS | KN__CONFIG_OPT_COMMON |
			   KN__CONFIG_OPT_JOB,
		.role = KN__ROLE_COORDINATOR,
	};
	struct kn__config c;
	char **a = ARGV("--workers", "2", "--listen", "0.0.0.0:1");

	cr_assert_eq(
		kn__config_parse_as(&train, 5, a, no_env, &c, err, sizeof(err)),
		-EINVAL);
	cr_assert_str_eq(err, "--listen is not an option of kanel train (see "
			      "kanel train --help)");
	/* the same as a variable is not read, nor is the coordinator
	 * required when the command places it */
	cr_assert_eq(
		kn__config_parse_as(&train, 3, a,
				    ENV("KANEL_LISTEN=bad", "KANEL_ROLE=worker",
					"KANEL_SYNC=asp"),
				    &c, err, sizeof(err)),
		0, "%s", err);
	cr_assert_eq(c.role, KN__ROLE_COORDINATOR);
	cr_assert_str_eq(c.role_source, "kanel train");
	cr_assert_eq(c.sync, KN_SYNC_ASP);
	cr_assert_str_eq(c.listen.host, "0.0.0.0");
	/* --role itself is the command's */
	a = ARGV("--workers", "2", "--role", "worker");
	cr_assert_eq(
		kn__config_parse_as(&train, 5, a, no_env, &c, err, sizeof(err)),
		-EINVAL);
	cr_assert_not_null(strstr(err, "--role is not an option of kanel "
				       "train"),
			   "%s", err);
	/* --help always */
	a = ARGV("--listen", "x", "--help");
	cr_assert_eq(kn__config_parse_as(&train, 2, a + 2, no_env, &c, err,
					 sizeof(err)),
		     0, "%s", err);
	cr_assert(c.help);
	/* NULL: every option, as kn__config_parse */
	cr_assert_eq(kn__config_parse_as(NULL, 7, ARGV(BASE), no_env, &c, err,
					 sizeof(err)),
		     0, "%s", err);
}

/* The usage of a scope lists its options and no other. */
Test(config, usage_of_a_scope)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	cr_assert_not_null(f);
	kn__config_usage_of(f, KN__CONFIG_OPT_RANK | KN__CONFIG_OPT_COMMON);
	fclose(f);
	cr_assert_not_null(strstr(text, "--rank R"), "%s", text);
	cr_assert_not_null(strstr(text, "--transport"), "%s", text);
	cr_assert_not_null(strstr(text, "--help"), "%s", text);
	cr_assert_null(strstr(text, "--sync"), "%s", text);
	cr_assert_null(strstr(text, "--listen"), "%s", text);
	cr_assert_null(strstr(text, "Usage: kanel"), "%s", text);
	free(text);
}

/* The help says what the parser takes. */
Test(config, cgp_latency_help_matches_the_parser)
{
	struct kn__config c;
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	cr_assert_not_null(f);
	kn__config_usage(f);
	fclose(f);
	cr_assert_eq(parse(ARGV(BASE, "--cgp-latency", "0"), NULL, &c),
		     -EINVAL);
	cr_assert_null(strstr(text, "0 or more"), "help promises 0: %s",
		       strstr(text, "0 or more"));
	free(text);
}

extern char **environ;

/*
 * What kn__config_export writes, a parse reads back: every option of the
 * table, none listed by hand, so a new option cannot be forgotten.
 */
Test(config, export_reads_back_as_the_same_configuration)
{
	struct kn__config a, b;

	parse_ok(ARGV("--role", "server", "--rank", "1", "--servers", "2",
		      "--workers", "3", "--coordinator", "[::1]:5001",
		      "--listen", "127.0.0.1:7000", "--sync", "cgp",
		      "--optimizer", "adam", "--lr", "0.123456789",
		      "--momentum", "0.3", "--staleness", "5", "--esp-max-skip",
		      "4", "--esp-gamma", "2.5", "--esp-theta", "0.02",
		      "--psp-max-steps", "7", "--psp-warmup", "2",
		      "--psp-alpha", "0.75", "--psp-miss", "0.5",
		      "--cgp-solver", "pls", "--cgp-bound", "3", "--cgp-epoch",
		      "9", "--cgp-period", "11", "--cgp-latency", "3e-5",
		      "--cgp-bandwidth", "2.5e9", "--outer-lr", "0.7",
		      "--outer-momentum", "0.4", "--chunk-bytes", "64K",
		      "--heartbeat-timeout", "1500ms", "--startup-timeout",
		      "12s", "--secret-file", "/s", "--metrics", "/m",
		      "--verbose"),
		 no_env, &a);
	cr_assert_eq(clearenv(), 0);
	cr_assert_eq(kn__config_export(&a, KN__CONFIG_OPT_ALL), 0);
	parse_ok(ARGV0, environ, &b);
	cr_assert_eq(b.role, a.role);
	cr_assert_eq(b.rank, a.rank);
	cr_assert_eq(b.servers, a.servers);
	cr_assert_eq(b.workers, a.workers);
	cr_assert_str_eq(b.coordinator.host, a.coordinator.host);
	cr_assert_eq(b.coordinator.port, a.coordinator.port);
	cr_assert_str_eq(b.listen.host, a.listen.host);
	cr_assert_eq(b.listen.port, a.listen.port);
	cr_assert_eq(b.transport, a.transport);
	cr_assert_eq(b.sync, a.sync);
	cr_assert_eq(b.optimizer, a.optimizer);
	cr_assert_eq(b.chunk_bytes, a.chunk_bytes);
	cr_assert_eq(b.lr, a.lr);
	cr_assert_eq(b.momentum, a.momentum);
	cr_assert_eq(memcmp(&b.proto, &a.proto, sizeof(a.proto)), 0);
	cr_assert_eq(b.heartbeat_timeout_ms, a.heartbeat_timeout_ms);
	cr_assert_eq(b.startup_timeout_ms, a.startup_timeout_ms);
	cr_assert_str_eq(b.secret_file, a.secret_file);
	cr_assert_str_eq(b.metrics, a.metrics);
	cr_assert_eq(b.verbose, a.verbose);
}

/* Only the groups asked for; an option without a value is left alone. */
Test(config, export_writes_the_groups_asked_for)
{
	struct kn__config c;

	parse_ok(ARGV(BASE, "--sync", "asp"), no_env, &c);
	cr_assert_eq(clearenv(), 0);
	setenv("KANEL_SECRET_FILE", "/kept", 1);
	cr_assert_eq(kn__config_export(&c, KN__CONFIG_OPT_JOB |
						   KN__CONFIG_OPT_COMMON),
		     0);
	cr_assert_str_eq(getenv("KANEL_SYNC"), "asp");
	cr_assert_str_eq(getenv("KANEL_TRANSPORT"), "tcp");
	cr_assert_str_eq(getenv("KANEL_STARTUP_TIMEOUT"), "30000ms");
	cr_assert_str_eq(getenv("KANEL_SECRET_FILE"), "/kept");
	cr_assert_null(getenv("KANEL_WORKERS"));
	cr_assert_null(getenv("KANEL_COORDINATOR"));
	cr_assert_null(getenv("KANEL_ROLE"));
	cr_assert_eq(kn__config_export(NULL, KN__CONFIG_OPT_ALL), -EINVAL);
}

/*
 * --checkpoint-every or --restore-secret-file without a folder would do
 * nothing: refused, naming the flag.  With the folder (by flag, variable
 * or --resume) both are taken; the variables alone are not held against
 * a process (a launcher exports every value to its children).
 */
Test(config, checkpoint_options_need_a_folder)
{
	struct kn__config c;

	cr_assert_eq(parse(ARGV(BASE, "--checkpoint-every", "5"), NULL, &c),
		     -EINVAL);
	cr_expect(strstr(err, "--checkpoint-every without a checkpoint "
			      "folder"),
		  "%s", err);
	cr_assert_eq(parse(ARGV(BASE, "--restore-secret-file", "/x"), NULL, &c),
		     -EINVAL);
	cr_expect(strstr(err, "--restore-secret-file without"), "%s", err);
	parse_ok(
		ARGV(BASE, "--checkpoint-every", "5", "--checkpoint-dir", "/d"),
		NULL, &c);
	cr_expect_eq(c.checkpoint_every, 5);
	parse_ok(ARGV(BASE, "--checkpoint-every", "5"),
		 ENV("KANEL_CHECKPOINT_DIR=/d"), &c);
	parse_ok(ARGV(BASE, "--restore-secret-file", "/old", "--resume", "/d"),
		 NULL, &c);
	cr_expect_str_eq(c.restore_secret_file, "/old");
	cr_expect(c.restore);
	parse_ok(ARGV(BASE), ENV("KANEL_CHECKPOINT_EVERY=5"), &c);
}
