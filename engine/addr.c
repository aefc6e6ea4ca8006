/* SPDX-License-Identifier: Apache-2.0 */
/*
 * addr.c - the little the roles need to know about socket addresses:
 * which address a server tells workers to reach it at.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <string.h>

#include "roles.h"

bool kn__addr_is_any(const struct sockaddr_storage *a)
{
	if (a->ss_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
		       htonl(INADDR_ANY);
	if (a->ss_family == AF_INET6)
		return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
			      &in6addr_any, sizeof(in6addr_any)) == 0;
	return false;
}

bool kn__addr_is_loopback(const struct sockaddr_storage *a)
{
	if (a->ss_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)a)
				      ->sin_addr.s_addr) >>
			24) == 127;
	if (a->ss_family == AF_INET6)
		return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
			      &in6addr_loopback, sizeof(in6addr_loopback)) == 0;
	return false;
}

void kn__addr_copy_ip(struct sockaddr_storage *dst,
		      const struct sockaddr_storage *src)
{
	if (dst->ss_family == AF_INET && src->ss_family == AF_INET)
		((struct sockaddr_in *)dst)->sin_addr =
			((const struct sockaddr_in *)src)->sin_addr;
	else if (dst->ss_family == AF_INET6 && src->ss_family == AF_INET6)
		((struct sockaddr_in6 *)dst)->sin6_addr =
			((const struct sockaddr_in6 *)src)->sin6_addr;
}

int kn__addr_local(struct sockaddr_storage *a)
{
	struct ifaddrs *list, *i;
	int ret = -EADDRNOTAVAIL;

	if (a->ss_family != AF_INET)
		return -EAFNOSUPPORT;
	if (getifaddrs(&list))
		return -errno;
	for (i = list; i; i = i->ifa_next) {
		const struct sockaddr_in *in = (const void *)i->ifa_addr;

		if (!in || in->sin_family != AF_INET ||
		    (ntohl(in->sin_addr.s_addr) >> 24) == 127)
			continue;
		((struct sockaddr_in *)a)->sin_addr = in->sin_addr;
		ret = 0;
		break;
	}
	freeifaddrs(list);
	return ret;
}

void kn__addr_name(const struct sockaddr_storage *a, char *buf, size_t n)
{
	char ip[INET6_ADDRSTRLEN] = "?";
	unsigned int port = 0;

	if (a->ss_family == AF_INET) {
		const struct sockaddr_in *in = (const void *)a;

		inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
		port = ntohs(in->sin_port);
	} else if (a->ss_family == AF_INET6) {
		const struct sockaddr_in6 *in = (const void *)a;

		inet_ntop(AF_INET6, &in->sin6_addr, ip, sizeof(ip));
		port = ntohs(in->sin6_port);
	}
	snprintf(buf, n, "%s:%u", ip, port);
}

socklen_t kn__addr_len(const struct sockaddr_storage *a)
{
	return a->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
					: sizeof(struct sockaddr_in);
}
