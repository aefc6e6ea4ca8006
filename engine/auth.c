/* SPDX-License-Identifier: Apache-2.0 */
/*
 * auth.c - the job-secret challenge-response of auth.h, on libcrypto's
 * HMAC-SHA256, RAND_bytes and CRYPTO_memcmp, and the secret loader.
 *
 * Every message starts with the same four bytes: the magic "KA", the
 * version and the type.  The MACs do not cover these bytes; they cover a
 * label that names the version instead, and the decoders insist on the
 * exact bytes, so no field escapes both checks.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "auth.h"

#define MAGIC0	'K'
#define MAGIC1	'A'
#define VERSION 1u
#define HDR_LEN 4u
_Static_assert(KN_AUTH_CHALLENGE_LEN == HDR_LEN + KN_AUTH_NONCE_LEN &&
		       KN_AUTH_CONFIRM_LEN == HDR_LEN + KN_AUTH_MAC_LEN,
	       "a challenge is a nonce, a confirm a MAC, after the header");

/* The MAC input: label, direction, the two nonces, role, id. */
#define LABEL	   "kanel-auth-v1"
#define LABEL_LEN  (sizeof(LABEL) - 1)
#define MAC_IN_LEN (LABEL_LEN + 1 + 2 * KN_AUTH_NONCE_LEN + 1 + 4)

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static bool role_ok(unsigned int role)
{
	return role >= KN__ROLE_COORDINATOR && role <= KN__ROLE_WORKER;
}

static void put_hdr(uint8_t *out, enum kn__auth_type type)
{
	out[0] = MAGIC0;
	out[1] = MAGIC1;
	out[2] = VERSION;
	out[3] = (uint8_t)type;
}

/* The whole message is there, no more, and starts with the right header. */
static bool hdr_ok(const uint8_t *in, size_t len, size_t want,
		   enum kn__auth_type type)
{
	return in && len == want && in[0] == MAGIC0 && in[1] == MAGIC1 &&
	       in[2] == VERSION && in[3] == type;
}

/* A message whose body is one array of @n bytes after the header. */
static void put_body(uint8_t *out, enum kn__auth_type type, const uint8_t *body,
		     size_t n)
{
	put_hdr(out, type);
	memcpy(out + HDR_LEN, body, n);
}

static int get_body(const void *buf, size_t len, enum kn__auth_type type,
		    uint8_t *body, size_t n)
{
	const uint8_t *in = buf;

	if (!hdr_ok(in, len, HDR_LEN + n, type))
		return -EPROTO;
	memcpy(body, in + HDR_LEN, n);
	return 0;
}

void kn__auth_challenge_encode(const struct kn__auth_challenge *m,
			       uint8_t out[KN_AUTH_CHALLENGE_LEN])
{
	put_body(out, KN__AUTH_CHALLENGE, m->nonce, KN_AUTH_NONCE_LEN);
}

int kn__auth_challenge_decode(const void *buf, size_t len,
			      struct kn__auth_challenge *m)
{
	return get_body(buf, len, KN__AUTH_CHALLENGE, m->nonce,
			KN_AUTH_NONCE_LEN);
}

/* ANSWER: header, nonce, role, 3 reserved bytes, id, MAC. */
#define ANS_NONCE 4u
#define ANS_ROLE  36u
#define ANS_RSVD  37u
#define ANS_ID	  40u
#define ANS_MAC	  44u

void kn__auth_answer_encode(const struct kn__auth_answer *m,
			    uint8_t out[KN_AUTH_ANSWER_LEN])
{
	put_hdr(out, KN__AUTH_ANSWER);
	memcpy(out + ANS_NONCE, m->nonce, KN_AUTH_NONCE_LEN);
	out[ANS_ROLE] = m->role;
	memset(out + ANS_RSVD, 0, ANS_ID - ANS_RSVD);
	put32(out + ANS_ID, m->id);
	memcpy(out + ANS_MAC, m->mac, KN_AUTH_MAC_LEN);
}

int kn__auth_answer_decode(const void *buf, size_t len,
			   struct kn__auth_answer *m)
{
	const uint8_t *in = buf;

	if (!hdr_ok(in, len, KN_AUTH_ANSWER_LEN, KN__AUTH_ANSWER) ||
	    !role_ok(in[ANS_ROLE]) || in[ANS_RSVD] || in[ANS_RSVD + 1] ||
	    in[ANS_RSVD + 2])
		return -EPROTO;
	memcpy(m->nonce, in + ANS_NONCE, KN_AUTH_NONCE_LEN);
	m->role = in[ANS_ROLE];
	m->id = get32(in + ANS_ID);
	memcpy(m->mac, in + ANS_MAC, KN_AUTH_MAC_LEN);
	return 0;
}

