/* SPDX-License-Identifier: Apache-2.0 */
/* sbx_idna_to_ascii (common/idna.h) for sbx-helper: libidn2's, loaded on
 * the first host name with a byte outside ASCII rather than linked. Every
 * sandbox starts with an exec of sbx-helper, and mapping libidn2 and the
 * libunistring it needs cost that exec about 0.3 ms (an empty main linked
 * with -lidn2 against one without: 1.35 against 1.08 ms, `perf stat -r
 * 400` on the 2-core VM of docs/dev/benchmarks.md), while the helper
 * needs it only for an allowlist entry like "bücher.example" in a policy
 * given to `policy` (or to `run`, which refuses an allowlist once the
 * policy is read): sbxd hands `serve` its policy with every host in
 * A-labels already. The helper links with --as-needed and never
 * references libidn2, so it has no DT_NEEDED on it (helper.idna_loaded
 * checks).
 *
 * Loaded by the absolute path the build found (idna_dl_paths.h), never by
 * a search, only if only root can change it (dl_root.h), and first the
 * libraries libidn2 needs that the helper has not loaded (libunistring),
 * each by its path beside libidn2 under the same check: the dynamic linker
 * would otherwise search for them, the current directory too when
 * LD_LIBRARY_PATH has an empty element (review 31: a planted
 * libunistring.so.2 ran its constructor). Their names come from libidn2's
 * file at the time of the load, not from the build (review 32: a libidn2
 * installed later may need another libunistring). And only while a policy
 * is parsed, at the start of `run`, `serve` or `policy`, before any
 * sandbox exists. */
#include "idna.h"

#include <dlfcn.h>
#include <idn2.h>
#include <link.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "dl_root.h"
#include "elf_needed.h"
#include "idna_dl_paths.h"

#if SBX_LIBIDN2_SONAME_MAJOR != 0 || IDN2_VERSION_MAJOR != 2
#error "the libidn2 headers are not of the libidn2.so.0 at SBX_LIBIDN2_PATH"
#endif

/* SBX_LIBIDN2_DIR, '/', a DT_NEEDED name and its NUL. */
#define DEP_PATH_MAX (sizeof(SBX_LIBIDN2_DIR) + SBX_ELF_NEEDED_NAME_MAX)

static struct {
	__typeof__(idn2_to_ascii_8z) *to_ascii;
	__typeof__(idn2_strerror) *strerror;
	char why[300]; /* set when it could not be loaded */
} idn2;

/* Whether a library of this name is loaded in the helper already (libc,
 * the dynamic linker): the dynamic linker takes that one for a DT_NEEDED of
 * the name, by its soname, without a search. */
static int loaded_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	const char *name = arg, *slash = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;

	(void)size;
	return slash && !strcmp(slash + 1, name);
}

static bool loaded_already(const char *name)
{
	return dl_iterate_phdr(loaded_cb, (void *)name) != 0;
}

/* Every library path needs that the helper has not loaded, into
 * deps[0..*n), each as the same-named file beside libidn2; false with
 * idn2.why set for one that cannot be had that way. */
static bool needed_beside(const char *path, char deps[][DEP_PATH_MAX], size_t *n)
{
	char names[SBX_ELF_NEEDED_MAX][SBX_ELF_NEEDED_NAME_MAX];
	size_t count;
	struct sbx_err err;

	*n = 0;
	if (sbx_elf_needed(path, names, &count, &err) < 0) {
		snprintf(idn2.why, sizeof(idn2.why), "%.280s", err.msg);
		return false;
	}
	for (size_t i = 0; i < count; i++) {
		if (loaded_already(names[i]))
			continue;
		if ((size_t)snprintf(deps[*n], DEP_PATH_MAX, "%s/%s", SBX_LIBIDN2_DIR, names[i]) >=
		    DEP_PATH_MAX) {
			snprintf(idn2.why, sizeof(idn2.why), "%.100s needs %.100s: too long a path",
				 path, names[i]);
			return false;
		}
		(*n)++;
	}
	return true;
}

static void load(void)
{
	char deps[SBX_ELF_NEEDED_MAX][DEP_PATH_MAX], theirs[SBX_ELF_NEEDED_MAX][DEP_PATH_MAX];
	size_t n, m;

	/* What libidn2 needs, read from the file (installed after this build
	 * it may be another libunistring), each loaded by its path before it:
	 * the dynamic linker then finds them loaded, by soname, and searches
	 * for nothing. One level: what those need must be loaded already. */
	if (!needed_beside(SBX_LIBIDN2_PATH, deps, &n))
		return;
	for (size_t i = 0; i < n; i++) {
		if (!needed_beside(deps[i], theirs, &m))
			return;
		if (m) {
			snprintf(idn2.why, sizeof(idn2.why),
				 "%.100s needs %.100s, which the helper would have to search for",
				 deps[i], theirs[0]);
			return;
		}
		/* Held for good: libidn2 uses it as long as it is loaded. */
		if (!sbx_dl_open_root_only(deps[i], idn2.why, sizeof(idn2.why)))
			return;
	}
	void *lib = sbx_dl_open_root_only(SBX_LIBIDN2_PATH, idn2.why, sizeof(idn2.why));

	if (!lib)
		return;
	*(void **)&idn2.to_ascii = dlsym(lib, "idn2_to_ascii_8z");
	*(void **)&idn2.strerror = dlsym(lib, "idn2_strerror");
	if (!idn2.to_ascii || !idn2.strerror) {
		/* Both or none: a half-found pair must not be called. */
		idn2.to_ascii = NULL;
		idn2.strerror = NULL;
		snprintf(idn2.why, sizeof(idn2.why), "it lacks idn2_to_ascii_8z or idn2_strerror");
		dlclose(lib);
	}
}

int sbx_idna_to_ascii(const char *utf8, char **alabels, struct sbx_err *err)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, load);
	if (!idn2.to_ascii)
		return sbx_fail(err,
				"a host name outside ASCII needs libidn2, and %s cannot be loaded "
				"(Debian and Ubuntu: package libidn2-0): %s",
				SBX_LIBIDN2_PATH, idn2.why);
	int rc = idn2.to_ascii(utf8, alabels, IDN2_NFC_INPUT | IDN2_NONTRANSITIONAL);
	if (rc != IDN2_OK)
		return sbx_fail(err, "invalid IDNA name: %s", idn2.strerror(rc));
	return 0;
}
