/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_auth.c - the job-secret handshake of engine/auth.h: the whole
 * exchange through encoded bytes; a wrong secret, every single-bit change
 * of an ANSWER or CONFIRM, a replayed ANSWER or CONFIRM and a reflected
 * MAC are all refused; malformed messages decode to -EPROTO; HMAC-SHA256
 * against RFC 4231; the secret loader's file modes, sizes and sources.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "auth.h"

static const uint8_t secret[] = "correct horse battery staple";
#define SECRET_LEN (sizeof(secret) - 1)
static const uint8_t other[] = "correct horse battery stapler";
#define OTHER_LEN (sizeof(other) - 1)

/* Everything both sides keep during one exchange. */
struct exchange {
	struct kn__auth_challenge ch; /* acceptor's, as sent */
	struct kn__auth_answer ans;   /* connector's, as sent */
	struct kn__auth_confirm conf; /* acceptor's, as sent */
	uint8_t ch_buf[KN_AUTH_CHALLENGE_LEN];
	uint8_t ans_buf[KN_AUTH_ANSWER_LEN];
	uint8_t conf_buf[KN_AUTH_CONFIRM_LEN];
};

/* Steps 1 and 2: a challenge, and the connector's answer in bytes. */
static void challenge_and_answer(struct exchange *x, const uint8_t *key,
				 size_t key_len, enum kn__role role,
				 uint32_t id)
{
	struct kn__auth_challenge got;

	cr_assert_eq(kn__auth_challenge_make(&x->ch), 0);
	kn__auth_challenge_encode(&x->ch, x->ch_buf);
	cr_assert_eq(
		kn__auth_challenge_decode(x->ch_buf, sizeof(x->ch_buf), &got),
		0);
	cr_assert_eq(
		kn__auth_answer_make(key, key_len, &got, role, id, &x->ans), 0);
	kn__auth_answer_encode(&x->ans, x->ans_buf);
}

/* The acceptor reads the answer @x carries. */
static void read_answer(const struct exchange *x, struct kn__auth_answer *ans)
{
	cr_assert_eq(
		kn__auth_answer_decode(x->ans_buf, sizeof(x->ans_buf), ans), 0);
}

/* Steps 1 and 2 with the job's secret, the answer read and accepted. */
static void accepted(struct exchange *x, enum kn__role role, uint32_t id,
		     struct kn__auth_answer *ans)
{
	challenge_and_answer(x, secret, SECRET_LEN, role, id);
	read_answer(x, ans);
	cr_assert_eq(kn__auth_answer_check(secret, SECRET_LEN, &x->ch, ans), 0);
}

/* Step 3: the acceptor's confirm of @ans, in @x and in bytes. */
static void confirm(struct exchange *x, const struct kn__auth_answer *ans)
{
	cr_assert_eq(kn__auth_confirm_make(secret, SECRET_LEN, &x->ch, ans,
					   &x->conf),
		     0);
	kn__auth_confirm_encode(&x->conf, x->conf_buf);
}

Test(auth, full_exchange_succeeds)
{
	struct exchange x;
	struct kn__auth_answer ans;
	struct kn__auth_confirm conf;

	/* acceptor */
	accepted(&x, KN__ROLE_WORKER, 7, &ans);
	cr_assert_eq(ans.role, KN__ROLE_WORKER);
	cr_assert_eq(ans.id, 7);
	confirm(&x, &ans);

	/* connector */
	cr_assert_eq(
		kn__auth_confirm_decode(x.conf_buf, sizeof(x.conf_buf), &conf),
		0);
	cr_assert_eq(kn__auth_confirm_check(secret, SECRET_LEN, &x.ch, &x.ans,
					    &conf),
		     0);
}

Test(auth, every_role_and_large_ids_pass)
{
	static const enum kn__role roles[] = { KN__ROLE_COORDINATOR,
					       KN__ROLE_SERVER,
					       KN__ROLE_WORKER };
	static const uint32_t ids[] = { 0, 1, 65535, UINT32_MAX };

	for (size_t r = 0; r < 3; r++) {
		for (size_t i = 0; i < 4; i++) {
			struct exchange x;
			struct kn__auth_answer ans;

			accepted(&x, roles[r], ids[i], &ans);
			cr_assert_eq(ans.role, roles[r]);
			cr_assert_eq(ans.id, ids[i]);
		}
	}
}

