/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kanel.c - the one binary of a Kanel job:
 *
 *   kanel coordinator [options]
 *   kanel server      [options]
 *   kanel worker      [options] [--steps N] [--tensors N]
 *                     [--tensor-bytes BYTES] [--dtype fp32|fp16|bf16]
 *   kanel launch      --workers N --servers M [options] [-- CMD [ARG...]]
 *
 * The options are the job's (docs/configuration.md); every one has a
 * KANEL_* variable, and Slurm's or Open MPI's rank variables pick the
 * role where no flag or variable does.  `worker` exchanges synthetic
 * tensors (for tests and benchmarks).  `launch` runs a whole job on this
 * machine: a coordinator on a free loopback port, M servers, and N
 * workers running CMD (default: `kanel worker`), each with its role in
 * its environment, and a fresh job secret unless one is given.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "auth.h"
#include "config.h"
#include "kanel.h"
#include "roles.h"

static void usage(FILE *out)
{
	fprintf(out, "usage: kanel coordinator|server|worker|launch [options]\n"
		     "  kanel worker ... [--steps N] [--tensors N] "
		     "[--tensor-bytes BYTES] [--dtype fp32|fp16|bf16]\n"
		     "  kanel launch --workers N --servers M [options] "
		     "[-- CMD [ARG...]]\n"
		     "The job's options (each also a KANEL_* variable):\n");
	kn__config_usage(out);
}

/* Parse the job's options with @role forced (NULL: from the sources). */
static int parse(int argc, char **argv, const char *role,
		 struct kn__config *cfg)
{
	char **args = calloc((size_t)argc + 3, sizeof(*args));
	char err[512];
	int n = 0, ret;

	if (!args)
		return -ENOMEM;
	args[n++] = "kanel";
	if (role) {
		args[n++] = "--role";
		args[n++] = (char *)role;
	}
	for (int i = 1; i < argc; i++)
		args[n++] = argv[i];
	ret = kn__config_parse(n, args, NULL, cfg, err, sizeof(err));
	free(args);
	if (ret)
		fprintf(stderr, "kanel: %s\n", err);
	else if (cfg->help)
		usage(stdout);
	return ret;
}

static int load_secret(const struct kn__config *cfg, uint8_t *buf, size_t *len)
{
	char err[512];
	int ret = kn__auth_load_secret(
		cfg->secret_file[0] ? cfg->secret_file : NULL, NULL, buf,
		KN_AUTH_SECRET_MAX, len, err, sizeof(err));

	if (ret)
		fprintf(stderr, "kanel: %s\n", err);
	return ret;
}

static int run_role(int argc, char **argv, const char *role)
{
	uint8_t secret[KN_AUTH_SECRET_MAX];
	struct kn__config cfg;
	size_t len;
	int ret = parse(argc, argv, role, &cfg);

	if (ret || cfg.help)
		return ret ? 2 : 0;
	ret = load_secret(&cfg, secret, &len);
	if (ret)
		return 2;
	if (cfg.role == KN__ROLE_COORDINATOR)
		ret = kn__coordinator_run(&cfg, secret, len);
	else
		ret = kn__server_run(&cfg, secret, len);
	kn__auth_wipe(secret, sizeof(secret));
	return ret ? 1 : 0;
}

/* ---- kanel worker: synthetic tensors ---- */

struct synth {
	unsigned long steps, tensors;
	size_t bytes;
	enum kn_dtype dtype;
};

/* Take the synthetic worker's own options out of argv. */
static int synth_options(int *argc, char **argv, struct synth *o)
{
	int out = 1;

	for (int i = 1; i < *argc; i++) {
		const char *a = argv[i];
		char *end = NULL;

		if (i + 1 < *argc && strcmp(a, "--steps") == 0)
			o->steps = strtoul(argv[++i], &end, 10);
		else if (i + 1 < *argc && strcmp(a, "--tensors") == 0)
			o->tensors = strtoul(argv[++i], &end, 10);
		else if (i + 1 < *argc && strcmp(a, "--tensor-bytes") == 0)
			o->bytes = strtoul(argv[++i], &end, 10);
		else if (i + 1 < *argc && strcmp(a, "--dtype") == 0) {
			const char *d = argv[++i];

			o->dtype = strcmp(d, "fp16") == 0   ? KN_DTYPE_FP16
				   : strcmp(d, "bf16") == 0 ? KN_DTYPE_BF16
				   : strcmp(d, "fp32") == 0 ? KN_DTYPE_FP32
							    : (enum kn_dtype)99;
			if (!kn_dtype_size(o->dtype)) {
				fprintf(stderr,
					"kanel worker: --dtype %s: "
					"fp32, fp16 or bf16\n",
					d);
				return -EINVAL;
			}
			continue;
		} else {
			argv[out++] = argv[i];
			continue;
		}
		if (!end || *end || !o->tensors || !o->bytes) {
			fprintf(stderr,
				"kanel worker: %s %s: a positive "
				"number\n",
				a, argv[i]);
			return -EINVAL;
		}
	}
	*argc = out;
	return 0;
}

