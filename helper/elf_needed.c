/* SPDX-License-Identifier: Apache-2.0 */
/* sbx_elf_needed (elf_needed.h): the ELF header, the program headers, the
 * dynamic section and the string table, each read with pread and every
 * offset and size checked against the file before it is used. */
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

/* len bytes at off, all of them inside the file of size size. */
static bool read_at(int fd, uint64_t size, uint64_t off, void *buf, size_t len)
{
	return off <= size && len <= size - off && pread(fd, buf, len, (off_t)off) == (ssize_t)len;
}

/* The file offset of the virtual address v, from the PT_LOAD segment
 * whose file bytes hold it. */
static bool vaddr_offset(const ElfW(Phdr) * ph, size_t nph, uint64_t v, uint64_t *off)
{
	for (size_t i = 0; i < nph; i++)
		if (ph[i].p_type == PT_LOAD && v >= ph[i].p_vaddr &&
		    v - ph[i].p_vaddr < ph[i].p_filesz) {
			*off = ph[i].p_offset + (v - ph[i].p_vaddr);
			return true;
		}
	return false;
}

int sbx_elf_needed(const char *path, char names[][SBX_ELF_NEEDED_NAME_MAX], size_t *n,
		   struct sbx_err *err)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	ElfW(Ehdr) eh;
	ElfW(Phdr) ph[PHDRS_MAX];
	ElfW(Dyn) dyn[DYN_MAX];
	uint64_t size, dyn_off = 0, dyn_len = 0, strtab = 0, strsz = 0, str_off;
	uint64_t needed[SBX_ELF_NEEDED_MAX];
	size_t nph, ndyn, nneeded = 0;
	bool have_dyn = false, have_strtab = false;
	struct stat st;

	*n = 0;
	if (fd < 0 || fstat(fd, &st) < 0)
		return sbx_fail_errno(err, "%s", path);
	size = (uint64_t)st.st_size;
	if (!read_at(fd, size, 0, &eh, sizeof(eh)) || memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
	    eh.e_ident[EI_CLASS] != NATIVE_CLASS || eh.e_ident[EI_DATA] != NATIVE_DATA ||
	    eh.e_type != ET_DYN || eh.e_phentsize != sizeof(ElfW(Phdr)) || eh.e_phnum == 0 ||
	    eh.e_phnum > PHDRS_MAX)
		return sbx_fail(err, "%s: not a shared object of this machine's ELF class", path);
	nph = eh.e_phnum;
	if (!read_at(fd, size, eh.e_phoff, ph, nph * sizeof(ph[0])))
		return sbx_fail(err, "%s: its program headers are cut short", path);
	for (size_t i = 0; i < nph; i++)
		if (ph[i].p_type == PT_DYNAMIC) {
			dyn_off = ph[i].p_offset;
			dyn_len = ph[i].p_filesz;
			have_dyn = true;
		}
	ndyn = (size_t)(dyn_len / sizeof(ElfW(Dyn)));
	if (!have_dyn || ndyn == 0 || ndyn > DYN_MAX ||
	    !read_at(fd, size, dyn_off, dyn, ndyn * sizeof(dyn[0])))
		return sbx_fail(err, "%s: no dynamic section within the file", path);
	for (size_t i = 0; i < ndyn && dyn[i].d_tag != DT_NULL; i++) {
		if (dyn[i].d_tag == DT_STRTAB) {
			strtab = dyn[i].d_un.d_ptr;
			have_strtab = true;
		} else if (dyn[i].d_tag == DT_STRSZ) {
			strsz = dyn[i].d_un.d_val;
		} else if (dyn[i].d_tag == DT_NEEDED) {
			if (nneeded == SBX_ELF_NEEDED_MAX)
				return sbx_fail(err, "%s: needs more than %d libraries", path,
						SBX_ELF_NEEDED_MAX);
			needed[nneeded++] = dyn[i].d_un.d_val;
		}
	}
	if (nneeded && (!have_strtab || !vaddr_offset(ph, nph, strtab, &str_off)))
		return sbx_fail(err, "%s: its string table is not within the file", path);
	for (size_t i = 0; i < nneeded; i++) {
		char *name = names[i];
		size_t len = SBX_ELF_NEEDED_NAME_MAX;

		if (needed[i] >= strsz)
			return sbx_fail(err, "%s: a DT_NEEDED name outside its string table", path);
		/* The name and its NUL, within the table and the file. */
		if (len > strsz - needed[i])
			len = (size_t)(strsz - needed[i]);
		if (str_off + needed[i] > size)
			return sbx_fail(err, "%s: its string table is not within the file", path);
		if (len > size - (str_off + needed[i]))
			len = (size_t)(size - (str_off + needed[i]));
		if (!read_at(fd, size, str_off + needed[i], name, len) || !memchr(name, '\0', len))
			return sbx_fail(err, "%s: a DT_NEEDED name longer than %d bytes", path,
					SBX_ELF_NEEDED_NAME_MAX - 1);
		if (!name[0] || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, ".."))
			return sbx_fail(err, "%s: a DT_NEEDED entry that is not a plain file name",
					path);
	}
	*n = nneeded;
	return 0;
}
