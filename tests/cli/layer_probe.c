/* SPDX-License-Identifier: Apache-2.0 */
/*
 * layer_probe.c - a file compiled as tools/ files are (tools_deps) that
 * includes one layer's header, KN_PROBE_HEADER: it must fail to compile,
 * which check_layering.py asserts.  Never built by default.
 */
#include KN_PROBE_HEADER

int kn__layer_probe(void);

int kn__layer_probe(void)
{
	return 0;
}