Test(auth, wrong_secret_fails_at_the_acceptor)
{
	struct exchange x;
	struct kn__auth_answer ans;

	challenge_and_answer(&x, other, OTHER_LEN, KN__ROLE_SERVER, 1);
	read_answer(&x, &ans);
	cr_assert_eq(kn__auth_answer_check(secret, SECRET_LEN, &x.ch, &ans),
		     -EACCES);
	/* a prefix of the secret is a different secret */
	cr_assert_eq(kn__auth_answer_check(secret, SECRET_LEN - 1, &x.ch, &ans),
		     -EACCES);
}

/* Which defence refused a message with one bit changed. */
enum refused_by { BY_DECODER, BY_MAC };

/* Refuses the message @buf of exchange @x, byte @i's bit @bit changed:
 * by which defence (the test fails if it is accepted). */
typedef enum refused_by flipped_fn(const struct exchange *x, const uint8_t *buf,
				   size_t i, int bit);

/* Each single-bit change of the @len bytes at @msg, handed to @refuse;
 * how many each defence refused, in @by. */
static void flip_every_bit(const struct exchange *x, const uint8_t *msg,
			   size_t len, flipped_fn *refuse, unsigned int by[2])
{
	uint8_t buf[KN_AUTH_ANSWER_LEN + KN_AUTH_CONFIRM_LEN];

	cr_assert_leq(len, sizeof(buf));
	for (size_t i = 0; i < len; i++) {
		for (int bit = 0; bit < 8; bit++) {
			memcpy(buf, msg, len);
			buf[i] ^= (uint8_t)(1u << bit);
			by[refuse(x, buf, i, bit)]++;
		}
	}
}

static enum refused_by answer_flipped(const struct exchange *x,
				      const uint8_t *buf, size_t i, int bit)
{
	struct kn__auth_answer ans;
	int ret = kn__auth_answer_decode(buf, KN_AUTH_ANSWER_LEN, &ans);

	if (ret) {
		cr_assert_eq(ret, -EPROTO);
		return BY_DECODER;
	}
	cr_assert_eq(kn__auth_answer_check(secret, SECRET_LEN, &x->ch, &ans),
		     -EACCES, "byte %zu bit %d accepted", i, bit);
	return BY_MAC;
}

/*
 * Every single-bit change of the ANSWER's bytes is refused: by the
 * decoder (header, reserved bytes, an unknown role) or by the MAC.
 */
Test(auth, every_bit_of_the_answer_is_covered)
{
	struct exchange x;
	unsigned int by[2] = { 0, 0 };

	challenge_and_answer(&x, secret, SECRET_LEN, KN__ROLE_WORKER, 3);
	flip_every_bit(&x, x.ans_buf, KN_AUTH_ANSWER_LEN, answer_flipped, by);
	/* both defences were exercised: nonce, id, MAC and some role bits
	 * decode and fail the MAC; header and reserved bits do not decode */
	cr_assert_gt(by[BY_MAC], (32 + 4 + 32) * 8);
	cr_assert_gt(by[BY_DECODER], (4 + 3) * 8 - 1);
}

/* The CONFIRM's header is the decoder's to refuse, the rest the MAC's. */
static enum refused_by confirm_flipped(const struct exchange *x,
				       const uint8_t *buf, size_t i, int bit)
{
	struct kn__auth_confirm conf;
	int ret = kn__auth_confirm_decode(buf, KN_AUTH_CONFIRM_LEN, &conf);

	if (i < 4) {
		cr_assert_eq(ret, -EPROTO);
		return BY_DECODER;
	}
	cr_assert_eq(ret, 0);
	cr_assert_eq(kn__auth_confirm_check(secret, SECRET_LEN, &x->ch, &x->ans,
					    &conf),
		     -EACCES, "byte %zu bit %d accepted", i, bit);
	return BY_MAC;
}

Test(auth, every_bit_of_the_confirm_is_covered)
{
	struct exchange x;
	struct kn__auth_answer ans;
	unsigned int by[2] = { 0, 0 };

	challenge_and_answer(&x, secret, SECRET_LEN, KN__ROLE_SERVER, 0);
	read_answer(&x, &ans);
	confirm(&x, &ans);
	flip_every_bit(&x, x.conf_buf, KN_AUTH_CONFIRM_LEN, confirm_flipped,
		       by);
}

