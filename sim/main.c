/* SPDX-License-Identifier: Apache-2.0 */
/*
 * main.c - sim/sim, the simulator as a program of its own: the same
 * code as `kanel sim` (sim_cli.c), without the rest of the kanel
 * command.
 */
#include "kanel_sim.h"

int main(int argc, char **argv)
{
	return kn_sim_main(argc, argv);
}
