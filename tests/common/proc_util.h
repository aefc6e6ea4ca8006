/* SPDX-License-Identifier: Apache-2.0 */
/*
 * proc_util.h - the kanel binary under test and the processes it starts
 * (proc_util.c, linked through test_common_dep): the binary meson names,
 * paths in a test's folder, and, through /proc, kanel launch's and
 * kanel train's children, picked by their arguments or environment.
 */
#ifndef KN_PROC_UTIL_H
#define KN_PROC_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* The kanel binary to test (KANEL_EXE, which meson sets); fails the
 * test without it. */
char *kanel_exe(void);

/* @dir/@name, in one of 8 buffers used in turn. */
const char *path_in(const char *dir, const char *name);

/* Whether child @pid is the one wanted; @arg is proc_child()'s. */
typedef bool proc_match_fn(pid_t pid, const void *arg);

/* The newest (highest) pid among @parent's children that @match
 * accepts, or -1. */
pid_t proc_child(pid_t parent, proc_match_fn *match, const void *arg);

/* The newest child of @parent whose second argument is @arg1 ("server"
 * of `kanel server`), or -1. */
pid_t proc_child_running(pid_t parent, const char *arg1);

/* Read /proc/@pid/@file (its NUL-separated cmdline or environ) into
 * @buf of @size, NUL-terminated; the bytes read, or -1. */
ssize_t proc_read(pid_t pid, const char *file, char *buf, size_t size);

/* Field @field ("RssAnon") of /proc/@pid/status in kB, or -1. */
long proc_status_kb(pid_t pid, const char *field);

#endif /* KN_PROC_UTIL_H */