Test(auth, an_old_answer_fails_a_new_challenge)
{
	struct exchange old;
	struct kn__auth_challenge fresh;
	struct kn__auth_answer ans;

	accepted(&old, KN__ROLE_WORKER, 2, &ans);
	/* an eavesdropper replays the bytes on a new connection */
	cr_assert_eq(kn__auth_challenge_make(&fresh), 0);
	cr_assert_neq(memcmp(fresh.nonce, old.ch.nonce, KN_AUTH_NONCE_LEN), 0);
	cr_assert_eq(kn__auth_answer_check(secret, SECRET_LEN, &fresh, &ans),
		     -EACCES);
}

Test(auth, a_fake_acceptor_is_detected)
{
	struct exchange x;
	struct kn__auth_answer ans;
	struct kn__auth_confirm fake;

	challenge_and_answer(&x, secret, SECRET_LEN, KN__ROLE_WORKER, 5);
	read_answer(&x, &ans);
	/* it does not know the secret: it confirms with its own guess */
	cr_assert_eq(
		kn__auth_confirm_make(other, OTHER_LEN, &x.ch, &ans, &fake), 0);
	cr_assert_eq(kn__auth_confirm_check(secret, SECRET_LEN, &x.ch, &x.ans,
					    &fake),
		     -EACCES);
}

Test(auth, a_replayed_confirm_is_detected)
{
	struct exchange a, b;
	struct kn__auth_confirm recorded;

	/* a genuine exchange, recorded by an eavesdropper */
	challenge_and_answer(&a, secret, SECRET_LEN, KN__ROLE_WORKER, 1);
	cr_assert_eq(kn__auth_confirm_make(secret, SECRET_LEN, &a.ch, &a.ans,
					   &recorded),
		     0);
	/* later it poses as the acceptor and replays challenge and confirm:
	 * the connector's fresh nonce makes the old confirm worthless */
	b.ch = a.ch;
	cr_assert_eq(kn__auth_answer_make(secret, SECRET_LEN, &b.ch,
					  KN__ROLE_WORKER, 1, &b.ans),
		     0);
	cr_assert_eq(kn__auth_confirm_check(secret, SECRET_LEN, &b.ch, &b.ans,
					    &recorded),
		     -EACCES);
}

/* One side's MAC sent back as the other's is refused: "c" versus "a". */
Test(auth, a_reflected_mac_is_refused)
{
	struct exchange x;
	struct kn__auth_confirm mirror;
	struct kn__auth_answer as_answer;

	challenge_and_answer(&x, secret, SECRET_LEN, KN__ROLE_SERVER, 4);
	memcpy(mirror.mac, x.ans.mac, KN_AUTH_MAC_LEN);
	cr_assert_eq(kn__auth_confirm_check(secret, SECRET_LEN, &x.ch, &x.ans,
					    &mirror),
		     -EACCES);

	/* and a confirm is no answer, even with the nonces swapped */
	cr_assert_eq(kn__auth_confirm_make(secret, SECRET_LEN, &x.ch, &x.ans,
					   &x.conf),
		     0);
	as_answer = x.ans;
	memcpy(as_answer.mac, x.conf.mac, KN_AUTH_MAC_LEN);
	cr_assert_eq(
		kn__auth_answer_check(secret, SECRET_LEN, &x.ch, &as_answer),
		-EACCES);
}

Test(auth, the_claimed_identity_is_bound)
{
	struct exchange x;
	struct kn__auth_answer forged;

	challenge_and_answer(&x, secret, SECRET_LEN, KN__ROLE_WORKER, 9);
	forged = x.ans;
	forged.role = KN__ROLE_SERVER;
	cr_assert_eq(kn__auth_answer_check(secret, SECRET_LEN, &x.ch, &forged),
		     -EACCES);
	forged = x.ans;
	forged.id = 8;
	cr_assert_eq(kn__auth_answer_check(secret, SECRET_LEN, &x.ch, &forged),
		     -EACCES);
}

