/* SPDX-License-Identifier: Apache-2.0 */
/*
 * proc_util.c - the kanel binary under test and its processes
 * (proc_util.h).
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "proc_util.h"

char *kanel_exe(void)
{
	char *exe = getenv("KANEL_EXE");

	cr_assert_not_null(exe, "KANEL_EXE is not set (meson sets it)");
	return exe;
}

const char *path_in(const char *dir, const char *name)
{
	static char bufs[8][256];
	static unsigned int next;
	char *b = bufs[next++ % 8];

	snprintf(b, sizeof(bufs[0]), "%s/%s", dir, name);
	return b;
}

ssize_t proc_read(pid_t pid, const char *file, char *buf, size_t size)
{
	char path[64];
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
	f = fopen(path, "r");
	if (!f)
		return -1;
	n = fread(buf, 1, size - 1, f);
	fclose(f);
	buf[n] = '\0';
	return (ssize_t)n;
}

/* The parent of @pid, or -1 (gone). */
static pid_t parent_of(pid_t pid)
{
	char stat[512];
	int ppid;

	/* "pid (comm) state ppid": our children's comm holds no ')' */
	if (proc_read(pid, "stat", stat, sizeof(stat)) < 0 ||
	    sscanf(stat, "%*d (%*[^)]) %*c %d", &ppid) != 1)
		return -1;
	return ppid;
}

pid_t proc_child(pid_t parent, proc_match_fn *match, const void *arg)
{
	DIR *proc = opendir("/proc");
	struct dirent *d;
	pid_t found = -1;

	cr_assert_not_null(proc);
	while ((d = readdir(proc))) {
		pid_t pid = (pid_t)atoi(d->d_name);

		if (pid > found && parent_of(pid) == parent && match(pid, arg))
			found = pid;
	}
	closedir(proc);
	return found;
}

static bool runs_arg1(pid_t pid, const void *arg1)
{
	char cmd[512];
	ssize_t n = proc_read(pid, "cmdline", cmd, sizeof(cmd));

	/* argv[0] NUL argv[1] NUL */
	return n > 0 && strlen(cmd) + 1 < (size_t)n &&
	       !strcmp(cmd + strlen(cmd) + 1, arg1);
}

pid_t proc_child_running(pid_t parent, const char *arg1)
{
	return proc_child(parent, runs_arg1, arg1);
}

long proc_status_kb(pid_t pid, const char *field)
{
	char status[4096] = "\n", key[64];
	const char *p;

	/* a line's start is a newline, the first line's too */
	snprintf(key, sizeof(key), "\n%s:", field);
	if (proc_read(pid, "status", status + 1, sizeof(status) - 1) < 0)
		return -1;
	p = strstr(status, key);
	return p ? strtol(p + strlen(key), NULL, 10) : -1;
}