static int run_worker(int argc, char **argv)
{
	struct synth o = { .steps = 10,
			   .tensors = 1,
			   .bytes = 1 << 20,
			   .dtype = KN_DTYPE_FP32 };
	struct kn_worker_options wo = { .rank = -1 };
	struct kn__config cfg;
	struct kn_worker *w;
	char **bufs;
	size_t count;
	int ret;

	if (synth_options(&argc, argv, &o) || parse(argc, argv, "worker", &cfg))
		return 2;
	if (cfg.help)
		return 0;
	count = o.bytes / kn_dtype_size(o.dtype);
	bufs = calloc(2 * o.tensors, sizeof(*bufs));
	if (!bufs || !count)
		return 2;
	/* the options reach kn_worker_create through the same sources */
	ret = kn_worker_create(&wo, &w);
	if (ret) {
		free(bufs);
		return 1;
	}
	for (unsigned long t = 0; !ret && t < o.tensors; t++) {
		char key[32];

		snprintf(key, sizeof(key), "t%05lu", t);
		bufs[2 * t] = calloc(count, kn_dtype_size(o.dtype));
		bufs[2 * t + 1] = calloc(count, kn_dtype_size(o.dtype));
		ret = !bufs[2 * t] || !bufs[2 * t + 1]
			      ? -ENOMEM
			      : kn_worker_register(w, key, o.dtype, count,
						   bufs[2 * t],
						   bufs[2 * t + 1]);
	}
	if (!ret)
		ret = kn_worker_start(w);
	for (unsigned long s = 0; !ret && s < o.steps; s++)
		ret = kn_worker_step(w, NULL);
	if (ret)
		fprintf(stderr, "kanel: worker %u: %s\n", cfg.rank,
			strerror(-ret));
	else if (cfg.verbose)
		fprintf(stderr, "kanel: worker %u: %lu steps done\n", cfg.rank,
			o.steps);
	kn_worker_destroy(w);
	for (unsigned long t = 0; t < 2 * o.tensors; t++)
		free(bufs[t]);
	free(bufs);
	return ret ? 1 : 0;
}

/* ---- kanel launch ---- */

/* A free TCP port on 127.0.0.1 (the coordinator binds it right after). */
static int free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

