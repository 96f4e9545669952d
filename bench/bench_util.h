#ifndef SBX_BENCH_UTIL_H
#define SBX_BENCH_UTIL_H

#include <stdbool.h>
#include <stddef.h>

double bench_now_ms(void);
/* Appends n bytes of s to buf[size], truncating; *len counts what would
 * have been written. */
void bench_append(char *buf, size_t size, size_t *len, const char *s, size_t n);
/* argv as one shell-quoted line, for messages (a static buffer). */
const char *bench_argv_str(char *const *argv);
/* "exit status N", "killed by signal N (name)" (a static buffer). */
const char *bench_status_str(int status);
bool bench_fs_is(const char *path, unsigned long magic);
/* qsort comparison of doubles. */
int bench_cmp_double(const void *a, const void *b);

#endif
