/* SPDX-License-Identifier: Apache-2.0 */
#pragma once
#include <stdbool.h>
#include <stddef.h>

/* The last failed check of a server certificate's name: true when a
 * handshake since `since` (a value of sbx_tls_name_failures()) found that
 * the certificate does not name `host`; `sans` gets the names it carries.
 * Always false where the build has no mbedtls (tls_names.c). */
unsigned long sbx_tls_name_failures(void);
bool sbx_tls_name_failed(unsigned long since, const char *host, char *sans, size_t size);
