/* SPDX-License-Identifier: Apache-2.0 */
/*
 * launch.c - the processes of a local job (launch.h): starting a child
 * with its role, its log and an exec whose failure is known at once,
 * waiting with a deadline, reaping, killing, and the words for how a
 * child ended.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "launch.h"

/* The longest pause between two looks of kn__launch_wait. */
#define WAIT_TICK_MAX_NS (20 * 1000 * 1000)

double kn__launch_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int kn__launch_free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), ret;

	if (fd < 0)
		return -errno;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &len) == 0)
		ret = ntohs(a.sin_port);
	else
		ret = -errno;
	close(fd);
	return ret;
}

static void setenv_u(const char *name, unsigned int v)
{
	char num[16];

	snprintf(num, sizeof(num), "%u", v);
	setenv(name, num, 1);
}

/*
 * In the child: everything before the exec or the body.  0, or the
 * negative errno that fails the start.
 */
static int child_prepare(const struct kn__launch_child *c)
{
	int ret;

	if (c->role) {
		setenv("KANEL_ROLE", c->role, 1);
		setenv_u("KANEL_RANK", c->rank);
	}
	if (c->log) {
		int fd = open(c->log, O_WRONLY | O_CREAT | O_TRUNC, 0600);

		if (fd < 0)
			return -errno;
		if ((c->log_stdout && dup2(fd, STDOUT_FILENO) < 0) ||
		    dup2(fd, STDERR_FILENO) < 0) {
			ret = -errno;
			close(fd);
			return ret;
		}
		if (fd != STDOUT_FILENO && fd != STDERR_FILENO)
			close(fd);
	}
	return c->setup ? c->setup(c->arg) : 0;
}

/* In the child: say why it cannot start, through @fd, and end. */
static void __attribute__((noreturn)) child_fail(int fd, int err)
{
	while (write(fd, &err, sizeof(err)) < 0 && errno == EINTR)
		;
	_exit(127);
}

int kn__launch_spawn(const struct kn__launch_child *c, pid_t *pid, bool *forked)
{
	int fds[2], err = 0;
	ssize_t n;
	pid_t p;

	if (forked)
		*forked = false;
	if (pipe2(fds, O_CLOEXEC))
		return -errno;
	p = fork();
	if (p < 0) {
		err = errno;
		close(fds[0]);
		close(fds[1]);
		return -err;
	}
	if (p == 0) {
		int ret;

		close(fds[0]);
		ret = child_prepare(c);
		if (ret)
			child_fail(fds[1], -ret);
		if (!c->argv) {
			/* started: the parent stops waiting here */
			close(fds[1]);
			_exit(c->body(c->arg));
		}
		execvp(c->argv[0], c->argv);
		child_fail(fds[1], errno);
	}
	if (forked)
		*forked = true;
	close(fds[1]);
	do
		n = read(fds[0], &err, sizeof(err));
	while (n < 0 && errno == EINTR);
	close(fds[0]);
	if (n == (ssize_t)sizeof(err)) {
		while (waitpid(p, NULL, 0) < 0 && errno == EINTR)
			;
		return -err;
	}
	*pid = p;
	return 0;
}

int kn__launch_wait(pid_t pid, double deadline, int *status)
{
	struct timespec tick = { .tv_nsec = 1000 * 1000 };
	int st;

	for (;;) {
		pid_t got = waitpid(pid, &st, WNOHANG);

		if (got == pid) {
			if (status)
				*status = st;
			return 0;
		}
		if (got < 0 && errno != EINTR)
			return -errno;
		if (kn__launch_now() >= deadline)
			return -ETIMEDOUT;
		nanosleep(&tick, NULL);
		/* a child that ends at once is seen at once; one that
		 * takes long costs few looks */
		if (tick.tv_nsec < WAIT_TICK_MAX_NS)
			tick.tv_nsec *= 2;
		if (tick.tv_nsec > WAIT_TICK_MAX_NS)
			tick.tv_nsec = WAIT_TICK_MAX_NS;
	}
}

int kn__launch_reap_any(const pid_t *pids, unsigned int n, bool block,
			unsigned int *idx, int *status)
{
	for (;;) {
		int st;
		pid_t pid = waitpid(-1, &st, block ? 0 : WNOHANG);

		if (pid == 0)
			return -EAGAIN;
		if (pid < 0)
			return -errno;
		for (unsigned int i = 0; i < n; i++)
			if (pids[i] == pid) {
				*idx = i;
				*status = st;
				return 0;
			}
	}
}

int kn__launch_kill(pid_t pid)
{
	int st;

	kill(pid, SIGKILL);
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -errno;
	return st;
}

const char *kn__launch_strstatus(int status, char *buf, size_t cap)
{
	if (WIFEXITED(status))
		snprintf(buf, cap, "exited with status %d",
			 WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		snprintf(buf, cap, "was killed by signal %d (%s)",
			 WTERMSIG(status), strsignal(WTERMSIG(status)));
	else
		snprintf(buf, cap, "ended with wait status 0x%x", status);
	return buf;
}
