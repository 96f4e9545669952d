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
 * Loaded by the absolute paths the build found (idna_dl_paths.h), never by
 * a search, each only if only root can change it (dl_root.h): first the
 * libraries libidn2 needs besides libc (libunistring), which the dynamic
 * linker would otherwise search for, the current directory too when
 * LD_LIBRARY_PATH has an empty element (review 31: a planted
 * libunistring.so.2 ran its constructor); libidn2's DT_NEEDED then finds
 * them loaded, by soname. And only while a policy is parsed, at the start
 * of `run`, `serve` or `policy`, before any sandbox exists. */
#include "idna.h"

#include <dlfcn.h>
#include <idn2.h>
#include <pthread.h>
#include <stdio.h>

#include "dl_root.h"
#include "idna_dl_paths.h"

#if SBX_LIBIDN2_SONAME_MAJOR != 0 || IDN2_VERSION_MAJOR != 2
#error "the libidn2 headers are not of the libidn2.so.0 at SBX_LIBIDN2_PATH"
#endif

static struct {
	__typeof__(idn2_to_ascii_8z) *to_ascii;
	__typeof__(idn2_strerror) *strerror;
	char why[300]; /* set when it could not be loaded */
} idn2;

static void load(void)
{
	static const char *const deps[] = {SBX_LIBIDN2_DEPS NULL};

	/* Held for good: libidn2 uses them as long as it is loaded. */
	for (size_t i = 0; deps[i]; i++)
		if (!sbx_dl_open_root_only(deps[i], idn2.why, sizeof(idn2.why)))
			return;
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
