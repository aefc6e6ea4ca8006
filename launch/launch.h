/* SPDX-License-Identifier: Apache-2.0 */
/*
 * launch.h - the processes of a local job: what `kanel launch` and
 * `kanel train` (tools/job.c), perf/bench_engine and the engine's job
 * tests (tests/engine/job_util.c) share to run a coordinator, servers
 * and workers as child processes on this machine.  Start a child with
 * its role in its environment (and its output in a log file, if asked),
 * knowing at once whether its program could be run; wait for one with a
 * deadline; reap whichever of a job's children ended; kill one for good;
 * and say how one ended, in the words the messages use.  A free loopback
 * port for the coordinator and the clock the deadlines are on complete
 * it.
 *
 * This library sits beside the programs that use it, above the engine:
 * it uses libc only (no layer's header, not even kanel.h), so tools/ and
 * perf/ may link it without seeing more than the public API.  Messages
 * are the callers' to write: nothing here prints, and errors are 0 or a
 * negative errno.  Functions that start, wait for or reap children act
 * on process-wide state (the children of this process, its environment
 * in the child): call them from one thread.  A child sets its
 * environment and opens its log between fork and exec, which is safe
 * when no other thread of the parent runs then (the job's parent in the
 * kanel command, bench_engine between its jobs, a test's main thread).
 */
#ifndef KN_LAUNCH_H
#define KN_LAUNCH_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Seconds on CLOCK_MONOTONIC: the clock of every deadline here. */
double kn__launch_now(void);

/*
 * A TCP port on 127.0.0.1 that was free a moment ago (the kernel's pick
 * for port 0), for a coordinator that binds it right after; or a
 * negative errno.
 */
int kn__launch_free_port(void);

/* The setup or the body of a child, run in the child after the fork. */
typedef int kn__launch_child_fn(void *arg);

/* What kn__launch_spawn() starts. */
struct kn__launch_child {
	/*
	 * The program and its arguments, run with execvp(3) (a name without
	 * a slash is looked up in $PATH).  NULL: no exec; the forked child
	 * runs @body and exits with what it returns.
	 */
	char *const *argv;
	kn__launch_child_fn *body; /* with @argv NULL */
	/*
	 * Called in the child before the exec (or @body), after the
	 * environment and the log are set: the caller's own set-up (a file
	 * descriptor to pass on, a signal's action).  A negative errno
	 * fails the start as a failed exec would.  NULL: none.
	 */
	kn__launch_child_fn *setup;
	void *arg; /* for @setup and @body */
	/* KANEL_ROLE and KANEL_RANK in the child's environment; @role
	 * NULL: both as this process has them */
	const char *role;
	unsigned int rank;
	/*
	 * The file (created or truncated, mode 0600) that takes the child's
	 * stderr, and its stdout too with @log_stdout; NULL: it writes where
	 * this process does.
	 */
	const char *log;
	bool log_stdout;
};

/*
 * Fork a child and start @c in it.  A failure in the child before its
 * program runs (the log, @setup, the exec itself) comes back through a
 * close-on-exec pipe: a successful exec closes it empty, a failed one
 * writes its errno first; so this returns once the program runs, or
 * with the reason it cannot, without waiting for a start-up that cannot
 * happen.  (With @argv NULL it returns once @setup is done.)
 *
 * Returns 0 with the child's pid in *@pid; or a negative errno, the
 * child (if there was one) reaped.  *@forked, if not NULL, is set either
 * way: false when no child was made (pipe2 or fork failed), true when
 * the failure was the child's; callers say "cannot start" for the first
 * and "cannot run" for the second.  Blocks until the exec.
 */
int kn__launch_spawn(const struct kn__launch_child *c, pid_t *pid,
		     bool *forked);

/*
 * Wait for child @pid to end until @deadline (kn__launch_now()
 * seconds), looking every millisecond at first and then less often, up
 * to every 20 ms; a deadline already past means one look.  Returns 0
 * with its wait status in *@status (may be NULL), the child reaped;
 * -ETIMEDOUT if it still runs at the deadline (neither signalled nor
 * reaped); or a negative errno of waitpid(2) (-ECHILD: not a child of
 * ours, or reaped already).  Blocks until one of those.
 */
int kn__launch_wait(pid_t pid, double deadline, int *status);

/*
 * Reap one ended child among @pids[0 .. @n - 1] (0 entries are not
 * children): waits for any child of this process (@block) or only looks
 * (!@block).  Returns 0 with its index in *@idx and its wait status in
 * *@status (@pids[*@idx] is the caller's to clear); -EAGAIN if, not
 * blocking, none has ended; -EINTR if a signal came while blocking (the
 * caller's handler decides whether to go on); -ECHILD if this process
 * has no child left.  A child not in @pids that ends meanwhile is
 * reaped and passed over.
 */
int kn__launch_reap_any(const pid_t *pids, unsigned int n, bool block,
			unsigned int *idx, int *status);

/*
 * Kill child @pid with SIGKILL and reap it: for one that ignored
 * SIGTERM, or on the way out.  Blocks until it is gone (SIGKILL cannot
 * be caught, so not for long).  Its wait status, or a negative errno of
 * waitpid(2).
 */
int kn__launch_kill(pid_t pid);

/*
 * How a child with wait status @status ended, as messages say it:
 * "exited with status 3" or "was killed by signal 9 (Killed)".  Written
 * into @buf (@cap bytes, truncated if short); returns @buf.
 */
const char *kn__launch_strstatus(int status, char *buf, size_t cap);

#endif /* KN_LAUNCH_H */
