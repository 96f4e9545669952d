/* SPDX-License-Identifier: Apache-2.0 */
/* A private sbxd for one `sbxctl run`, so that the README's command works on a
 * host where no sbxd is installed: started in a fresh temporary directory
 * (its socket, state and audit log), asked for Health until it answers,
 * and stopped (SIGTERM: it tears its runs down) and removed at the end. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "sleep.h"
#include "util.h"

#define START_TIMEOUT_MS 10000
#define STOP_TIMEOUT_MS	 10000
#define SUN_PATH_MAX	 107

static bool executable(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

int private_sbxd_find(const char *self, char *out, size_t size)
{
	const char *env = getenv("SBX_SBXD");
	char dir[PATH_MAX];

	if (env && *env) {
		snprintf(out, size, "%s", env);
		return 0;
	}
	/* The build tree has <build>/clients/sbxctl and <build>/server/sbxd; an
	 * installation <prefix>/bin/sbx and <prefix>/sbin/sbxd. */
	if (self && realpath(self, dir)) {
		char *slash = strrchr(dir, '/');
		if (slash)
			*slash = '\0';
		static const char *const rel[] = {"../server/sbxd", "../sbin/sbxd", "sbxd"};
		for (size_t i = 0; i < SBX_ARRAY_SIZE(rel); i++) {
			if ((size_t)snprintf(out, size, "%s/%s", dir, rel[i]) < size &&
			    executable(out))
				return 0;
		}
	}
	const char *path = getenv("PATH");
	if (!path || !*path)
		path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
	while (*path) {
		size_t n = strcspn(path, ":");
		if (n && (size_t)snprintf(out, size, "%.*s/sbxd", (int)n, path) < size &&
		    executable(out))
			return 0;
		path += n + (path[n] == ':');
	}
	return -1;
}

static int rm_entry(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
	(void)sb;
	(void)type;
	(void)ftw;
	remove(path);
	return 0;
}

static void remove_tree(const char *dir)
{
	/* FTW_PHYS: a link is removed, never followed. */
	nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}

/* The last lines sbxd wrote to stderr, for the error message. */
static void tail_of(const char *path, char *out, size_t size)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	char buf[600];
	off_t end;
	ssize_t n;

	out[0] = '\0';
	if (fd < 0 || (end = lseek(fd, 0, SEEK_END)) < 0)
		return;
	lseek(fd, end > (off_t)sizeof(buf) - 1 ? end - (off_t)sizeof(buf) + 1 : 0, SEEK_SET);
	if ((n = read(fd, buf, sizeof(buf) - 1)) <= 0)
		return;
	buf[n] = '\0';
	while (n > 0 && buf[n - 1] == '\n')
		buf[--n] = '\0';
	for (char *p = buf; *p; p++)
		if (*p == '\n')
			*p = ' ';
	snprintf(out, size, "%s", buf);
}

static int make_dir(struct private_sbxd *p, struct sbx_err *err)
{
	const char *tmp = getenv("TMPDIR");
	char base[PATH_MAX];

	/* The socket path must fit in sun_path (108 bytes). */
	if (!tmp || !*tmp || !realpath(tmp, base) || strlen(base) > 60)
		snprintf(base, sizeof(base), "/tmp");
	if ((size_t)snprintf(p->dir, sizeof(p->dir), "%s/sbx-XXXXXX", base) >= sizeof(p->dir))
		return sbx_fail(err, "temporary directory name too long");
	if (!mkdtemp(p->dir))
		return sbx_fail_errno(err, "mkdtemp %s", p->dir);
	snprintf(p->endpoint, sizeof(p->endpoint), "ipc://%s/sbxd.sock", p->dir);
	if (strlen(p->endpoint) - 6 > SUN_PATH_MAX)
		return sbx_fail(err, "%s: socket path too long", p->endpoint);
	return 0;
}

