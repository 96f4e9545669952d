/* SPDX-License-Identifier: Apache-2.0 */
/* helper/elf_needed.c, which sbx-helper uses to learn what libidn2 needs
 * before it loads it (idna_dl.c): the real libidn2 and this program parse
 * to their DT_SONAME and DT_NEEDED; crafted copies of libidn2 that a
 * careless parser would misread are refused or read as the dynamic linker
 * reads them; a file that is not ELF, every prefix of libidn2 and damaged
 * copies are refused or parse to plain names (out-of-bounds reads are
 * ASan's, in the sanitizer build; tests/fuzz/fuzz_elf_needed.c goes
 * further). */
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "elf_needed.h"
#include "idna_dl_paths.h"

static struct sbx_elf_deps d;
static char path[64];
static unsigned char *lib, *copy;
static size_t len;

static unsigned char *slurp(const char *file, size_t *n)
{
	FILE *f = fopen(file, "rb");
	unsigned char *buf = NULL;
	long got;

	if (f && fseek(f, 0, SEEK_END) == 0 && (got = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
	    (buf = malloc((size_t)got)) && fread(buf, 1, (size_t)got, f) == (size_t)got)
		*n = (size_t)got;
	else {
		free(buf);
		buf = NULL;
	}
	if (f)
		fclose(f);
	return buf;
}

static void spill(const unsigned char *buf, size_t n)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	if (fd < 0 || write(fd, buf, n) != (ssize_t)n)
		abort();
	close(fd);
}

static bool has(const char *prefix)
{
	for (size_t i = 0; i < d.n_needed; i++)
		if (!strncmp(d.needed[i], prefix, strlen(prefix)))
			return true;
	return false;
}

/* Parsed or refused, any names it gave are plain ones. */
static bool sane(void)
{
	struct sbx_err err;

	if (sbx_elf_deps(path, &d, &err) < 0)
		return d.n_needed == 0 && strstr(err.msg, path);
	if (!memchr(d.soname, '\0', sizeof(d.soname)) || strchr(d.soname, '/'))
		return false;
	for (size_t i = 0; i < d.n_needed; i++)
		if (!d.needed[i][0] || strchr(d.needed[i], '/') ||
		    !memchr(d.needed[i], '\0', sizeof(d.needed[i])))
			return false;
	return d.n_needed <= SBX_ELF_NEEDED_MAX;
}

/* The copy's program headers and dynamic entries, as this test (not the
 * code under test) finds them: ELF header fields, then PT_DYNAMIC through
 * the PT_LOAD that holds its address. */
static ElfW(Ehdr) * ehdr(void)
{
	return (ElfW(Ehdr) *)copy;
}

static ElfW(Phdr) * phdr(int type)
{
	ElfW(Phdr) *ph = (ElfW(Phdr) *)(copy + ehdr()->e_phoff);

	for (int i = 0; i < ehdr()->e_phnum; i++)
		if ((int)ph[i].p_type == type)
			return &ph[i];
	return NULL;
}

static ElfW(Dyn) * dyn_entry(ElfW(Sxword) tag)
{
	ElfW(Phdr) *dp = phdr(PT_DYNAMIC), *ph = (ElfW(Phdr) *)(copy + ehdr()->e_phoff);

	for (int i = 0; dp && i < ehdr()->e_phnum; i++)
		if (ph[i].p_type == PT_LOAD && dp->p_vaddr >= ph[i].p_vaddr &&
		    dp->p_vaddr - ph[i].p_vaddr < ph[i].p_filesz)
			for (ElfW(Dyn) *e = (ElfW(Dyn) *)(copy + ph[i].p_offset +
							  (dp->p_vaddr - ph[i].p_vaddr));
			     e->d_tag != DT_NULL; e++)
				if (e->d_tag == tag)
					return e;
	return NULL;
}

/* A fresh copy of libidn2 to change. */
static void fresh(void)
{
	memcpy(copy, lib, len);
}

/* The copy as it stands, parsed: -1 with err's text in *why. */
static int parse_copy(struct sbx_err *err)
{
	spill(copy, len);
	return sbx_elf_deps(path, &d, err);
}