Test(auth, nonces_are_fresh)
{
	struct kn__auth_challenge a, b;
	struct kn__auth_answer x, y;
	static const uint8_t zero[KN_AUTH_NONCE_LEN];

	cr_assert_eq(kn__auth_challenge_make(&a), 0);
	cr_assert_eq(kn__auth_challenge_make(&b), 0);
	cr_assert_neq(memcmp(a.nonce, b.nonce, KN_AUTH_NONCE_LEN), 0);
	cr_assert_neq(memcmp(a.nonce, zero, KN_AUTH_NONCE_LEN), 0);
	cr_assert_eq(kn__auth_answer_make(secret, SECRET_LEN, &a,
					  KN__ROLE_WORKER, 0, &x),
		     0);
	cr_assert_eq(kn__auth_answer_make(secret, SECRET_LEN, &a,
					  KN__ROLE_WORKER, 0, &y),
		     0);
	cr_assert_neq(memcmp(x.nonce, y.nonce, KN_AUTH_NONCE_LEN), 0);
	cr_assert_neq(memcmp(x.mac, y.mac, KN_AUTH_MAC_LEN), 0);
}

Test(auth, bad_secrets_and_roles_are_refused)
{
	struct kn__auth_challenge ch;
	struct kn__auth_answer ans, untouched;
	struct kn__auth_confirm conf;
	static uint8_t big[KN_AUTH_SECRET_MAX + 1];

	cr_assert_eq(kn__auth_challenge_make(&ch), 0);
	memset(&ans, 0xa5, sizeof(ans));
	untouched = ans;
	cr_assert_eq(
		kn__auth_answer_make(secret, 0, &ch, KN__ROLE_WORKER, 0, &ans),
		-EINVAL);
	cr_assert_eq(
		kn__auth_answer_make(NULL, 4, &ch, KN__ROLE_WORKER, 0, &ans),
		-EINVAL);
	cr_assert_eq(kn__auth_answer_make(big, sizeof(big), &ch,
					  KN__ROLE_WORKER, 0, &ans),
		     -EINVAL);
	cr_assert_eq(kn__auth_answer_make(secret, SECRET_LEN, &ch,
					  (enum kn__role)0, 0, &ans),
		     -EINVAL);
	cr_assert_eq(kn__auth_answer_make(secret, SECRET_LEN, &ch,
					  (enum kn__role)4, 0, &ans),
		     -EINVAL);
	/* out-parameters are written only on success */
	cr_assert_eq(memcmp(&ans, &untouched, sizeof(ans)), 0);

	cr_assert_eq(kn__auth_answer_make(secret, SECRET_LEN, &ch,
					  KN__ROLE_WORKER, 0, &ans),
		     0);
	cr_assert_eq(kn__auth_answer_check(secret, 0, &ch, &ans), -EINVAL);
	cr_assert_eq(kn__auth_confirm_make(NULL, 0, &ch, &ans, &conf), -EINVAL);
	cr_assert_eq(kn__auth_confirm_check(secret, 0, &ch, &ans, &conf),
		     -EINVAL);
	/* the largest secret allowed works */
	memset(big, 0x5a, sizeof(big));
	cr_assert_eq(kn__auth_answer_make(big, KN_AUTH_SECRET_MAX, &ch,
					  KN__ROLE_WORKER, 0, &ans),
		     0);
	cr_assert_eq(kn__auth_answer_check(big, KN_AUTH_SECRET_MAX, &ch, &ans),
		     0);
}

/* The layouts of docs/configuration.md, byte by byte. */
Test(auth, encodings_are_little_endian_and_as_documented)
{
	struct kn__auth_challenge ch;
	struct kn__auth_answer ans = { .role = KN__ROLE_SERVER,
				       .id = 0x04030201 };
	struct kn__auth_confirm conf;
	uint8_t c[KN_AUTH_CHALLENGE_LEN], a[KN_AUTH_ANSWER_LEN],
		f[KN_AUTH_CONFIRM_LEN];

	for (unsigned int i = 0; i < KN_AUTH_NONCE_LEN; i++) {
		ch.nonce[i] = (uint8_t)i;
		ans.nonce[i] = (uint8_t)(0x40 + i);
		ans.mac[i] = (uint8_t)(0x80 + i);
		conf.mac[i] = (uint8_t)(0xc0 + i);
	}
	kn__auth_challenge_encode(&ch, c);
	kn__auth_answer_encode(&ans, a);
	kn__auth_confirm_encode(&conf, f);

	cr_assert_eq(memcmp(c, "KA\x01\x01", 4), 0);
	cr_assert_eq(memcmp(c + 4, ch.nonce, 32), 0);
	cr_assert_eq(memcmp(a, "KA\x01\x02", 4), 0);
	cr_assert_eq(memcmp(a + 4, ans.nonce, 32), 0);
	cr_assert_eq(a[36], 2);
	cr_assert_eq(memcmp(a + 37, "\0\0\0", 3), 0);
	cr_assert_eq(memcmp(a + 40, "\x01\x02\x03\x04", 4), 0);
	cr_assert_eq(memcmp(a + 44, ans.mac, 32), 0);
	cr_assert_eq(memcmp(f, "KA\x01\x03", 4), 0);
	cr_assert_eq(memcmp(f + 4, conf.mac, 32), 0);
	cr_assert_leq(KN_AUTH_ANSWER_LEN, KN_AUTH_MSG_MAX);
	cr_assert_leq(KN_AUTH_CHALLENGE_LEN, KN_AUTH_MSG_MAX);
}

