/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_fail.h - how a fuzz target reports a broken property: one line
 * naming the target (FUZZ_TARGET, which the file defines before it
 * includes this) where sanitizer reports go, then a trap, so that
 * libFuzzer keeps the input as a crash.
 */
#ifndef KN_TEST_FUZZ_FAIL_H
#define KN_TEST_FUZZ_FAIL_H

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#include <sanitizer/asan_interface.h>
#define HAVE_ASAN 1
#endif
#endif

static void fail(const char *what, ...)
	__attribute__((noreturn, format(printf, 1, 2)));

static void fail(const char *what, ...)
{
	char msg[256] = FUZZ_TARGET ": ";
	size_t at = strlen(msg);
	va_list ap;

	va_start(ap, what);
	vsnprintf(msg + at, sizeof(msg) - at, what, ap);
	va_end(ap);
#ifdef HAVE_ASAN
	/* where sanitizer reports go, which -close_fd_mask=2 keeps open */
	__sanitizer_report_error_summary(msg);
#else
	fprintf(stderr, "%s\n", msg);
#endif
	__builtin_trap();
}

#endif /* KN_TEST_FUZZ_FAIL_H */
