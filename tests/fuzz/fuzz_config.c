/* SPDX-License-Identifier: Apache-2.0 */
/* sbxd's config file parser (server/config/config.h). sbx_config_load reads a
 * path, so the input goes into a memfd named by /proc/self/fd. Properties:
 * a config that loads has at least one listener; a failure says why and
 * leaves nothing allocated (sbx_config_free is safe either way). */
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "config.h"
#include "fuzz.h"
#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	_cleanup_close_ int fd = memfd_create("sbxd.json", MFD_CLOEXEC);
	char path[64];
	struct sbx_config cfg;
	struct sbx_err err = {0};

	FUZZ_ASSERT(fd >= 0, "memfd_create");
	FUZZ_ASSERT(write(fd, data, size) == (ssize_t)size, "write");
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	if (sbx_config_load(path, &cfg, &err) < 0) {
		FUZZ_ASSERT(err.msg[0], "load failed without a message");
		sbx_config_free(&cfg);
		return 0;
	}
	FUZZ_ASSERT(cfg.n_listen >= 1 && cfg.n_listen <= SBX_CONFIG_MAX_LISTEN && cfg.listen[0],
		    "%zu listeners", cfg.n_listen);
	FUZZ_ASSERT(cfg.state_dir, "no state_dir");
	sbx_config_free(&cfg);
	return 0;
}