/* Each decoder on every length but its own, from 0 to 4096. */
Test(auth, truncated_or_oversized_messages_are_refused)
{
	static uint8_t buf[4096];
	struct kn__auth_challenge ch, ch0;
	struct kn__auth_answer ans = { .role = KN__ROLE_WORKER }, ans0;
	struct kn__auth_confirm conf = { { 0 } }, conf0;

	memset(&ch, 0, sizeof(ch));
	memset(&ch0, 0x11, sizeof(ch0));
	memset(&ans0, 0x22, sizeof(ans0));
	memset(&conf0, 0x33, sizeof(conf0));
	for (size_t len = 0; len <= sizeof(buf); len++) {
		struct kn__auth_challenge c = ch0;
		struct kn__auth_answer a = ans0;
		struct kn__auth_confirm f = conf0;

		/* a valid message of each kind at the front */
		kn__auth_challenge_encode(&ch, buf);
		if (len != KN_AUTH_CHALLENGE_LEN)
			cr_assert_eq(kn__auth_challenge_decode(buf, len, &c),
				     -EPROTO, "challenge of %zu bytes", len);
		kn__auth_answer_encode(&ans, buf);
		if (len != KN_AUTH_ANSWER_LEN)
			cr_assert_eq(kn__auth_answer_decode(buf, len, &a),
				     -EPROTO, "answer of %zu bytes", len);
		kn__auth_confirm_encode(&conf, buf);
		if (len != KN_AUTH_CONFIRM_LEN)
			cr_assert_eq(kn__auth_confirm_decode(buf, len, &f),
				     -EPROTO, "confirm of %zu bytes", len);
		cr_assert_eq(memcmp(&c, &ch0, sizeof(c)), 0);
		cr_assert_eq(memcmp(&a, &ans0, sizeof(a)), 0);
		cr_assert_eq(memcmp(&f, &conf0, sizeof(f)), 0);
	}
	cr_assert_eq(kn__auth_challenge_decode(NULL, 0, &ch), -EPROTO);
}

Test(auth, wrong_type_magic_version_reserved_or_role_is_refused)
{
	struct kn__auth_challenge ch = { { 0 } };
	struct kn__auth_answer ans = { .role = KN__ROLE_COORDINATOR };
	struct kn__auth_confirm conf;
	uint8_t c[KN_AUTH_CHALLENGE_LEN], a[KN_AUTH_ANSWER_LEN];

	kn__auth_challenge_encode(&ch, c);
	kn__auth_answer_encode(&ans, a);
	/* a challenge and a confirm have the same size, not the same type */
	cr_assert_eq(kn__auth_confirm_decode(c, sizeof(c), &conf), -EPROTO);
	cr_assert_eq(kn__auth_challenge_decode(c, sizeof(c), &ch), 0);

	for (unsigned int role = 0; role < 256; role++) {
		a[36] = (uint8_t)role;
		cr_assert_eq(kn__auth_answer_decode(a, sizeof(a), &ans),
			     role >= 1 && role <= 3 ? 0 : -EPROTO, "role %u",
			     role);
	}
	a[36] = KN__ROLE_WORKER;
	for (size_t i = 0; i < 4; i++) {
		uint8_t b[KN_AUTH_ANSWER_LEN];

		memcpy(b, a, sizeof(b));
		b[i] ^= 0xff;
		cr_assert_eq(kn__auth_answer_decode(b, sizeof(b), &ans),
			     -EPROTO);
	}
	for (size_t i = 37; i < 40; i++) {
		uint8_t b[KN_AUTH_ANSWER_LEN];

		memcpy(b, a, sizeof(b));
		b[i] = 1;
		cr_assert_eq(kn__auth_answer_decode(b, sizeof(b), &ans),
			     -EPROTO);
	}
}

