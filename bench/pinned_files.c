/* SPDX-License-Identifier: Apache-2.0 */
/* sbx-bench-pinned-files: what one file pinned by a mapping costs the memory
 * cgroup it is charged to, on this kernel.
 *
 *   sbx-bench-pinned-files [COUNT]
 *
 * opens one file COUNT times (default 50000, below vm.max_map_count), maps a
 * page of each open file and closes the descriptor: each mapping keeps its own
 * `struct file` (filp) and its vm_area_struct, both SLAB_ACCOUNT, charged to
 * the process's memory cgroup, while RLIMIT_NOFILE counts none of them. It
 * prints the cgroup's growth and fs.file-nr's over COUNT. No page is touched,
 * so no page table nor page cache is charged: what is left is the floor a
 * pinned file costs (common/run_files.h SBX_PINNED_FILE_BYTES is below it).
 *
 * Run it alone in a memory cgroup of its own, or the cgroup's other processes
 * count too (as root, cgroup v1):
 *   mkdir /sys/fs/cgroup/memory/pinbench
 *   sh -c 'echo $$ > /sys/fs/cgroup/memory/pinbench/cgroup.procs &&
 *          exec build/bench/sbx-bench-pinned-files 50000'
 *   rmdir /sys/fs/cgroup/memory/pinbench
 * (v2: the same with /sys/fs/cgroup/pinbench). Libc only. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static void die(const char *what)
{
	fprintf(stderr, "sbx-bench-pinned-files: %s: %s\n", what, strerror(errno));
	exit(1);
}

/* The memory cgroup's usage file of this process (v2 memory.current, v1
 * memory.usage_in_bytes), from /proc/self/cgroup. */
static int usage_path(char *buf, size_t size)
{
	FILE *f = fopen("/proc/self/cgroup", "re");
	char line[4096];
	int found = -1;

	if (!f)
		die("/proc/self/cgroup");
	while (found < 0 && fgets(line, sizeof(line), f)) {
		char *path = strchr(line, ':');
		char *ctl = path ? path + 1 : NULL;

		if (!ctl || !(path = strchr(ctl, ':')))
			continue;
		*path++ = '\0';
		path[strcspn(path, "\n")] = '\0';
		if (strcmp(ctl, "memory") == 0)
			found = snprintf(buf, size, "/sys/fs/cgroup/memory%s/memory.usage_in_bytes",
					 path) < (int)size
				    ? 0
				    : -1;
		else if (ctl[0] == '\0' &&
			 snprintf(buf, size, "/sys/fs/cgroup%s/memory.current", path) < (int)size &&
			 access(buf, R_OK) == 0)
			found = 0;
	}
	fclose(f);
	return found;
}

static long long read_number(const char *path)
{
	FILE *f = fopen(path, "re");
	long long n;

	if (!f)
		die(path);
	if (fscanf(f, "%lld", &n) != 1) {
		errno = EINVAL;
		die(path);
	}
	fclose(f);
	return n;
}

int main(int argc, char **argv)
{
	long count = argc > 1 ? strtol(argv[1], NULL, 10) : 50000;
	long page = sysconf(_SC_PAGESIZE);
	char usage[4200];
	long long mem0, mem1, nr0, nr1;

	if (count <= 0 || argc > 2) {
		fprintf(stderr, "usage: sbx-bench-pinned-files [COUNT]\n");
		return 2;
	}
	if (usage_path(usage, sizeof(usage)) < 0) {
		errno = ENOENT;
		die("no memory cgroup in /proc/self/cgroup");
	}
	mem0 = read_number(usage);
	nr0 = read_number("/proc/sys/fs/file-nr");
	for (long i = 0; i < count; i++) {
		int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);

		if (fd < 0)
			die("open");
		if (mmap(NULL, (size_t)page, PROT_READ, MAP_SHARED, fd, 0) == MAP_FAILED)
			die("mmap");
		close(fd);
	}
	mem1 = read_number(usage);
	nr1 = read_number("/proc/sys/fs/file-nr");
	printf("pinned %ld files: cgroup +%lld bytes (%lld per file), fs.file-nr +%lld (%s)\n",
	       count, mem1 - mem0, (mem1 - mem0) / count, nr1 - nr0, usage);
	return 0;
}
