/* SPDX-License-Identifier: Apache-2.0 */
/*
 * auth.h - proving that a connection belongs to the job: mutual
 * challenge-response over a shared job secret with HMAC-SHA256
 * (DESIGN.md section 6; the byte layouts are in docs/configuration.md).
 *
 * Three messages, each a few dozen bytes so that they fit in one control
 * message of the transport:
 *
 *   acceptor  -> connector  CHALLENGE  acceptor's 32-byte random nonce
 *   connector -> acceptor   ANSWER     connector's nonce, role, id, MAC
 *   acceptor  -> connector  CONFIRM    MAC
 *
 *   ANSWER's MAC  = HMAC(secret, "kanel-auth-v1" "c" Na Nc role id)
 *   CONFIRM's MAC = HMAC(secret, "kanel-auth-v1" "a" Nc Na role id)
 *
 * The acceptor trusts the connector's role and id once the ANSWER checks;
 * the connector trusts the acceptor once the CONFIRM checks.  Fresh
 * nonces on both sides defeat replay, the direction letter defeats
 * reflecting one side's MAC back as the other's.  The exchange
 * authenticates; it neither encrypts nor binds the connection, so a
 * man-in-the-middle that relays all three messages is not detected.
 *
 * Everything here is a pure function over caller buffers, thread-safe and
 * non-blocking, except that kn__auth_challenge_make and
 * kn__auth_answer_make read randomness, and kn__auth_load_secret reads a
 * file or the environment.  Checks compare in constant time.
 */
#ifndef KN_ENGINE_AUTH_H
#define KN_ENGINE_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"

#define KN_AUTH_NONCE_LEN 32u
#define KN_AUTH_MAC_LEN	  32u /* HMAC-SHA256 */
/* Longest secret accepted; longer keys would be hashed down anyway. */
#define KN_AUTH_SECRET_MAX 1024u

/* Encoded sizes; every message is exactly this long on the wire. */
#define KN_AUTH_CHALLENGE_LEN 36u
#define KN_AUTH_ANSWER_LEN    76u
#define KN_AUTH_CONFIRM_LEN   36u
#define KN_AUTH_MSG_MAX	      76u /* the largest of the three */

/* The message type, byte 3 of every message. */
enum kn__auth_type {
	KN__AUTH_CHALLENGE = 1,
	KN__AUTH_ANSWER = 2,
	KN__AUTH_CONFIRM = 3,
};

/* Acceptor -> connector: the acceptor's nonce.  Keep it until CONFIRM. */
struct kn__auth_challenge {
	uint8_t nonce[KN_AUTH_NONCE_LEN];
};

/* Connector -> acceptor.  The connector keeps its own until CONFIRM. */
struct kn__auth_answer {
	uint8_t nonce[KN_AUTH_NONCE_LEN]; /* the connector's */
	uint8_t role;			  /* enum kn__role */
	uint32_t id;			  /* rank within the role */
	uint8_t mac[KN_AUTH_MAC_LEN];
};

/* Acceptor -> connector. */
struct kn__auth_confirm {
	uint8_t mac[KN_AUTH_MAC_LEN];
};

/*
 * Encoding, little-endian, into exactly KN_AUTH_*_LEN bytes.  Decoding
 * takes the whole received message: it returns 0, or -EPROTO when @len is
 * not the exact size, the magic, version or type is wrong, a reserved
 * byte is not zero or (ANSWER) the role is unknown.  The out-parameter is
 * written only on success.
 */
void kn__auth_challenge_encode(const struct kn__auth_challenge *m,
			       uint8_t out[KN_AUTH_CHALLENGE_LEN]);
int kn__auth_challenge_decode(const void *buf, size_t len,
			      struct kn__auth_challenge *m);
void kn__auth_answer_encode(const struct kn__auth_answer *m,
			    uint8_t out[KN_AUTH_ANSWER_LEN]);
int kn__auth_answer_decode(const void *buf, size_t len,
			   struct kn__auth_answer *m);
void kn__auth_confirm_encode(const struct kn__auth_confirm *m,
			     uint8_t out[KN_AUTH_CONFIRM_LEN]);
int kn__auth_confirm_decode(const void *buf, size_t len,
			    struct kn__auth_confirm *m);

/*
 * The steps.  Every function that takes the secret returns -EINVAL for a
 * NULL or empty secret, one longer than KN_AUTH_SECRET_MAX, or a role
 * that is not an enum kn__role, and -EIO if libcrypto fails.
 */

/* Acceptor, step 1: a fresh challenge.  Returns 0 or -EIO (no entropy). */
int kn__auth_challenge_make(struct kn__auth_challenge *ch);

/*
 * Connector, step 2: answer @ch as @role @id with a fresh nonce of its
 * own.  Keep @ans to check the CONFIRM.  Returns 0 or as above.
 */
int kn__auth_answer_make(const uint8_t *secret, size_t secret_len,
			 const struct kn__auth_challenge *ch,
			 enum kn__role role, uint32_t id,
			 struct kn__auth_answer *ans);

/*
 * Acceptor, step 3: does @ans answer @ch (the challenge this acceptor
 * sent on this connection) under the job secret?  Returns 0, after which
 * @ans->role and @ans->id are proven, -EACCES if not, or as above.
 */
int kn__auth_answer_check(const uint8_t *secret, size_t secret_len,
			  const struct kn__auth_challenge *ch,
			  const struct kn__auth_answer *ans);

/* Acceptor, step 3 once the check passed: the CONFIRM to send back. */
int kn__auth_confirm_make(const uint8_t *secret, size_t secret_len,
			  const struct kn__auth_challenge *ch,
			  const struct kn__auth_answer *ans,
			  struct kn__auth_confirm *conf);

/*
 * Connector, last step: does @conf confirm the exchange of @ch and the
 * connector's own @ans?  Returns 0, -EACCES for an acceptor that does not
 * hold the secret, or as above.
 */
int kn__auth_confirm_check(const uint8_t *secret, size_t secret_len,
			   const struct kn__auth_challenge *ch,
			   const struct kn__auth_answer *ans,
			   const struct kn__auth_confirm *conf);

/*
 * HMAC-SHA256 of @len bytes at @data under @key, into @mac.  Exposed for
 * the known-answer test.  Returns 0, -EINVAL (key_len above INT_MAX) or
 * -EIO.
 */
int kn__auth_hmac(const uint8_t *key, size_t key_len, const void *data,
		  size_t len, uint8_t mac[KN_AUTH_MAC_LEN]);

/*
 * Load the job secret into @buf (@cap bytes): the bytes of the file at
 * @path if @path is not NULL (all of them, a trailing newline included),
 * else the bytes of the environment variable KANEL_SECRET, looked up in
 * @envp (NULL: the process environment).  Blocks on the file read.
 *
 * Returns 0 with the length in @len, or a negative errno with one line in
 * @err (if not NULL) naming the file or variable: -ENOENT (no such file,
 * or neither a path nor KANEL_SECRET), -EPERM (the file's mode lets group
 * or others in: chmod 600 it), -EINVAL (empty, or not a regular file),
 * -EFBIG (longer than @cap or KN_AUTH_SECRET_MAX), or another errno of
 * open/read.  @buf is written only on success; wipe it with kn__auth_wipe
 * when done.  Copies made here are wiped.
 */
int kn__auth_load_secret(const char *path, char *const *envp, uint8_t *buf,
			 size_t cap, size_t *len, char *err, size_t errlen);

/* Overwrite @len bytes at @p with zeros in a way the compiler keeps. */
void kn__auth_wipe(void *p, size_t len);

#endif /* KN_ENGINE_AUTH_H */