/* Polls Health until it answers, sbxd exits, or time runs out. */
static int wait_ready(struct private_sbxd *p, const char *errlog, struct sbx_err *err)
{
	struct sbx_client_opts o = {.endpoint = p->endpoint, .timeout_ms = 2000, .retries = -1};
	_cleanup_client_ sbx_client *c = sbx_client_open(&o, err);
	struct sbx_rpc_status st = {0};
	char tail[600];
	int status;

	if (!c)
		return -1;
	sbx_client_set_interrupt(c, &cli_interrupted);
	for (unsigned waited = 0;; waited += 50) {
		Sbx__V1__HealthResponse *h = sbx_health(c, &st);
		if (h) {
			sbx__v1__health_response__free_unpacked(h, NULL);
			return 0;
		}
		if (waitpid(p->pid, &status, WNOHANG) == p->pid) {
			p->pid = -1;
			tail_of(errlog, tail, sizeof(tail));
			return sbx_fail(err, "sbxd exited with status %d: %s",
					WIFEXITED(status) ? WEXITSTATUS(status)
							  : 128 + WTERMSIG(status),
					*tail ? tail : "(no message)");
		}
		if (cli_interrupted || waited >= START_TIMEOUT_MS)
			break;
		sbx_sleep_ms(50);
	}
	if (cli_interrupted)
		return sbx_fail(err, "interrupted");
	tail_of(errlog, tail, sizeof(tail));
	return sbx_fail(err, "sbxd did not answer within %d s (%s)%s%s", START_TIMEOUT_MS / 1000,
			st.err.msg, *tail ? ": " : "", tail);
}

/* The child: sbxd on stdin null, stdout and stderr out. */
static __attribute__((noreturn)) void run_sbxd(char *sbxd, char *state, char *log, char *listen,
					       pid_t parent, int null, int out)
{
	struct sbx_err err;

	/* Its own process group: a ^C for sbxctl must not drain sbxd before sbxctl
	 * has torn the run down. Dies with sbxctl, if sbxctl is killed. */
	setpgid(0, 0);
	if (prctl(PR_SET_PDEATHSIG, SIGTERM) < 0 || getppid() != parent)
		_exit(127);
	signal(SIGPIPE, SIG_DFL);
	if (dup2(null, STDIN_FILENO) < 0 || dup2(out, STDOUT_FILENO) < 0 ||
	    dup2(out, STDERR_FILENO) < 0)
		_exit(127);
	char *args[] = {sbxd, "--listen", listen, "--state-dir", state, "--log", log, NULL};
	execv(sbxd, args);
	sbx_fail_errno(&err, "cannot run %s", sbxd);
	dprintf(STDERR_FILENO, "%s\n", err.msg);
	_exit(127);
}

static int start(struct private_sbxd *p, struct sbx_err *err)
{
	char sbxd[PATH_MAX], state[PATH_MAX], log[PATH_MAX], errlog[PATH_MAX], listen[PATH_MAX];

	if (private_sbxd_find("/proc/self/exe", sbxd, sizeof(sbxd)) < 0)
		return sbx_fail(err, "no sbxd binary (set SBX_SBXD, or put sbxd on PATH)");
	if (make_dir(p, err) < 0)
		return -1;
	snprintf(state, sizeof(state), "%s/state", p->dir);
	snprintf(log, sizeof(log), "%s/audit.log", p->dir);
	snprintf(errlog, sizeof(errlog), "%s/sbxd.stderr", p->dir);
	snprintf(listen, sizeof(listen), "%s", p->endpoint);
	_cleanup_close_ int out = open(errlog, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	_cleanup_close_ int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
	pid_t parent = getpid();
	if (out < 0 || null < 0)
		return sbx_fail_errno(err, "%s", errlog);
	fflush(NULL);
	p->pid = fork();
	if (p->pid < 0)
		return sbx_fail_errno(err, "fork");
	if (p->pid == 0)
		run_sbxd(sbxd, state, log, listen, parent, null, out);
	if (wait_ready(p, errlog, err) < 0)
		return sbx_err_prefix(err, "%s", sbxd);
	return 0;
}

int private_sbxd_start(struct private_sbxd *p, struct sbx_err *err)
{
	p->pid = -1;
	p->dir[0] = '\0';
	if (start(p, err) < 0) {
		private_sbxd_stop(p);
		return -1;
	}
	return 0;
}

void private_sbxd_stop(struct private_sbxd *p)
{
	int status;

	if (p->pid > 0) {
		kill(p->pid, SIGTERM);
		unsigned waited = 0;
		while (waitpid(p->pid, &status, WNOHANG) == 0) {
			if (waited >= STOP_TIMEOUT_MS) {
				kill(p->pid, SIGKILL);
				waitpid(p->pid, &status, 0);
				break;
			}
			sbx_sleep_ms(20);
			waited += 20;
		}
		p->pid = -1;
	}
	if (p->dir[0]) {
		remove_tree(p->dir);
		p->dir[0] = '\0';
	}
}
