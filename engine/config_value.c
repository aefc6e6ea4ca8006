/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config_value.c - the parsers of one value each (config_opt.h): counts,
 * sizes with a K or M suffix, durations, floats in a range, addresses,
 * paths, switches and names from a list.  Each names its flag or
 * variable and the rule broken in the one line of its error.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config_opt.h"

#define TIMEOUT_MAX_MS (24u * 3600u * 1000u)

__attribute__((format(printf, 2, 3))) int kn__cfg_bad(struct parse *p,
						      const char *fmt, ...)
{
	va_list ap;

	if (p->err && p->errlen) {
		va_start(ap, fmt);
		vsnprintf(p->err, p->errlen, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

/* A decimal number without sign, spaces or junk, at most UINT32_MAX. */
bool kn__cfg_parse_u32(const char *s, uint32_t *out, const char **rest)
{
	uint64_t v = 0;
	const char *c = s;

	if (*c < '0' || *c > '9')
		return false;
	for (; *c >= '0' && *c <= '9'; c++) {
		v = v * 10 + (uint64_t)(*c - '0');
		if (v > UINT32_MAX)
			return false;
	}
	if (!rest && *c)
		return false;
	if (rest)
		*rest = c;
	*out = (uint32_t)v;
	return true;
}

/* For messages: "1 worker", "2 workers". */
const char *kn__cfg_plural(uint32_t n)
{
	return n == 1 ? "" : "s";
}

/* Why @s is not a uint32_t, for a message. */
const char *kn__cfg_not_u32(const char *s)
{
	return *s && !s[strspn(s, "0123456789")] ? "too large" : "not a number";
}

int kn__cfg_parse_name(struct parse *p, const char *src, const char *val,
		       names_fn *names, int *out)
{
	char list[128] = "";
	const char *name;
	uint32_t v;

	/* written on every path, so that no caller reads it unset */
	*out = -1;
	for (uint32_t i = 0; (name = names(i, &v)); i++) {
		if (!strcmp(val, name)) {
			*out = (int)v;
			return 0;
		}
	}
	for (uint32_t i = 0; (name = names(i, &v)); i++) {
		strncat(list, i ? ", " : "", sizeof(list) - strlen(list) - 1);
		strncat(list, name, sizeof(list) - strlen(list) - 1);
	}
	return kn__cfg_bad(p, "%s='%s': unknown value (one of %s)", src, val,
			   list);
}

int kn__cfg_parse_count(struct parse *p, const char *src, const char *val,
			uint32_t *out)
{
	uint32_t v;

	if (!kn__cfg_parse_u32(val, &v, NULL))
		return kn__cfg_bad(p, "%s='%s': %s", src, val,
				   kn__cfg_not_u32(val));
	if (v < 1 || v > KN_CONFIG_MAX_COUNT)
		return kn__cfg_bad(p, "%s=%s: must be between 1 and %u", src,
				   val, KN_CONFIG_MAX_COUNT);
	*out = v;
	return 0;
}

/*
 * HOST:PORT, [IPV6]:PORT, or (@empty_host) :PORT for 0.0.0.0.  Hostnames
 * are letters, digits, '.', '-' and '_', not starting with '-'.
 */
int kn__cfg_parse_addr(struct parse *p, const char *src, const char *val,
		       bool empty_host, bool zero_port,
		       struct kn__config_addr *out)
{
	struct kn__config_addr a = { .host = "" };
	const char *colon, *host = val;
	size_t hlen;
	uint32_t port;
	bool v6 = false;

	if (val[0] == '[') {
		const char *rb = strchr(val, ']');

		if (!rb || rb[1] != ':')
			return kn__cfg_bad(p, "%s='%s': expected [IPV6]:PORT",
					   src, val);
		host = val + 1;
		hlen = (size_t)(rb - host);
		colon = rb + 1;
		v6 = true;
	} else {
		colon = strrchr(val, ':');
		if (!colon)
			return kn__cfg_bad(p, "%s='%s': expected HOST:PORT",
					   src, val);
		hlen = (size_t)(colon - val);
		if (memchr(val, ':', hlen))
			return kn__cfg_bad(
				p,
				"%s='%s': an IPv6 address goes in brackets, "
				"[ADDRESS]:PORT",
				src, val);
	}
	if (hlen >= sizeof(a.host))
		return kn__cfg_bad(p, "%s: host longer than %zu bytes", src,
				   sizeof(a.host) - 1);
	memcpy(a.host, host, hlen);
	a.host[hlen] = '\0';
	if (!hlen && !(empty_host && !v6))
		return kn__cfg_bad(p, "%s='%s': no host before the port", src,
				   val);
	if (!hlen)
		strcpy(a.host, "0.0.0.0");
	if (v6) {
		struct in6_addr in6;

		if (inet_pton(AF_INET6, a.host, &in6) != 1)
			return kn__cfg_bad(p, "%s='%s': not an IPv6 address",
					   src, val);
	} else if (a.host[strspn(a.host, "0123456789.")] == '\0') {
		struct in_addr in4;

		/* digits and dots only: no host name looks like that, so it
		 * must be an IPv4 literal, four numbers up to 255 each (the
		 * resolver would otherwise just not find "999.0.0.1") */
		if (inet_pton(AF_INET, a.host, &in4) != 1)
			return kn__cfg_bad(
				p,
				"%s='%s': '%s' is not an IPv4 address "
				"(four numbers from 0 to 255, as "
				"10.0.0.1)",
				src, val, a.host);
	} else {
		for (size_t i = 0; i < hlen; i++) {
			char c = a.host[i];

			if (!((c >= 'a' && c <= 'z') ||
			      (c >= 'A' && c <= 'Z') ||
			      (c >= '0' && c <= '9') || c == '.' || c == '-' ||
			      c == '_') ||
			    (i == 0 && c == '-'))
				return kn__cfg_bad(
					p, "%s='%s': '%s' is not a host name",
					src, val, a.host);
		}
	}
	if (!kn__cfg_parse_u32(colon + 1, &port, NULL) || port > 65535)
		return kn__cfg_bad(
			p, "%s='%s': the port is not a number up to 65535", src,
			val);
	if (!port && !zero_port)
		return kn__cfg_bad(p, "%s='%s': the port must not be 0", src,
				   val);
	a.port = (uint16_t)port;
	*out = a;
	return 0;
}

/* A number of @unit_ms, or of ms or s with a suffix; above 0, below a day. */
int kn__cfg_parse_duration(struct parse *p, const char *src, const char *val,
			   uint32_t unit_ms, uint32_t *out_ms)
{
	const char *rest;
	uint32_t v;
	uint64_t ms;

	if (!kn__cfg_parse_u32(val, &v, &rest))
		return kn__cfg_bad(p, "%s='%s': not a number", src, val);
	if (!strcmp(rest, "ms"))
		unit_ms = 1;
	else if (!strcmp(rest, "s"))
		unit_ms = 1000;
	else if (*rest)
		return kn__cfg_bad(p, "%s='%s': unknown unit '%s' (ms or s)",
				   src, val, rest);
	ms = (uint64_t)v * unit_ms;
	if (!ms || ms > TIMEOUT_MAX_MS)
		return kn__cfg_bad(p,
				   "%s='%s': must be above 0 and at most a day",
				   src, val);
	*out_ms = (uint32_t)ms;
	return 0;
}

/* A finite number in (lo, hi) or [lo, hi), once rounded to a float. */
int kn__cfg_parse_float(struct parse *p, const char *src, const char *val,
			double lo, bool lo_open, double hi, float *out)
{
	char *end;
	double v;
	float f;

	errno = 0;
	v = strtod(val, &end);
	f = (float)v;
	if (end == val || *end || isnan(v))
		return kn__cfg_bad(p, "%s='%s': not a number", src, val);
	if (errno || !isfinite(f))
		return kn__cfg_bad(p, "%s='%s': out of range", src, val);
	if (f < lo || (lo_open && f == lo) || f >= hi) {
		if (isinf(hi))
			return kn__cfg_bad(p, "%s='%s': must be above %g", src,
					   val, lo);
		return kn__cfg_bad(p, "%s='%s': must be in %s%g, %g)", src, val,
				   lo_open ? "(" : "[", lo, hi);
	}
	*out = f;
	return 0;
}

/*
 * Bytes, or KiB and MiB with a K, KiB, M or MiB suffix (any case), from
 * @min to @max (@range says so in the error).
 */
int kn__cfg_parse_bytes(struct parse *p, const char *src, const char *val,
			uint64_t min, uint64_t max, const char *range,
			uint32_t *out)
{
	const char *rest;
	uint32_t v, unit = 1;
	uint64_t bytes;

	if (!kn__cfg_parse_u32(val, &v, &rest))
		return kn__cfg_bad(p, "%s='%s': not a number", src, val);
	if (!strcasecmp(rest, "k") || !strcasecmp(rest, "kib"))
		unit = KIB;
	else if (!strcasecmp(rest, "m") || !strcasecmp(rest, "mib"))
		unit = MIB;
	else if (*rest)
		return kn__cfg_bad(p, "%s='%s': unknown suffix '%s' (K or M)",
				   src, val, rest);
	bytes = (uint64_t)v * unit;
	if (bytes < min || bytes > max)
		return kn__cfg_bad(p, "%s='%s': must be between %s", src, val,
				   range);
	*out = (uint32_t)bytes;
	return 0;
}

int kn__cfg_parse_range(struct parse *p, const char *src, const char *val,
			uint32_t lo, uint32_t hi, uint32_t *out)
{
	uint32_t v;

	if (!kn__cfg_parse_u32(val, &v, NULL))
		return kn__cfg_bad(p, "%s='%s': %s", src, val,
				   kn__cfg_not_u32(val));
	if (v < lo || v > hi)
		return kn__cfg_bad(p, "%s=%s: must be between %u and %u", src,
				   val, lo, hi);
	*out = v;
	return 0;
}

int kn__cfg_parse_path(struct parse *p, const char *src, const char *val,
		       char *dst, size_t cap)
{
	size_t n = strlen(val);

	if (!n)
		return kn__cfg_bad(p, "%s: empty path", src);
	if (n >= cap)
		return kn__cfg_bad(p, "%s: path longer than %zu bytes", src,
				   cap - 1);
	memcpy(dst, val, n + 1);
	return 0;
}

int kn__cfg_parse_bool(struct parse *p, const char *src, const char *val,
		       bool *dst)
{
	static const char *const yes[] = { "1", "true", "yes", "on" };
	static const char *const no[] = { "0", "false", "no", "off" };

	for (size_t i = 0; i < ARRAY_SIZE(yes); i++) {
		if (!strcasecmp(val, yes[i]) || !strcasecmp(val, no[i])) {
			*dst = !strcasecmp(val, yes[i]);
			return 0;
		}
	}
	return kn__cfg_bad(
		p, "%s='%s': expected 1 or 0 (true/false, yes/no, on/off)", src,
		val);
}
