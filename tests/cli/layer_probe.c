/* SPDX-License-Identifier: Apache-2.0 */
/*
 * layer_probe.c - a file compiled as the files of tools/ (tools_deps),
 * sim/ (sim_build_deps) or launch/ are, that includes the header of a
 * layer they may not use, KN_PROBE_HEADER: it must fail to compile, which
 * check_layering.py asserts.  Never built by default.
 */
#include KN_PROBE_HEADER

int kn__layer_probe(void);

int kn__layer_probe(void)
{
	return 0;
}