static void hex(const char *s, uint8_t *out, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned int v;

		cr_assert_eq(sscanf(s + 2 * i, "%2x", &v), 1);
		out[i] = (uint8_t)v;
	}
}

/* RFC 4231 test cases 1, 2 and 6 (a key longer than the block). */
Test(auth, hmac_sha256_matches_rfc4231)
{
	static const struct {
		uint8_t key_byte; /* 0: the key is "Jefe" */
		size_t key_len;
		const char *data, *mac;
	} cases[] = {
		{ 0x0b, 20, "Hi There",
		  "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32"
		  "cff7" },
		{ 0, 4, "what do ya want for nothing?",
		  "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec"
		  "3843" },
		{ 0xaa, 131,
		  "Test Using Larger Than Block-Size Key - Hash Key First",
		  "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee3"
		  "7f54" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint8_t key[131], want[KN_AUTH_MAC_LEN], got[KN_AUTH_MAC_LEN];

		if (cases[i].key_byte)
			memset(key, cases[i].key_byte, cases[i].key_len);
		else
			memcpy(key, "Jefe", 4);
		hex(cases[i].mac, want, sizeof(want));
		cr_assert_eq(kn__auth_hmac(key, cases[i].key_len, cases[i].data,
					   strlen(cases[i].data), got),
			     0);
		cr_assert_eq(memcmp(got, want, sizeof(got)), 0,
			     "RFC 4231 case %zu", i);
	}
}

/* --- the secret loader --- */

static char dir[64];
static char path[PATH_MAX];

static void make_dir(void)
{
	strcpy(dir, "/tmp/kanel-auth-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/job.secret", dir);
}

static void remove_dir(void)
{
	unlink(path);
	rmdir(dir);
}

static void write_secret(const void *data, size_t len, mode_t mode)
{
	int fd;

	unlink(path);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, data, len), (ssize_t)len);
	cr_assert_eq(fchmod(fd, mode), 0);
	close(fd);
}

TestSuite(auth_secret, .init = make_dir, .fini = remove_dir);

Test(auth_secret, a_private_file_is_read_whole)
{
	uint8_t buf[KN_AUTH_SECRET_MAX];
	char *const env[] = { "KANEL_SECRET=not this one", NULL };
	char err[256] = "";
	size_t len = 0;

	write_secret("0123456789\n", 11, 0600);
	cr_assert_eq(kn__auth_load_secret(path, env, buf, sizeof(buf), &len,
					  err, sizeof(err)),
		     0, "%s", err);
	cr_assert_eq(len, 11);
	cr_assert_eq(memcmp(buf, "0123456789\n", 11), 0);
	kn__auth_wipe(buf, len);
	cr_assert_eq(buf[0], 0);

	write_secret("x", 1, 0400);
	cr_assert_eq(kn__auth_load_secret(path, env, buf, sizeof(buf), &len,
					  err, sizeof(err)),
		     0, "%s", err);
	cr_assert_eq(len, 1);
}

Test(auth_secret, a_file_others_can_read_is_refused)
{
	static const mode_t modes[] = { 0640, 0604, 0644, 0660, 0606,
					0610, 0601, 0620, 0602 };
	uint8_t buf[64] = { 0 };
	size_t len = 12345;

	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		char err[PATH_MAX + 128] = "";

		write_secret("secret", 6, modes[i]);
		cr_assert_eq(kn__auth_load_secret(path, NULL, buf, sizeof(buf),
						  &len, err, sizeof(err)),
			     -EPERM, "mode %o", modes[i]);
		cr_assert_not_null(strstr(err, path), "%s", err);
		cr_assert_not_null(strstr(err, "chmod 600"), "%s", err);
		cr_assert_eq(len, 12345);
		cr_assert_eq(buf[0], 0);
	}
}

