/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kanel_sim.h - the discrete-event simulator's one entry point, for
 * programs that run it as a command (`kanel sim`, perf/sim/sim).
 *
 * It has a header of its own, not a place in kanel.h: the simulator is
 * not part of libkanel but a library of perf/ (sim_lib) that drives
 * sync/ directly, so a declaration in kanel.h would promise libkanel's
 * users a symbol they cannot link.  This folder holds nothing else, so
 * a program given it sees the entry point and none of the simulator's
 * internals (sim.h).
 */
#ifndef KANEL_SIM_H
#define KANEL_SIM_H

/*
 * Parse the options in @argv (docs/simulator.md; @argv[0] names the
 * command in messages, e.g. "kanel sim"), run the simulation, print a
 * summary on stdout and write the files asked for.  Returns 0, 1 when
 * the run or an output file failed, or 2 for a usage error (printed).
 * Keeps no global state, so it may be called again in one process; not
 * thread-safe (the progress line goes to stderr).
 */
int kn_sim_main(int argc, char **argv);

#endif /* KANEL_SIM_H */
