/* SPDX-License-Identifier: Apache-2.0 */
/* The server's name when it is an IP address. nng 1.5.2's TLS engine hands
 * the endpoint's host to mbedtls_ssl_set_hostname(), and mbedtls 2.28
 * checks that name against the certificate's DNS subjectAltNames and CN
 * only: an IP address never matches, even where the certificate carries it
 * as an iPAddress subjectAltName, and the handshake fails with nng's
 * "Cryptographic error". nng has no hook for the check, so this library
 * defines mbedtls_ssl_set_hostname() itself (libnng's call lands here,
 * libsbxclient being ahead of libmbedtls in the lookup order, as
 * common/nngfix does for libc): it calls mbedtls' own, then installs a
 * verify callback on that connection which, for an IP address, accepts the
 * certificate's name exactly when OpenSSL's X509_check_ip_asc() finds the
 * address among its iPAddress subjectAltNames (what Python's ssl module
 * checks; a CN or dNSName spelling the address no longer passes), and
 * records every name mismatch so that the caller's error can name it. The
 * chain, validity and key usage stay mbedtls' checks; only the name flag of
 * the end certificate is decided here. */
#include "tls_names.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <mbedtls/ssl.h>
#include <mbedtls/x509_crt.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static pthread_mutex_t failed_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned long failures;
static char failed_host[256];
static char failed_sans[512];

static bool is_ip(const char *s)
{
	unsigned char b[16];

	return inet_pton(AF_INET, s, b) == 1 || inet_pton(AF_INET6, s, b) == 1;
}

/* "DNS:a, IP:1.2.3.4" from the certificate's subjectAltNames. */
static void names_of(X509 *x, char *out, size_t size)
{
	GENERAL_NAMES *gens = x ? X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL) : NULL;
	size_t used = 0;

	out[0] = '\0';
	for (int i = 0; gens && i < sk_GENERAL_NAME_num(gens) && used + 1 < size; i++) {
		const GENERAL_NAME *g = sk_GENERAL_NAME_value(gens, i);
		char ip[INET6_ADDRSTRLEN] = "";
		int n = 0;

		if (g->type == GEN_DNS) {
			const ASN1_STRING *s = g->d.dNSName;
			n = snprintf(out + used, size - used, "%sDNS:%.*s", used ? ", " : "",
				     ASN1_STRING_length(s) > 200 ? 200 : ASN1_STRING_length(s),
				     (const char *)ASN1_STRING_get0_data(s));
		} else if (g->type == GEN_IPADD) {
			const ASN1_OCTET_STRING *s = g->d.iPAddress;
			int len = ASN1_STRING_length(s);
			if (len == 4 || len == 16)
				inet_ntop(len == 4 ? AF_INET : AF_INET6, ASN1_STRING_get0_data(s),
					  ip, sizeof(ip));
			n = snprintf(out + used, size - used, "%sIP:%s", used ? ", " : "",
				     ip[0] ? ip : "?");
		}
		if (n < 0)
			break;
		used += (size_t)n < size - used ? (size_t)n : size - used - 1;
	}
	GENERAL_NAMES_free(gens);
	if (!out[0])
		snprintf(out, size, "no subjectAltName");
}

/* mbedtls' verify callback (a handshake on nng's thread): never blocks
 * beyond the short lock, never fails the handshake itself. */
static int verify_name(void *arg, mbedtls_x509_crt *crt, int depth, uint32_t *flags)
{
	const mbedtls_ssl_context *ssl = arg;
	const char *host = ssl->hostname;

	if (depth != 0 || !host)
		return 0;
	bool ip = is_ip(host);
	if (!ip && !(*flags & MBEDTLS_X509_BADCERT_CN_MISMATCH))
		return 0;
	const unsigned char *der = crt->raw.p;
	X509 *x = d2i_X509(NULL, &der, (long)crt->raw.len);
	if (ip) {
		/* An address is named by an iPAddress subjectAltName alone, never
		 * by a CN or a dNSName that spells it (mbedtls would take those). */
		if (x && X509_check_ip_asc(x, host, 0) == 1) {
			*flags &= ~(uint32_t)MBEDTLS_X509_BADCERT_CN_MISMATCH;
			X509_free(x);
			return 0;
		}
		*flags |= MBEDTLS_X509_BADCERT_CN_MISMATCH;
	}
	pthread_mutex_lock(&failed_lock);
	failures++;
	snprintf(failed_host, sizeof(failed_host), "%s", host);
	names_of(x, failed_sans, sizeof(failed_sans));
	pthread_mutex_unlock(&failed_lock);
	X509_free(x);
	return 0;
}

typedef int (*set_hostname_fn)(mbedtls_ssl_context *, const char *);
static set_hostname_fn real_set_hostname;
static pthread_once_t real_once = PTHREAD_ONCE_INIT;

static void find_real(void)
{
	void *p = dlsym(RTLD_NEXT, "mbedtls_ssl_set_hostname");

	memcpy(&real_set_hostname, &p, sizeof(p));
}

int mbedtls_ssl_set_hostname(mbedtls_ssl_context *ssl, const char *hostname)
{
	int rv;

	pthread_once(&real_once, find_real);
	if (!real_set_hostname)
		return MBEDTLS_ERR_SSL_BAD_INPUT_DATA;
	rv = real_set_hostname(ssl, hostname);
	if (rv == 0 && hostname)
		mbedtls_ssl_set_verify(ssl, verify_name, ssl);
	return rv;
}

unsigned long sbx_tls_name_failures(void)
{
	pthread_mutex_lock(&failed_lock);
	unsigned long n = failures;
	pthread_mutex_unlock(&failed_lock);
	return n;
}

bool sbx_tls_name_failed(unsigned long since, const char *host, char *sans, size_t size)
{
	bool hit;

	pthread_mutex_lock(&failed_lock);
	hit = failures != since && strcmp(failed_host, host) == 0;
	if (hit)
		snprintf(sans, size, "%s", failed_sans);
	pthread_mutex_unlock(&failed_lock);
	return hit;
}