void kn__auth_confirm_encode(const struct kn__auth_confirm *m,
			     uint8_t out[KN_AUTH_CONFIRM_LEN])
{
	put_body(out, KN__AUTH_CONFIRM, m->mac, KN_AUTH_MAC_LEN);
}

int kn__auth_confirm_decode(const void *buf, size_t len,
			    struct kn__auth_confirm *m)
{
	return get_body(buf, len, KN__AUTH_CONFIRM, m->mac, KN_AUTH_MAC_LEN);
}

int kn__auth_hmac(const uint8_t *key, size_t key_len, const void *data,
		  size_t len, uint8_t mac[KN_AUTH_MAC_LEN])
{
	unsigned int mac_len = 0;

	if (key_len > INT_MAX)
		return -EINVAL;
	if (!HMAC(EVP_sha256(), key, (int)key_len, data, len, mac, &mac_len) ||
	    mac_len != KN_AUTH_MAC_LEN)
		return -EIO;
	return 0;
}

/*
 * The MAC of one direction: @dir is 'c' (connector's ANSWER) or 'a'
 * (acceptor's CONFIRM); @first and @second are the nonces in that order.
 */
static int exchange_mac(const uint8_t *secret, size_t secret_len, char dir,
			const uint8_t *first, const uint8_t *second,
			unsigned int role, uint32_t id,
			uint8_t mac[KN_AUTH_MAC_LEN])
{
	uint8_t in[MAC_IN_LEN], *p = in;

	if (!secret || !secret_len || secret_len > KN_AUTH_SECRET_MAX ||
	    !role_ok(role))
		return -EINVAL;
	memcpy(p, LABEL, LABEL_LEN);
	p += LABEL_LEN;
	*p++ = (uint8_t)dir;
	memcpy(p, first, KN_AUTH_NONCE_LEN);
	p += KN_AUTH_NONCE_LEN;
	memcpy(p, second, KN_AUTH_NONCE_LEN);
	p += KN_AUTH_NONCE_LEN;
	*p++ = (uint8_t)role;
	put32(p, id);
	return kn__auth_hmac(secret, secret_len, in, sizeof(in), mac);
}

/* Compute the MAC @dir expects and compare it with @got in constant time. */
static int check_mac(const uint8_t *secret, size_t secret_len, char dir,
		     const uint8_t *first, const uint8_t *second,
		     unsigned int role, uint32_t id, const uint8_t *got)
{
	uint8_t want[KN_AUTH_MAC_LEN];
	int ret;

	ret = exchange_mac(secret, secret_len, dir, first, second, role, id,
			   want);
	if (!ret && CRYPTO_memcmp(want, got, KN_AUTH_MAC_LEN) != 0)
		ret = -EACCES;
	OPENSSL_cleanse(want, sizeof(want));
	return ret;
}

static int random_nonce(uint8_t nonce[KN_AUTH_NONCE_LEN])
{
	return RAND_bytes(nonce, KN_AUTH_NONCE_LEN) == 1 ? 0 : -EIO;
}

int kn__auth_challenge_make(struct kn__auth_challenge *ch)
{
	struct kn__auth_challenge c;

	if (random_nonce(c.nonce))
		return -EIO;
	*ch = c;
	return 0;
}

int kn__auth_answer_make(const uint8_t *secret, size_t secret_len,
			 const struct kn__auth_challenge *ch,
			 enum kn__role role, uint32_t id,
			 struct kn__auth_answer *ans)
{
	struct kn__auth_answer a = { .role = (uint8_t)role, .id = id };
	int ret;

	if (!role_ok(role))
		return -EINVAL;
	if (random_nonce(a.nonce))
		return -EIO;
	ret = exchange_mac(secret, secret_len, 'c', ch->nonce, a.nonce, role,
			   id, a.mac);
	if (ret)
		return ret;
	*ans = a;
	return 0;
}

int kn__auth_answer_check(const uint8_t *secret, size_t secret_len,
			  const struct kn__auth_challenge *ch,
			  const struct kn__auth_answer *ans)
{
	return check_mac(secret, secret_len, 'c', ch->nonce, ans->nonce,
			 ans->role, ans->id, ans->mac);
}

int kn__auth_confirm_make(const uint8_t *secret, size_t secret_len,
			  const struct kn__auth_challenge *ch,
			  const struct kn__auth_answer *ans,
			  struct kn__auth_confirm *conf)
{
	struct kn__auth_confirm c;
	int ret;

