/* SPDX-License-Identifier: Apache-2.0 */
/*
 * path_probe.c - prints the kernel path libkanel chose at load time, so
 * that test_dispatch.c can start it under different KANEL_KERNELS values.
 */
#include <stdio.h>

#include "kanel.h"

int main(void)
{
	puts(kn_kernel_path_name(kn_kernel_path_active()));
	return 0;
}
