/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_dispatch.c - the choice of kernel path: the best the CPU runs by
 * default, a lower one when KANEL_KERNELS names it, never one the CPU
 * lacks.  The choice is made once at load time, so each case starts
 * path_probe (linked against libkanel) in a fresh process.
 */
#include <stdio.h>

#include "kernel_test.h"

/* The path a fresh process picks with KANEL_KERNELS=@value (NULL: unset). */
static enum kn_kernel_path probe(const char *value)
{
	char cmd[512], name[32] = "";
	FILE *f;

	snprintf(cmd, sizeof(cmd), "%s%s%s '%s'",
		 value ? "KANEL_KERNELS='" : "unset KANEL_KERNELS;",
		 value ? value : "", value ? "'" : "", KN_PATH_PROBE);
	f = popen(cmd, "r");
	cr_assert(f, "cannot run %s", KN_PATH_PROBE);
	cr_assert(fgets(name, sizeof(name), f), "no output from %s", cmd);
	cr_assert_eq(pclose(f), 0);
	name[strcspn(name, "\n")] = '\0';
	for (int p = KN_KERNEL_SCALAR; p <= KN_KERNEL_AVX512; p++)
		if (strcmp(name, kn_kernel_path_name((enum kn_kernel_path)p)) ==
		    0)
			return (enum kn_kernel_path)p;
	cr_assert_fail("%s printed an unknown path '%s'", cmd, name);
	return KN_KERNEL_SCALAR;
}

static enum kn_kernel_path best_path(void)
{
	for (int p = KN_KERNEL_AVX512; p > KN_KERNEL_SCALAR; p--)
		if (kn__kernel_ops_get((enum kn_kernel_path)p))
			return (enum kn_kernel_path)p;
	return KN_KERNEL_SCALAR;
}

Test(dispatch, default_is_best_supported)
{
	cr_assert_eq(probe(NULL), best_path());
}

Test(dispatch, env_forces_a_lower_path)
{
	for (int p = KN_KERNEL_SCALAR; p <= (int)best_path(); p++) {
		const char *name = kn_kernel_path_name((enum kn_kernel_path)p);

		cr_assert_eq(probe(name), (enum kn_kernel_path)p, "%s", name);
	}
}

Test(dispatch, env_never_enables_an_unsupported_path)
{
	/* asking for the top path gets at most what the CPU has */
	cr_assert_eq(probe("avx512"), best_path());
	cr_assert_eq(probe("no-such-path"), best_path());
}

Test(dispatch, scalar_is_always_there)
{
	cr_assert_not_null(kn__kernel_ops_get(KN_KERNEL_SCALAR));
	cr_assert_null(kn__kernel_ops_get((enum kn_kernel_path)42));
	cr_assert_str_eq(kn_kernel_path_name(KN_KERNEL_AVX2), "avx2");
	cr_assert_null(kn_kernel_path_name((enum kn_kernel_path)3));
	cr_assert_eq(kn_dtype_size(KN_DTYPE_BF16), 2);
	cr_assert_eq(kn_dtype_size((enum kn_dtype)3), 0);
	cr_assert_str_eq(kn_dtype_name(KN_DTYPE_FP16), "fp16");
}