int main(void)
{
	struct sbx_err err;
	size_t bad = 0;
	char dir[] = "/tmp/sbx-test-elf-needed-XXXXXX"; /* helper.cleanup skips sbx-test-* */

	lib = slurp(SBX_LIBIDN2_PATH, &len);
	if (!lib || !mkdtemp(dir) || !(copy = malloc(len)))
		return 1;
	snprintf(path, sizeof(path), "%s/lib.so", dir);

	check(sbx_elf_deps(SBX_LIBIDN2_PATH, &d, &err) == 0 && !strcmp(d.soname, "libidn2.so.0") &&
		  has("libc.so.") && has("libunistring.so."),
	      "%s: soname libidn2.so.0, needs libc and libunistring: %s", SBX_LIBIDN2_PATH,
	      d.n_needed ? d.needed[0] : err.msg);
	check(sbx_elf_deps("/proc/self/exe", &d, &err) == 0 && has("libc.so.") && !d.soname[0],
	      "this program (PIE) needs libc and has no soname");
	check(sbx_elf_deps("/etc/passwd", &d, &err) < 0 && strstr(err.msg, "not a shared object"),
	      "a text file is refused: %s", err.msg);
	check(sbx_elf_deps("/nonexistent/lib.so", &d, &err) < 0 &&
		  strstr(err.msg, "/nonexistent/lib.so"),
	      "a missing file is named: %s", err.msg);

	/* Crafted from libidn2: what each guard is for. */
	fresh();
	ehdr()->e_phnum = 65;
	check(parse_copy(&err) < 0 && strstr(err.msg, "not a shared object"),
	      "65 program headers are refused: %s", err.msg);
	fresh();
	ehdr()->e_machine = EM_SPARC;
	check(parse_copy(&err) < 0 && strstr(err.msg, "not a shared object"),
	      "another machine's library is refused: %s", err.msg);
	fresh();
	phdr(PT_DYNAMIC)->p_offset = 0; /* a decoy: the dynamic linker reads its address */
	check(parse_copy(&err) == 0 && has("libunistring.so."),
	      "PT_DYNAMIC found at its address, not its file offset");
	fresh();
	dyn_entry(DT_NEEDED)->d_tag = DT_FILTER;
	check(parse_copy(&err) < 0 && strstr(err.msg, "filter"), "a DT_FILTER is refused: %s",
	      err.msg);
	fresh();
	{
		/* The string table ends inside the last name read from it. */
		ElfW(Dyn) *strsz = dyn_entry(DT_STRSZ), *need = dyn_entry(DT_NEEDED),
			  *so = dyn_entry(DT_SONAME);
		ElfW(Xword) last = need->d_un.d_val;
		for (ElfW(Dyn) *e = need; e->d_tag != DT_NULL; e++)
			if ((e->d_tag == DT_NEEDED || e->d_tag == DT_SONAME) &&
			    e->d_un.d_val > last)
				last = e->d_un.d_val;
		if (so && so->d_un.d_val > last)
			last = so->d_un.d_val;
		strsz->d_un.d_val = last + 3;
	}
	check(parse_copy(&err) < 0 && strstr(err.msg, "not ended"),
	      "a name cut by the end of its table is refused: %s", err.msg);
	fresh();
	dyn_entry(DT_NEEDED)->d_un.d_val = (ElfW(Xword)) - 1;
	check(parse_copy(&err) < 0 && strstr(err.msg, "outside its string table"),
	      "a name past its table is refused: %s", err.msg);
	fresh();
	/* The dynamic linker reads on to DT_NULL (review 34). */
	phdr(PT_DYNAMIC)->p_filesz = 2 * sizeof(ElfW(Dyn));
	check(parse_copy(&err) < 0 && strstr(err.msg, "no DT_NULL"),
	      "a dynamic section without its DT_NULL is refused: %s", err.msg);
	fresh();
	{
		/* The second PT_LOAD laid over the first. */
		ElfW(Phdr) *ph = (ElfW(Phdr) *)(copy + ehdr()->e_phoff), *first = NULL;
		for (int i = 0; i < ehdr()->e_phnum; i++)
			if (ph[i].p_type == PT_LOAD && !first)
				first = &ph[i];
			else if (ph[i].p_type == PT_LOAD) {
				ph[i].p_vaddr = first->p_vaddr;
				break;
			}
	}
	check(parse_copy(&err) < 0 && strstr(err.msg, "out of order or overlapping"),
	      "PT_LOAD segments laid over each other are refused: %s", err.msg);
	fresh();
	unsigned char *at = memmem(copy, len, "libunistring.so.", 16);
	if (at)
		at[3] = '/';
	check(at && parse_copy(&err) < 0 && strstr(err.msg, "not a plain file name"),
	      "a DT_NEEDED name with a '/' is refused: %s", err.msg);

	for (size_t cut = 0; cut < len && cut < 16384; cut += 13) {
		spill(lib, cut);
		bad += !sane();
	}
	check(bad == 0, "every 13th prefix of libidn2 is refused or plain (%zu not)", bad);
	srand(42);
	for (int round = 0; round < 2000; round++) {
		fresh();
		for (int k = 0; k < 8; k++)
			copy[(size_t)rand() % (len < 65536 ? len : 65536)] = (unsigned char)rand();
		spill(copy, len);
		bad += !sane();
	}
	check(bad == 0, "2000 copies with 8 bytes changed: refused or plain (%zu not)", bad);

	unlink(path);
	rmdir(dir);
	free(copy);
	free(lib);
	return check_done();
}
