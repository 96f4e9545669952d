/* SPDX-License-Identifier: Apache-2.0 */
#include "bench_scratch.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "bench_util.h"
#include "util.h"

volatile sig_atomic_t bench_interrupted;
static char scratch[PATH_MAX]; /* ours, removed at the end; "" when none */

void bench_on_signal(int sig)
{
	(void)sig;
	bench_interrupted = 1;
}

void bench_check_interrupt(void)
{
	if (bench_interrupted)
		bench_die("interrupted");
}

void bench_scratch_make(void)
{
	const char *base = getenv("TMPDIR");
	char real[PATH_MAX];

	/* An ipc socket's path in it must fit in sun_path (108 bytes). */
	if (!base || !*base || !realpath(base, real) || strlen(real) > 60)
		snprintf(real, sizeof(real), "/tmp");
	if ((size_t)snprintf(scratch, sizeof(scratch), "%s/sbx-bench-XXXXXX", real) >=
	    sizeof(scratch))
		bench_die("TMPDIR too long");
	if (!mkdtemp(scratch)) {
		char copy[PATH_MAX];
		snprintf(copy, sizeof(copy), "%s", scratch);
		scratch[0] = '\0'; /* nothing of ours to remove */
		bench_die_errno("mkdtemp %s", copy);
	}
}

static int rm_entry(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
	(void)sb;
	(void)type;
	(void)ftw;
	remove(path);
	return 0;
}

void bench_scratch_remove(void)
{
	if (scratch[0]) {
		/* FTW_PHYS: links are removed, never followed. */
		nftw(scratch, rm_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
		scratch[0] = '\0';
	}
}

const char *bench_scratch_dir(void)
{
	return scratch;
}

void bench_scratch_path(char *buf, size_t size, const char *name)
{
	if ((size_t)snprintf(buf, size, "%s/%s", scratch, name) >= size)
		bench_die("path %s/%s too long", scratch, name);
}

const char *bench_tail_of(const char *path)
{
	static char buf[1200];
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	off_t end;
	ssize_t n;

	buf[0] = '\0';
	if (fd < 0)
		return buf;
	if ((end = lseek(fd, 0, SEEK_END)) > 0) {
		off_t from = end > (off_t)sizeof(buf) - 1 ? end - (off_t)sizeof(buf) + 1 : 0;
		n = pread(fd, buf, sizeof(buf) - 1, from);
		buf[n > 0 ? n : 0] = '\0';
	}
	size_t len = strlen(buf);
	while (len && buf[len - 1] == '\n')
		buf[--len] = '\0';
	return buf;
}

int bench_free_port(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	_cleanup_close_ int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    getsockname(s, (struct sockaddr *)&a, &len) < 0)
		bench_die_errno("a free TCP port on 127.0.0.1");
	return ntohs(a.sin_port);
}

void bench_sha256_hex_of(const char *s, char hex[65])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int n = 0;

	if (!EVP_Digest(s, strlen(s), md, &n, EVP_sha256(), NULL) || n != 32)
		bench_die("sha256 failed");
	for (unsigned i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
}

double bench_run_ok(const char *what, char *const *argv, char *const *env, const char *dir,
		    const char *outfile)
{
	char errfile[PATH_MAX];
	_cleanup_close_ int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	_cleanup_close_ int out =
	    outfile ? open(outfile, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600) : -1;
	int status;

	bench_scratch_path(errfile, sizeof(errfile), "child.stderr");
	_cleanup_close_ int err = open(errfile, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (null < 0 || err < 0 || (outfile && out < 0))
		bench_die_errno("open %s", outfile && out < 0 ? outfile : errfile);
	double ms =
	    bench_run(argv, env, dir, null, outfile ? out : null, err, &bench_interrupted, &status);
	if (status != 0) {
		const char *tail = bench_tail_of(errfile);
		bench_die("%s failed: %s\n  command: %s%s%s", what, bench_status_str(status),
			  bench_argv_str(argv), *tail ? "\n  its stderr: " : "", tail);
	}
	return ms;
}
