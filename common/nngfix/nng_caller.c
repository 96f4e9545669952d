/* SPDX-License-Identifier: Apache-2.0 */
/* What every interposer of this room needs: where libnng's code is (each
 * acts only on libnng's own calls) and the real libc function behind the
 * program's definition. */
#include "nngfix.h"

#include <dlfcn.h>
#include <link.h>
#include <stdint.h>
#include <string.h>

#define NNG_SEGMENTS_MAX 4

/* libnng's executable PT_LOAD ranges, found once before main. */
static uintptr_t nng_lo[NNG_SEGMENTS_MAX], nng_hi[NNG_SEGMENTS_MAX];
static int nng_segments;

static int find_libnng(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	(void)arg;
	if (!info->dlpi_name || !strstr(info->dlpi_name, "/libnng.so"))
		return 0;
	for (int i = 0; i < info->dlpi_phnum && nng_segments < NNG_SEGMENTS_MAX; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];

		if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
			nng_lo[nng_segments] = info->dlpi_addr + ph->p_vaddr;
			nng_hi[nng_segments] = nng_lo[nng_segments] + ph->p_memsz;
			nng_segments++;
		}
	}
	return 1;
}

__attribute__((constructor)) static void nng_caller_init(void)
{
	dl_iterate_phdr(find_libnng, NULL);
}

bool sbx_nng_loaded(void)
{
	return nng_segments > 0;
}

void *sbx_nng_next_symbol(const char *name)
{
	return dlsym(RTLD_NEXT, name);
}

bool sbx_nng_is_caller(const void *return_address)
{
	uintptr_t ra = (uintptr_t)return_address;

	for (int i = 0; i < nng_segments; i++)
		if (ra >= nng_lo[i] && ra < nng_hi[i])
			return true;
	return false;
}
