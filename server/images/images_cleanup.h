/* SPDX-License-Identifier: Apache-2.0 */
/* Cleanup attributes (common/util.h's idiom) for the two libraries the
 * import pipeline reads with: a libarchive reader and an OpenSSL digest. */
#ifndef SBX_IMAGES_CLEANUP_H
#define SBX_IMAGES_CLEANUP_H

#include <archive.h>
#include <openssl/evp.h>

static inline void img_archive_freep(struct archive **a)
{
	if (*a)
		archive_read_free(*a);
}

static inline void img_md_freep(EVP_MD_CTX **md)
{
	EVP_MD_CTX_free(*md);
}

#define _cleanup_archive_ __attribute__((cleanup(img_archive_freep)))
#define _cleanup_md_	  __attribute__((cleanup(img_md_freep)))

#endif
