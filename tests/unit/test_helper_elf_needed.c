/* SPDX-License-Identifier: Apache-2.0 */
/* helper/elf_needed.c, which sbx-helper uses to learn what libidn2 needs
 * before it loads it (idna_dl.c): the real libidn2 and this program parse
 * to their DT_NEEDED names; a file that is not ELF, every prefix of
 * libidn2 and thousands of copies with bytes changed are refused or parse
 * to plain names, never read out of bounds (ASan in the sanitizer build);
 * a name with a '/' is refused. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "elf_needed.h"
#include "idna_dl_paths.h"

static char names[SBX_ELF_NEEDED_MAX][SBX_ELF_NEEDED_NAME_MAX];

static unsigned char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	unsigned char *buf = NULL;
	long n;

	if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
	    (buf = malloc((size_t)n)) && fread(buf, 1, (size_t)n, f) == (size_t)n)
		*len = (size_t)n;
	else {
		free(buf);
		buf = NULL;
	}
	if (f)
		fclose(f);
	return buf;
}

static void spill(const char *path, const unsigned char *buf, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	if (fd < 0 || write(fd, buf, len) != (ssize_t)len)
		abort();
	close(fd);
}

static bool has(size_t n, const char *prefix)
{
	for (size_t i = 0; i < n; i++)
		if (!strncmp(names[i], prefix, strlen(prefix)))
			return true;
	return false;
}

/* Parsed or refused, any names it gave are plain ones. */
static bool sane(const char *path)
{
	struct sbx_err err;
	size_t n = 99;

	if (sbx_elf_needed(path, names, &n, &err) < 0)
		return n == 0 && strstr(err.msg, path);
	for (size_t i = 0; i < n; i++)
		if (!names[i][0] || strchr(names[i], '/') ||
		    !memchr(names[i], '\0', sizeof(names[i])))
			return false;
	return n <= SBX_ELF_NEEDED_MAX;
}

int main(void)
{
	struct sbx_err err;
	size_t n, len, bad = 0;
	/* sbx-test-*: helper.cleanup counts other sbx* entries in /tmp as a
	 * run's leftovers. */
	char dir[] = "/tmp/sbx-test-elf-needed-XXXXXX", path[64];
	unsigned char *lib = slurp(SBX_LIBIDN2_PATH, &len), *copy;

	if (!lib || !mkdtemp(dir))
		return 1;
	snprintf(path, sizeof(path), "%s/lib.so", dir);
	copy = malloc(len);

	check(sbx_elf_needed(SBX_LIBIDN2_PATH, names, &n, &err) == 0 && has(n, "libc.so.") &&
		  has(n, "libunistring.so."),
	      "%s needs libc and libunistring: %s", SBX_LIBIDN2_PATH, n ? names[0] : err.msg);
	check(sbx_elf_needed("/proc/self/exe", names, &n, &err) == 0 && has(n, "libc.so."),
	      "this program (PIE) needs libc");
	check(sbx_elf_needed("/etc/passwd", names, &n, &err) < 0 &&
		  strstr(err.msg, "not a shared object"),
	      "a text file is refused: %s", err.msg);
	check(sbx_elf_needed("/nonexistent/lib.so", names, &n, &err) < 0 &&
		  strstr(err.msg, "/nonexistent/lib.so"),
	      "a missing file is named: %s", err.msg);

	for (size_t cut = 0; cut < len && cut < 16384; cut += 13) {
		spill(path, lib, cut);
		bad += !sane(path);
	}
	check(bad == 0, "every prefix of libidn2 is refused or plain (%zu not)", bad);

	srand(42);
	for (int round = 0; round < 3000; round++) {
		memcpy(copy, lib, len);
		for (int k = 0; k < 8; k++)
			copy[(size_t)rand() % (len < 65536 ? len : 65536)] = (unsigned char)rand();
		spill(path, copy, len);
		bad += !sane(path);
	}
	check(bad == 0, "3000 copies with 8 bytes changed: refused or plain (%zu not)", bad);

	/* The name libunistring.so.N with a '/' in it. */
	memcpy(copy, lib, len);
	unsigned char *at = memmem(copy, len, "libunistring.so.", 16);
	if (at)
		at[3] = '/';
	spill(path, copy, len);
	check(at && sbx_elf_needed(path, names, &n, &err) < 0 &&
		  strstr(err.msg, "not a plain file name"),
	      "a DT_NEEDED name with a '/' is refused: %s", err.msg);

	unlink(path);
	rmdir(dir);
	free(copy);
	free(lib);
	return check_done();
}
