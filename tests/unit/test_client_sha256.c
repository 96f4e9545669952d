/* SPDX-License-Identifier: Apache-2.0 */
/* sbx_file_sha256 against coreutils' sha256sum, on sizes around the 1 MiB
 * chunk the library reads with; and its errors. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "sbxclient.h"

static bool sha256sum(const char *path, char hex[65])
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd), "sha256sum '%s'", path);
	FILE *p = popen(cmd, "r");
	if (!p)
		return false;
	bool ok = fscanf(p, "%64s", hex) == 1;
	return pclose(p) == 0 && ok;
}

int main(void)
{
	static const size_t sizes[] = {0, 1, 55, 64, 1048575, 1048576, 1048577, 3 * 1048576 + 17};
	char dir[] = "/tmp/sbx-test-sha256-XXXXXX";
	char path[256], got[65], want[65];
	struct sbx_err err;
	uint64_t size;

	if (!mkdtemp(dir))
		return 1;
	snprintf(path, sizeof(path), "%s/f", dir);
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		FILE *f = fopen(path, "w");
		uint32_t x = (uint32_t)i + 1;
		for (size_t k = 0; k < sizes[i]; k++) {
			x = x * 1664525 + 1013904223;
			fputc((int)(x >> 24), f);
		}
		fclose(f);
		int rc = sbx_file_sha256(path, got, &size, &err);
		if (!check(rc == 0 && sha256sum(path, want) && !strcmp(got, want) &&
			       size == sizes[i],
			   "%zu bytes: same digest as sha256sum, size reported", sizes[i]))
			printf("#   got %s (%s), want %s\n", got, rc ? err.msg : "", want);
	}
	check(sbx_file_sha256(dir, got, NULL, &err) < 0 && strstr(err.msg, "not a regular file"),
	      "a directory is refused");
	snprintf(path, sizeof(path), "%s/missing", dir);
	check(sbx_file_sha256(path, got, NULL, &err) < 0 && strstr(err.msg, "No such file"),
	      "a missing file names its errno: %s", err.msg);
	snprintf(path, sizeof(path), "%s/f", dir);
	unlink(path);
	rmdir(dir);
	return check_done();
}
