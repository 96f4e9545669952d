/* What both benchmark programs need: clocks, percentiles' ordering,
 * messages about commands and how they ended, file system probes. */
#include "bench_util.h"

#include <stdio.h>
#include <string.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <time.h>

double bench_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Appends to buf[size], truncating; *len counts what would have been written. */
void bench_append(char *buf, size_t size, size_t *len, const char *s, size_t n)
{
	size_t room = size - 1; /* size >= 1 */

	for (size_t i = 0; i < n; i++, (*len)++)
		if (*len < room)
			buf[*len] = s[i];
	buf[*len < room ? *len : room] = '\0';
}

/* argv as one shell-quoted line, for messages. */
const char *bench_argv_str(char *const *argv)
{
	static const char safe[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
				   "0123456789-_./=:,+@%";
	static char buf[8192];
	size_t len = 0;

	buf[0] = '\0';
	for (size_t i = 0; argv[i]; i++) {
		const char *a = argv[i];

		if (i)
			bench_append(buf, sizeof(buf), &len, " ", 1);
		if (*a && strspn(a, safe) == strlen(a)) {
			bench_append(buf, sizeof(buf), &len, a, strlen(a));
			continue;
		}
		bench_append(buf, sizeof(buf), &len, "'", 1);
		for (const char *p = a; *p; p++) {
			if (*p == '\'')
				bench_append(buf, sizeof(buf), &len, "'\\''", 4);
			else
				bench_append(buf, sizeof(buf), &len, p, 1);
		}
		bench_append(buf, sizeof(buf), &len, "'", 1);
	}
	return buf;
}

const char *bench_status_str(int status)
{
	static char buf[96];

	if (WIFEXITED(status))
		snprintf(buf, sizeof(buf), "exit status %d", WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		snprintf(buf, sizeof(buf), "killed by signal %d (%s)", WTERMSIG(status),
			 strsignal(WTERMSIG(status)));
	else
		snprintf(buf, sizeof(buf), "wait status 0x%x", (unsigned)status);
	return buf;
}

bool bench_fs_is(const char *path, unsigned long magic)
{
	struct statfs sf;

	return statfs(path, &sf) == 0 && (unsigned long)sf.f_type == magic;
}

int bench_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}
