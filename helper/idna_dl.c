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
#include <limits.h>
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

static struct {
	__typeof__(idn2_to_ascii_8z) *to_ascii;
	__typeof__(idn2_strerror) *strerror;
	char why[300]; /* set when it could not be loaded */
} idn2;

/* The libraries the helper had loaded before this load began (libc, the
 * dynamic linker): found at its exec by the names their users need, which
 * the dynamic linker keeps and matches a DT_NEEDED of the same name against
 * without a search. Only those: one loaded here by its resolved path is
 * matched by its soname, not its file's name (review 34). */
#define BEFORE_MAX 32
static char before[BEFORE_MAX][SBX_ELF_NEEDED_NAME_MAX];
static size_t n_before;

static int before_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	const char *slash = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;

	(void)size;
	(void)arg;
	if (slash && n_before < BEFORE_MAX)
		snprintf(before[n_before++], sizeof(before[0]), "%s", slash + 1);
	return 0;
}

static bool loaded_already(const char *name)
{
	for (size_t i = 0; i < n_before; i++)
		if (!strcmp(before[i], name))
			return true;
	return false;
}

/* path, checked as dl_root.h says, into real, and what it needs and calls
 * itself read from that same file; false with idn2.why set. */
static bool checked_deps(const char *path, char real[PATH_MAX], struct sbx_elf_deps *d)
{
	struct sbx_err err;

	if (!sbx_dl_root_only(path, real, idn2.why, sizeof(idn2.why)))
		return false;
	if (sbx_elf_deps(real, d, &err) < 0) {
		snprintf(idn2.why, sizeof(idn2.why), "%.280s", err.msg);
		return false;
	}
	return true;
}

static void load(void)
{
	static struct sbx_elf_deps idn2_deps, dep_deps;
	char idn2_real[PATH_MAX], dep_path[PATH_MAX], dep_real[PATH_MAX];

	/* What libidn2 needs, read from the file (installed after this build
	 * it may be another libunistring), each missing one loaded first from
	 * beside it: the dynamic linker then finds it loaded, by the soname
	 * it must carry, and searches for nothing (review 32, 33). One level:
	 * what those need must be loaded already. Each file is parsed as
	 * resolved and checked, and that path is what dlopen opens. */
	dl_iterate_phdr(before_cb, NULL);
	if (!checked_deps(SBX_LIBIDN2_PATH, idn2_real, &idn2_deps))
		return;
	for (size_t i = 0; i < idn2_deps.n_needed; i++) {
		const char *name = idn2_deps.needed[i];

		if (loaded_already(name))
			continue;
		if ((size_t)snprintf(dep_path, sizeof(dep_path), "%s/%s", SBX_LIBIDN2_DIR, name) >=
			sizeof(dep_path) ||
		    !checked_deps(dep_path, dep_real, &dep_deps))
			return;
		if (strcmp(dep_deps.soname, name) != 0) {
			/* The dynamic linker would not take it for `name`, and search. */
			snprintf(idn2.why, sizeof(idn2.why),
				 "%.150s is not %.60s (its soname is \"%.60s\")", dep_real, name,
				 dep_deps.soname);
			return;
		}
		for (size_t j = 0; j < dep_deps.n_needed; j++)
			if (!loaded_already(dep_deps.needed[j])) {
				snprintf(
				    idn2.why, sizeof(idn2.why),
				    "%.120s needs %.100s, which the helper would have to search "
				    "for",
				    dep_real, dep_deps.needed[j]);
				return;
			}
		/* Held for good: libidn2 uses it as long as it is loaded. */
		if (!sbx_dl_open_checked(dep_real, idn2.why, sizeof(idn2.why)))
			return;
	}
	void *lib = sbx_dl_open_checked(idn2_real, idn2.why, sizeof(idn2.why));

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
