/* SPDX-License-Identifier: Apache-2.0 */
/* sbx_elf_deps (elf_needed.h): the ELF header, the program headers, the
 * dynamic section and the string table, each read with pread, every offset
 * and size checked against the file, and every sum against overflow,
 * before it is used. */
#include "elf_needed.h"

#include <endian.h>
#include <fcntl.h>
#include <link.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

#define PHDRS_MAX 64
#define DYN_MAX	  4096 /* entries of a dynamic section */

#if __BYTE_ORDER == __LITTLE_ENDIAN
#define NATIVE_DATA ELFDATA2LSB
#else
#define NATIVE_DATA ELFDATA2MSB
#endif
#if __ELF_NATIVE_CLASS == 64
#define NATIVE_CLASS ELFCLASS64
#else
#define NATIVE_CLASS ELFCLASS32
#endif
#if defined(__x86_64__)
#define NATIVE_MACHINE EM_X86_64
#elif defined(__aarch64__)
#define NATIVE_MACHINE EM_AARCH64
#elif defined(__i386__)
#define NATIVE_MACHINE EM_386
#elif defined(__powerpc64__)
#define NATIVE_MACHINE EM_PPC64
#elif defined(__s390x__)
#define NATIVE_MACHINE EM_S390
#elif defined(__riscv)
#define NATIVE_MACHINE EM_RISCV
#else
#error "elf_needed.c: no ELF machine number for this architecture"
#endif

/* len bytes at off, all of them inside the file of size size. */
static bool read_at(int fd, uint64_t size, uint64_t off, void *buf, size_t len)
{
	return off <= size && len <= size - off && pread(fd, buf, len, (off_t)off) == (ssize_t)len;
}

/* The file offset of len bytes at the virtual address v, all of them in
 * the file bytes of one PT_LOAD segment. */
static bool vaddr_offset(const ElfW(Phdr) * ph, size_t nph, uint64_t v, uint64_t len, uint64_t *off)
{
	for (size_t i = 0; i < nph; i++) {
		uint64_t delta;

		if (ph[i].p_type != PT_LOAD || v < ph[i].p_vaddr)
			continue;
		delta = v - ph[i].p_vaddr;
		if (delta >= ph[i].p_filesz || len > ph[i].p_filesz - delta ||
		    ph[i].p_offset > UINT64_MAX - delta)
			continue;
		*off = ph[i].p_offset + delta;
		return true;
	}
	return false;
}

/* The NUL-terminated name at index idx of the string table at str_off
 * (strsz bytes) into out. */
static int read_name(int fd, uint64_t size, uint64_t str_off, uint64_t strsz, uint64_t idx,
		     char out[SBX_ELF_NEEDED_NAME_MAX], const char *what, struct sbx_err *err)
{
	size_t len = SBX_ELF_NEEDED_NAME_MAX;

	if (idx >= strsz || str_off > UINT64_MAX - idx)
		return sbx_fail(err, "%s: a name outside its string table", what);
	/* The name and its NUL, within the table and the file. */
	if (len > strsz - idx)
		len = (size_t)(strsz - idx);
	if (str_off + idx >= size)
		return sbx_fail(err, "%s: its string table is not within the file", what);
	if (len > size - (str_off + idx))
		len = (size_t)(size - (str_off + idx));
	if (!read_at(fd, size, str_off + idx, out, len) || !memchr(out, '\0', len))
		return sbx_fail(err, "%s: a name not ended within %d bytes and its string table",
				what, SBX_ELF_NEEDED_NAME_MAX - 1);
	if (!out[0] || strchr(out, '/') || !strcmp(out, ".") || !strcmp(out, ".."))
		return sbx_fail(err, "%s: a DT_NEEDED or DT_SONAME that is not a plain file name",
				what);
	return 0;
}

