/* SPDX-License-Identifier: Apache-2.0 */
/* sbx_sha256_buf (common/sha256.h) for sbx-helper: OpenSSL's, from a
 * libcrypto loaded on first use rather than linked. Every sandbox starts
 * with an exec of sbx-helper, and mapping and relocating libcrypto costs
 * that exec about 2 ms and 125 page faults on a VM whose faults are dear
 * (an empty main linked with -lcrypto against one without: 4.3 against
 * 2.4 ms, docs/dev/benchmarks.md), while the helper hashes only a
 * policy's digest, for `sbx-helper policy` and a one-shot's result file.
 * The helper links with --as-needed and never references libcrypto, so it
 * has no DT_NEEDED on it (helper.sha256_loaded checks).
 *
 * Loaded by the absolute path the build found (SBX_LIBCRYPTO_PATH, from
 * pkg-config's libdir), never by a search: a one-shot loads it after its
 * sandbox ran and /out was copied into --out, and a search path with an
 * empty element (the current directory, as `LD_LIBRARY_PATH=/x:` gives)
 * would then load a libcrypto.so.3 the sandbox wrote there, on the host
 * (review: shown with a constructor that ran in the host's namespaces).
 * A path with a slash is opened as it is, but the libraries it needs that
 * the helper has not loaded yet (none on Debian, where it needs libc only;
 * libz where OpenSSL is built with zlib, as on Fedora) are searched for: so
 * a one-shot asks for its digest before its command starts (oneshot.c),
 * when nothing of the sandbox's has reached the host (review). */
#include "sha256.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/opensslv.h>

#include "dl_root.h"

#if OPENSSL_VERSION_MAJOR != SBX_LIBCRYPTO_MAJOR
#error "the OpenSSL headers are not of the libcrypto at SBX_LIBCRYPTO_PATH"
#endif

static struct {
	__typeof__(OPENSSL_init_crypto) *init;
	__typeof__(EVP_sha256) *sha256;
	__typeof__(EVP_Digest) *digest;
	char why[300]; /* set when it could not be loaded */
} crypto;

static void load(void)
{
	void *lib = sbx_dl_open_root_only(SBX_LIBCRYPTO_PATH, crypto.why, sizeof(crypto.why));

	if (!lib)
		return;
	*(void **)&crypto.init = dlsym(lib, "OPENSSL_init_crypto");
	*(void **)&crypto.sha256 = dlsym(lib, "EVP_sha256");
	*(void **)&crypto.digest = dlsym(lib, "EVP_Digest");
	if (!crypto.init || !crypto.sha256 || !crypto.digest) {
		/* All or none: a half-found set must not be called. */
		crypto.init = NULL;
		crypto.sha256 = NULL;
		crypto.digest = NULL;
		snprintf(crypto.why, sizeof(crypto.why),
			 "it lacks OPENSSL_init_crypto, EVP_sha256 or EVP_Digest");
		dlclose(lib);
		return;
	}
	/* As sha256.c: no openssl.cnf, which configures nothing a sha256 needs. */
	crypto.init(OPENSSL_INIT_NO_LOAD_CONFIG, NULL);
}

int sbx_sha256_buf(const void *buf, size_t len, unsigned char md[32], struct sbx_err *err)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	unsigned char out[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;

	pthread_once(&once, load);
	if (!crypto.digest || !crypto.sha256)
		return sbx_fail(err,
				"sha256: %s cannot be loaded (Debian and Ubuntu: package libssl3): "
				"%s",
				SBX_LIBCRYPTO_PATH, crypto.why);
	if (!crypto.digest(buf, len, out, &mdlen, crypto.sha256(), NULL) || mdlen != 32)
		return sbx_fail(err, "sha256 failed");
	memcpy(md, out, 32);
	return 0;
}