Test(auth_secret, empty_missing_huge_and_odd_files_are_refused, .timeout = 10)
{
	static uint8_t big[KN_AUTH_SECRET_MAX + 1];
	uint8_t buf[KN_AUTH_SECRET_MAX];
	char err[PATH_MAX + 128];
	size_t len;

	write_secret("", 0, 0600);
	cr_assert_eq(kn__auth_load_secret(path, NULL, buf, sizeof(buf), &len,
					  err, sizeof(err)),
		     -EINVAL);
	cr_assert_not_null(strstr(err, "empty"), "%s", err);

	memset(big, 'k', sizeof(big));
	write_secret(big, sizeof(big), 0600);
	cr_assert_eq(kn__auth_load_secret(path, NULL, buf, sizeof(buf), &len,
					  err, sizeof(err)),
		     -EFBIG);
	cr_assert_not_null(strstr(err, path), "%s", err);
	/* exactly the limit is fine, one byte over the caller's room not */
	write_secret(big, KN_AUTH_SECRET_MAX, 0600);
	cr_assert_eq(kn__auth_load_secret(path, NULL, buf, sizeof(buf), &len,
					  err, sizeof(err)),
		     0);
	cr_assert_eq(len, KN_AUTH_SECRET_MAX);
	cr_assert_eq(kn__auth_load_secret(path, NULL, buf, 100, &len, err,
					  sizeof(err)),
		     -EFBIG);

	unlink(path);
	cr_assert_eq(kn__auth_load_secret(path, NULL, buf, sizeof(buf), &len,
					  err, sizeof(err)),
		     -ENOENT);
	cr_assert_not_null(strstr(err, path), "%s", err);

	cr_assert_eq(kn__auth_load_secret(dir, NULL, buf, sizeof(buf), &len,
					  err, sizeof(err)),
		     -EINVAL);
	cr_assert_not_null(strstr(err, "regular"), "%s", err);

	/* a FIFO is refused at once, not waited on for a writer */
	cr_assert_eq(mkfifo(path, 0600), 0);
	cr_assert_eq(kn__auth_load_secret(path, NULL, buf, sizeof(buf), &len,
					  err, sizeof(err)),
		     -EINVAL);
	cr_assert_not_null(strstr(err, "regular"), "%s", err);
}

Test(auth_secret, the_environment_is_used_without_a_file)
{
	char *const env[] = { "KANEL_SECRETS=no", "KANEL_SECRET=s3cret", NULL };
	char *const empty[] = { "KANEL_SECRET=", NULL };
	char *const none[] = { "HOME=/", NULL };
	uint8_t buf[64];
	char err[256];
	size_t len;

	cr_assert_eq(kn__auth_load_secret(NULL, env, buf, sizeof(buf), &len,
					  err, sizeof(err)),
		     0);
	cr_assert_eq(len, 6);
	cr_assert_eq(memcmp(buf, "s3cret", 6), 0);

	cr_assert_eq(kn__auth_load_secret(NULL, empty, buf, sizeof(buf), &len,
					  err, sizeof(err)),
		     -EINVAL);
	cr_assert_not_null(strstr(err, "KANEL_SECRET"), "%s", err);

	cr_assert_eq(kn__auth_load_secret(NULL, none, buf, sizeof(buf), &len,
					  err, sizeof(err)),
		     -ENOENT);
	cr_assert_not_null(strstr(err, "KANEL_SECRET"), "%s", err);
	cr_assert_not_null(strstr(err, "--secret-file"), "%s", err);

	cr_assert_eq(
		kn__auth_load_secret(NULL, env, buf, 5, &len, err, sizeof(err)),
		-EFBIG);
	/* no room for a message is fine too */
	cr_assert_eq(kn__auth_load_secret(NULL, none, buf, sizeof(buf), &len,
					  NULL, 0),
		     -ENOENT);
}

/* The loaded secret is the one the handshake uses: file and variable agree. */
Test(auth_secret, file_and_variable_secrets_interoperate)
{
	char *const env[] = { "KANEL_SECRET=job-42-secret", NULL };
	uint8_t a[64], b[64];
	size_t alen, blen;
	struct exchange x;

	write_secret("job-42-secret", 13, 0600);
	cr_assert_eq(
		kn__auth_load_secret(path, NULL, a, sizeof(a), &alen, NULL, 0),
		0);
	cr_assert_eq(
		kn__auth_load_secret(NULL, env, b, sizeof(b), &blen, NULL, 0),
		0);
	challenge_and_answer(&x, a, alen, KN__ROLE_WORKER, 0);
	cr_assert_eq(kn__auth_answer_check(b, blen, &x.ch, &x.ans), 0);
}