/* sbx_elf_deps_fd, into d, which is whole only when this returns 0. */
static int read_deps(int fd, const char *what, struct sbx_elf_deps *d, struct sbx_err *err)
{
	ElfW(Ehdr) eh;
	ElfW(Phdr) ph[PHDRS_MAX];
	ElfW(Dyn) dyn[DYN_MAX];
	uint64_t size, dyn_off = 0, dyn_len = 0, strtab = 0, strsz = 0, str_off = 0, soname = 0;
	uint64_t needed[SBX_ELF_NEEDED_MAX];
	size_t nph, ndyn;
	bool have_dyn = false, have_strtab = false, have_soname = false;
	struct stat st;

	memset(d, 0, sizeof(*d));
	if (fstat(fd, &st) < 0)
		return sbx_fail_errno(err, "%s", what);
	size = (uint64_t)st.st_size;
	if (!read_at(fd, size, 0, &eh, sizeof(eh)) || memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
	    eh.e_ident[EI_CLASS] != NATIVE_CLASS || eh.e_ident[EI_DATA] != NATIVE_DATA ||
	    eh.e_type != ET_DYN || eh.e_machine != NATIVE_MACHINE ||
	    eh.e_phentsize != sizeof(ElfW(Phdr)) || eh.e_phnum == 0 || eh.e_phnum > PHDRS_MAX)
		return sbx_fail(err, "%s: not a shared object of this machine", what);
	nph = eh.e_phnum;
	if (!read_at(fd, size, eh.e_phoff, ph, nph * sizeof(ph[0])))
		return sbx_fail(err, "%s: its program headers are cut short", what);
	/* PT_LOAD in address order, none over another (as the ELF format
	 * says): then an address is in one segment's bytes only, the ones
	 * vaddr_offset reads. */
	for (size_t i = 0, prev = nph; i < nph; i++) {
		if (ph[i].p_type != PT_LOAD)
			continue;
		if (ph[i].p_memsz < ph[i].p_filesz || ph[i].p_vaddr > UINT64_MAX - ph[i].p_memsz ||
		    (prev < nph && ph[i].p_vaddr < ph[prev].p_vaddr + ph[prev].p_memsz))
			return sbx_fail(err, "%s: PT_LOAD segments out of order or overlapping",
					what);
		prev = i;
	}
	for (size_t i = 0; i < nph; i++)
		if (ph[i].p_type == PT_DYNAMIC) {
			/* Where the dynamic linker reads it: at its address. */
			if (have_dyn ||
			    !vaddr_offset(ph, nph, ph[i].p_vaddr, ph[i].p_filesz, &dyn_off))
				return sbx_fail(err, "%s: no dynamic section within the file",
						what);
			dyn_len = ph[i].p_filesz;
			have_dyn = true;
		}
	ndyn = (size_t)(dyn_len / sizeof(ElfW(Dyn)));
	if (!have_dyn || ndyn == 0 || ndyn > DYN_MAX ||
	    !read_at(fd, size, dyn_off, dyn, ndyn * sizeof(dyn[0])))
		return sbx_fail(err, "%s: no dynamic section within the file", what);
	size_t e;
	for (e = 0; e < ndyn && dyn[e].d_tag != DT_NULL; e++) {
		switch (dyn[e].d_tag) {
		case DT_STRTAB:
			strtab = dyn[e].d_un.d_ptr;
			have_strtab = true;
			break;
		case DT_STRSZ:
			strsz = dyn[e].d_un.d_val;
			break;
		case DT_SONAME:
			soname = dyn[e].d_un.d_val;
			have_soname = true;
			break;
		case DT_NEEDED:
			if (d->n_needed == SBX_ELF_NEEDED_MAX)
				return sbx_fail(err, "%s: needs more than %d libraries", what,
						SBX_ELF_NEEDED_MAX);
			needed[d->n_needed++] = dyn[e].d_un.d_val;
			break;
		case DT_FILTER:
		case DT_AUXILIARY:
			return sbx_fail(err,
					"%s: a filter (DT_FILTER or DT_AUXILIARY), whose libraries "
					"the dynamic linker would search for",
					what);
		default:
			break;
		}
	}
	/* The dynamic linker reads on to DT_NULL, whatever PT_DYNAMIC's size
	 * says: entries past it would be ones this read did not see (review
	 * 34). */
	if (e == ndyn)
		return sbx_fail(err, "%s: its dynamic section has no DT_NULL within it", what);
	if ((d->n_needed || have_soname) &&
	    (!have_strtab || !vaddr_offset(ph, nph, strtab, strsz, &str_off)))
		return sbx_fail(err, "%s: its string table is not within the file", what);
	if (have_soname && read_name(fd, size, str_off, strsz, soname, d->soname, what, err) < 0)
		return -1;
	for (size_t i = 0; i < d->n_needed; i++)
		if (read_name(fd, size, str_off, strsz, needed[i], d->needed[i], what, err) < 0)
			return -1;
	return 0;
}

int sbx_elf_deps_fd(int fd, const char *what, struct sbx_elf_deps *d, struct sbx_err *err)
{
	struct sbx_elf_deps got;

	memset(d, 0, sizeof(*d));
	if (read_deps(fd, what, &got, err) < 0)
		return -1;
	*d = got;
	return 0;
}

int sbx_elf_deps(const char *path, struct sbx_elf_deps *d, struct sbx_err *err)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);

	if (fd < 0) {
		memset(d, 0, sizeof(*d));
		return sbx_fail_errno(err, "%s", path);
	}
	return sbx_elf_deps_fd(fd, path, d, err);
}