/* A fresh random secret in a 0600 file; its path in @path. */
static int make_secret(char *path, size_t cap)
{
	uint8_t key[32];
	int fd, ok;

	snprintf(path, cap, "%s/kanel-secret-XXXXXX",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	fd = mkstemp(path);
	if (fd < 0)
		return -errno;
	ok = fchmod(fd, 0600) == 0 && getentropy(key, sizeof(key)) == 0 &&
	     write(fd, key, sizeof(key)) == (ssize_t)sizeof(key);
	kn__auth_wipe(key, sizeof(key));
	close(fd);
	if (!ok) {
		unlink(path);
		return -EIO;
	}
	return 0;
}

static pid_t spawn(char *const *argv, const char *role, unsigned int rank)
{
	pid_t pid = fork();
	char r[16];

	if (pid != 0)
		return pid;
	snprintf(r, sizeof(r), "%u", rank);
	setenv("KANEL_ROLE", role, 1);
	setenv("KANEL_RANK", r, 1);
	execvp(argv[0], argv);
	fprintf(stderr, "kanel launch: %s: %s\n", argv[0], strerror(errno));
	_exit(127);
}

static int run_launch(int argc, char **argv)
{
	char self[4096], secret_path[256] = "", coord[64], num[16];
	char *role_argv[3], **cmd = NULL;
	struct kn__config cfg;
	unsigned int total, failed = 0;
	pid_t *pids;
	int port, status = 0, n;

	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "--") == 0) {
			cmd = argv + i + 1;
			argv[i] = NULL;
			argc = i;
			break;
		}
	port = free_port();
	if (port < 0)
		return 2;
	snprintf(coord, sizeof(coord), "127.0.0.1:%d", port);
	setenv("KANEL_COORDINATOR", coord, 1);
	/* the job's options, checked once here; children read the env */
	if (parse(argc, argv, "coordinator", &cfg))
		return 2;
	if (cfg.help)
		return 0;
	n = (int)readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return 2;
	self[n] = 0;
	/* the job's options reach the children through the environment */
	snprintf(num, sizeof(num), "%u", cfg.workers);
	setenv("KANEL_WORKERS", num, 1);
	snprintf(num, sizeof(num), "%u", cfg.servers);
	setenv("KANEL_SERVERS", num, 1);
	setenv("KANEL_TRANSPORT", kn__config_transport_name(cfg.transport), 1);
	setenv("KANEL_SYNC", kn__config_sync_name(cfg.sync), 1);
	setenv("KANEL_OPTIMIZER", kn__config_optimizer_name(cfg.optimizer), 1);
	snprintf(num, sizeof(num), "%u", cfg.chunk_bytes);
	setenv("KANEL_CHUNK_BYTES", num, 1);
	snprintf(num, sizeof(num), "%g", (double)cfg.lr);
	setenv("KANEL_LR", num, 1);
	snprintf(num, sizeof(num), "%g", (double)cfg.momentum);
	setenv("KANEL_MOMENTUM", num, 1);
	snprintf(num, sizeof(num), "%ums", cfg.heartbeat_timeout_ms);
	setenv("KANEL_HEARTBEAT_TIMEOUT", num, 1);
	snprintf(num, sizeof(num), "%ums", cfg.startup_timeout_ms);
	setenv("KANEL_STARTUP_TIMEOUT", num, 1);
	if (cfg.verbose)
		setenv("KANEL_VERBOSE", "1", 1);
	if (cfg.secret_file[0]) {
		setenv("KANEL_SECRET_FILE", cfg.secret_file, 1);
	} else if (!getenv("KANEL_SECRET")) {
		if (make_secret(secret_path, sizeof(secret_path))) {
			fprintf(stderr, "kanel launch: cannot make a secret\n");
			return 2;
		}
		setenv("KANEL_SECRET_FILE", secret_path, 1);
	}
	unsetenv("SLURM_PROCID"); /* the roles are ours to give */
	unsetenv("OMPI_COMM_WORLD_RANK");
	total = 1 + cfg.servers + cfg.workers;
	pids = calloc(total, sizeof(*pids));
	if (!pids)
		return 2;
	role_argv[0] = self;
	role_argv[2] = NULL;
	role_argv[1] = "coordinator";
	pids[0] = spawn(role_argv, "coordinator", 0);
	role_argv[1] = "server";
	for (unsigned int s = 0; s < cfg.servers; s++)
		pids[1 + s] = spawn(role_argv, "server", s);
	for (unsigned int w = 0; w < cfg.workers; w++) {
		char *wargv[3] = { self, "worker", NULL };

		pids[1 + cfg.servers + w] =
			spawn(cmd && cmd[0] ? cmd : wargv, "worker", w);
	}
	for (unsigned int i = 0; i < total; i++) {
		int st;

		if (pids[i] <= 0 || waitpid(pids[i], &st, 0) != pids[i])
			continue;
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			failed++;
			if (!status)
				status = WIFEXITED(st) ? WEXITSTATUS(st) : 1;
		}
	}
	if (secret_path[0])
		unlink(secret_path);
	if (failed)
		fprintf(stderr, "kanel launch: %u of %u processes failed\n",
			failed, total);
	free(pids);
	return status;
}

int main(int argc, char **argv)
{
	if (argc < 2 || strcmp(argv[1], "--help") == 0 ||
	    strcmp(argv[1], "-h") == 0) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	if (strcmp(argv[1], "coordinator") == 0 ||
	    strcmp(argv[1], "server") == 0)
		return run_role(argc - 1, argv + 1, argv[1]);
	if (strcmp(argv[1], "worker") == 0)
		return run_worker(argc - 1, argv + 1);
	if (strcmp(argv[1], "launch") == 0)
		return run_launch(argc - 1, argv + 1);
	fprintf(stderr, "kanel: unknown command '%s'; try kanel --help\n",
		argv[1]);
	return 2;
}
