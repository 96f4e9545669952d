/* SPDX-License-Identifier: Apache-2.0 */
/* Exec init's join of its v1 leaf (helper/cgroup.c): through `tasks`, which
 * moves the calling thread only, so a process of one thread lands whole in
 * every controller's leaf, and one that has made a second thread fails the
 * join, whose other thread the kernel left outside. Made for real in the
 * delegated v1 root of /etc/sbx/cgroup-root (packaging/setup.sh); skipped
 * (77) on a host without cgroup v1 or that root. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cgroup.h"
#include "check.h"
#include "fds.h"

#define SKIP 77

static char leaf_name[64];

/* Whether `ctrl`'s line of a /proc/.../cgroup text ("ID:a,b:/path") ends
 * in this test's leaf. */
static bool ctrl_in_leaf(const char *cgroup, const char *ctrl)
{
	size_t clen = strlen(ctrl), nlen = strlen(leaf_name);
	for (const char *line = cgroup; line && *line;) {
		const char *end = strchr(line, '\n');
		size_t len = end ? (size_t)(end - line) : strlen(line);
		const char *list = memchr(line, ':', len);
		const char *path =
		    list ? memchr(list + 1, ':', len - (size_t)(list + 1 - line)) : NULL;
		for (const char *c = list ? list + 1 : NULL; c && path && c < path;) {
			const char *comma = memchr(c, ',', (size_t)(path - c));
			const char *stop = comma ? comma : path;
			if ((size_t)(stop - c) == clen && strncmp(c, ctrl, clen) == 0)
				return len >= nlen + 1 && line[len - nlen - 1] == '/' &&
				       strncmp(line + len - nlen, leaf_name, nlen) == 0;
			c = comma ? comma + 1 : NULL;
		}
		line = end ? end + 1 : NULL;
	}
	return false;
}

/* Whether memory, pids and cpu all end in the leaf. */
static bool in_leaf(const char *cgroup)
{
	for (int i = 0; i < SBX_CG_NCTRL; i++)
		if (!ctrl_in_leaf(cgroup, sbx_cg_v1_name(i)))
			return false;
	return true;
}

static bool task_in_leaf(pid_t tid)
{
	char path[64], text[4096];
	snprintf(path, sizeof(path), "/proc/self/task/%d/cgroup", (int)tid);
	return sbx_read_at(AT_FDCWD, path, text, sizeof(text)) == 0 && in_leaf(text);
}

/* Child exit codes: 0 as expected, 10 + what went wrong. */
static int one_thread(const struct sbx_cgroup *leaf)
{
	struct sbx_err err;
	if (sbx_cgroup_join_single_threaded(leaf, &err) < 0) {
		fprintf(stderr, "join: %s\n", err.msg);
		return 10;
	}
	return task_in_leaf((pid_t)syscall(SYS_gettid)) ? 0 : 11;
}

static int pipe_fds[2];

static void *blocked(void *arg)
{
	char c;
	(void)arg;
	(void)!read(pipe_fds[0], &c, 1);
	return NULL;
}

static int two_threads(const struct sbx_cgroup *leaf)
{
	struct sbx_err err;
	pthread_t t;
	if (pipe(pipe_fds) < 0 || pthread_create(&t, NULL, blocked, NULL) != 0)
		return 12;
	if (sbx_cgroup_join_single_threaded(leaf, &err) == 0)
		return 13;
	fprintf(stderr, "join refused as expected: %s\n", err.msg);
	if (!strstr(err.msg, "2 threads"))
		return 14;
	/* Why the count is needed: the other thread did not move. */
	DIR *d = opendir("/proc/self/task");
	struct dirent *de;
	pid_t self = (pid_t)syscall(SYS_gettid);
	int others = 0, outside = 0;
	while (d && (de = readdir(d))) {
		pid_t tid = (pid_t)atoi(de->d_name);
		if (tid <= 0 || tid == self)
			continue;
		others++;
		outside += !task_in_leaf(tid);
	}
	if (d)
		closedir(d);
	return others == 1 && outside == 1 && task_in_leaf(self) ? 0 : 15;
}

static int run_child(int (*fn)(const struct sbx_cgroup *), const struct sbx_cgroup *leaf)
{
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0)
		_exit(fn(leaf));
	int status;
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int main(void)
{
	char rel[1024];
	struct sbx_cgroup root, leaf;
	struct sbx_err err;

	if (sbx_cgroup_detect() != SBX_CG_V1) {
		printf("skip: this host's memory, pids and cpu are not on cgroup v1\n");
		return SKIP;
	}
	if (sbx_read_at(AT_FDCWD, "/etc/sbx/cgroup-root", rel, sizeof(rel)) < 0) {
		printf("skip: no /etc/sbx/cgroup-root (packaging/setup.sh makes it)\n");
		return SKIP;
	}
	rel[strcspn(rel, "\n")] = '\0';
	sbx_cgroup_init(&root);
	root.mode = SBX_CG_V1;
	snprintf(root.path, sizeof(root.path), "%s/%s/%s", SBX_CG_MOUNT, sbx_cg_v1_name(0), rel);
	for (int i = 0; i < SBX_CG_NCTRL; i++) {
		char dir[2048];
		snprintf(dir, sizeof(dir), "%s/%s/%s", SBX_CG_MOUNT, sbx_cg_v1_name(i), rel);
		root.fd[i] = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (root.fd[i] < 0 || faccessat(root.fd[i], ".", W_OK, AT_EACCESS) < 0) {
			printf("skip: %s is not this user's (%s)\n", dir, strerror(errno));
			return SKIP;
		}
	}
	snprintf(leaf_name, sizeof(leaf_name), "unit-join-%d", (int)getpid());
	if (!check(sbx_cgroup_create(&root, leaf_name, false, &leaf, &err) == 0,
		   "leaf %s made under %s", leaf_name, root.path))
		return check_done();

	int rc = run_child(one_thread, &leaf);
	check(rc == 0, "a process of one thread joins memory, pids and cpu whole (child %d)", rc);
	rc = run_child(two_threads, &leaf);
	check(rc == 0,
	      "a process of two threads is refused, its other thread left outside (child %d)", rc);

	sbx_cgroup_close(&leaf);
	check(sbx_cgroup_remove(&root, leaf_name, &err) == 0, "leaf removed");
	sbx_cgroup_close(&root);
	return check_done();
}
