/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_util.h - what the suites of several layers share (test_util.c,
 * linked through test_common_dep): reading back a file a program under
 * test wrote.
 */
#ifndef KN_TEST_UTIL_H
#define KN_TEST_UTIL_H

/* The whole of @path, NUL-terminated, in malloc'd memory the caller
 * frees; fails the test if it cannot be read. */
char *slurp(const char *path);

#endif /* KN_TEST_UTIL_H */