	ret = exchange_mac(secret, secret_len, 'a', ans->nonce, ch->nonce,
			   ans->role, ans->id, c.mac);
	if (ret)
		return ret;
	*conf = c;
	return 0;
}

int kn__auth_confirm_check(const uint8_t *secret, size_t secret_len,
			   const struct kn__auth_challenge *ch,
			   const struct kn__auth_answer *ans,
			   const struct kn__auth_confirm *conf)
{
	return check_mac(secret, secret_len, 'a', ans->nonce, ch->nonce,
			 ans->role, ans->id, conf->mac);
}

void kn__auth_wipe(void *p, size_t len)
{
	if (p && len)
		OPENSSL_cleanse(p, len);
}

extern char **environ;

static const char *env_lookup(char *const *envp, const char *name)
{
	size_t n = strlen(name);

	if (!envp)
		envp = environ;
	for (; envp && *envp; envp++)
		if (!strncmp(*envp, name, n) && (*envp)[n] == '=')
			return *envp + n + 1;
	return NULL;
}

#define fail(err, errlen, ...)                                  \
	do {                                                    \
		if ((err) && (errlen))                          \
			snprintf((err), (errlen), __VA_ARGS__); \
	} while (0)

/*
 * Read the secret file into @out (KN_AUTH_SECRET_MAX + 1 bytes, so that
 * a longer file shows).  Returns the byte count or a negative errno.
 */
static ssize_t read_secret_file(const char *path, uint8_t *out, char *err,
				size_t errlen)
{
	struct stat st;
	size_t got = 0;
	ssize_t n;
	int fd, ret;

	/* O_NONBLOCK: opening a FIFO must not wait for a writer */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) {
		ret = -errno;
		fail(err, errlen, "secret file %s: %s", path, strerror(-ret));
		return ret;
	}
	if (fstat(fd, &st)) {
		ret = -errno;
		fail(err, errlen, "secret file %s: %s", path, strerror(-ret));
		goto close_fd;
	}
	if (!S_ISREG(st.st_mode)) {
		ret = -EINVAL;
		fail(err, errlen, "secret file %s: not a regular file", path);
		goto close_fd;
	}
	if (st.st_mode & (S_IRWXG | S_IRWXO)) {
		ret = -EPERM;
		fail(err, errlen,
		     "secret file %s: mode %04o lets group or others in; "
		     "run chmod 600 %s",
		     path, (unsigned int)(st.st_mode & 07777), path);
		goto close_fd;
	}
	while (got <= KN_AUTH_SECRET_MAX) {
		n = read(fd, out + got, KN_AUTH_SECRET_MAX + 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			ret = -errno;
			fail(err, errlen, "secret file %s: %s", path,
			     strerror(-ret));
			goto close_fd;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	ret = (int)got;
close_fd:
	close(fd);
	return ret;
}

int kn__auth_load_secret(const char *path, char *const *envp, uint8_t *buf,
			 size_t cap, size_t *len, char *err, size_t errlen)
{
	uint8_t tmp[KN_AUTH_SECRET_MAX + 1];
	/* for messages: "secret file PATH" or "KANEL_SECRET" */
	const char *what = path ? "secret file " : "";
	const char *name = path ? path : "KANEL_SECRET";
	const char *val = NULL;
	size_t max = cap < KN_AUTH_SECRET_MAX ? cap : KN_AUTH_SECRET_MAX;
	ssize_t n;
	int ret;

	if (!buf || !len)
		return -EINVAL;
	if (path) {
		n = read_secret_file(path, tmp, err, errlen);
		if (n < 0)
			return (int)n;
	} else {
		val = env_lookup(envp, "KANEL_SECRET");
		if (!val) {
			fail(err, errlen,
			     "no job secret: set KANEL_SECRET or pass "
			     "--secret-file (KANEL_SECRET_FILE)");
			return -ENOENT;
		}
		n = (ssize_t)strlen(val);
	}
	if (n == 0) {
		ret = -EINVAL;
		fail(err, errlen, "%s%s is empty", what, name);
	} else if ((size_t)n > max) {
		ret = -EFBIG;
		fail(err, errlen, "%s%s is longer than %zu bytes", what, name,
		     max);
	} else {
		ret = 0;
		memcpy(buf, path ? tmp : (const uint8_t *)val, (size_t)n);
		*len = (size_t)n;
	}
	OPENSSL_cleanse(tmp, sizeof(tmp));
	return ret;
}
