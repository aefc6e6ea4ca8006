/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kanel_sim.h - the discrete-event simulator's one entry point, for
 * programs that run it as a command (`kanel sim`, sim/sim).
 *
 * The simulator (sim/) is a layer of libkanel on top of sync/, and this
 * is all of it that libkanel exports.  It has a header of its own, not a
 * place in kanel.h: it is a whole command line, not part of the API a
 * training program uses, and a program given this header sees none of
 * the simulator's internals (sim/sim.h).
 */
#ifndef KANEL_SIM_H
#define KANEL_SIM_H

#include "kanel.h" /* KN_EXPORT */

/*
 * Parse the options in @argv (docs/simulator.md; @argv[0] names the
 * command in messages, e.g. "kanel sim"), run the simulation, print a
 * summary on stdout and write the files asked for.  Returns 0, 1 when
 * the run or an output file failed, or 2 for a usage error (printed).
 * Keeps no global state, so it may be called again in one process; not
 * thread-safe (the progress line goes to stderr).
 */
KN_EXPORT int kn_sim_main(int argc, char **argv);

#endif /* KANEL_SIM_H */
