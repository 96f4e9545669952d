/* Small pieces the run manager's files share: clocks, waiting, paths,
 * directories made and removed without following links, alerts, names. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "audit.h"
#include "runs_internal.h"
#include "tree.h"
#include "util.h"

int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t unix_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

bool run_wait_until(struct sbx_run *r, int64_t deadline)
{
	int64_t left = deadline - mono_ms();
	struct timespec ts;

	if (left <= 0)
		return false;
	/* The condvar runs on CLOCK_MONOTONIC (run_alloc), so a clock step
	 * neither cuts a long poll short nor stretches it. */
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += left / 1000;
	ts.tv_nsec += (left % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	pthread_cond_timedwait(&r->cv, &r->mu, &ts);
	return true;
}

const char *path_problem(const char *path, size_t max)
{
	size_t len = path ? strlen(path) : 0;

	if (len == 0)
		return "must not be empty";
	if (len > max)
		return max == RUN_PATH_MAX ? "longer than 1024 bytes" : "too long";
	if (path[0] == '/')
		return "must be relative (no leading '/')";
	for (const char *p = path; *p;) {
		size_t n = strcspn(p, "/");

		if (n == 0)
			return "has an empty component";
		if ((n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
			return "must not contain \".\" or \"..\" components";
		p += n;
		if (*p == '/') {
			p++;
			if (!*p)
				return "has an empty component";
		}
	}
	return NULL;
}

bool is_sha256_hex(const char *s)
{
	size_t i;

	for (i = 0; s[i]; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return i == 64;
}

static int remove_contents(int dirfd, const char *what, int depth, struct sbx_err *err)
{
	int dup_fd;
	DIR *d;
	struct dirent *de;
	int rc = 0;

	if (depth > 4096)
		return sbx_fail(err, "%s: too deep to remove", what);
	dup_fd = fcntl(dirfd, F_DUPFD_CLOEXEC, 3);
	if (dup_fd < 0)
		return sbx_fail_errno(err, "%s", what);
	d = fdopendir(dup_fd);
	if (!d) {
		close(dup_fd);
		return sbx_fail_errno(err, "%s", what);
	}
	while (rc == 0 && (errno = 0, de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (unlinkat(dirfd, de->d_name, 0) == 0 || errno == ENOENT)
			continue;
		if (errno != EISDIR && errno != EPERM)
			rc = sbx_fail_errno(err, "remove %s/%s", what, de->d_name);
		else {
			_cleanup_close_ int sub =
			    sbx_open_beneath(dirfd, de->d_name, O_RDONLY | O_DIRECTORY, 0, err);

			if (sub < 0)
				rc = -1;
			else if (fchmod(sub, 0700), remove_contents(sub, what, depth + 1, err) < 0)
				rc = -1;
			else if (unlinkat(dirfd, de->d_name, AT_REMOVEDIR) < 0 && errno != ENOENT)
				rc = sbx_fail_errno(err, "remove %s/%s", what, de->d_name);
		}
	}
	closedir(d);
	return rc;
}

int remove_tree_at(int parent, const char *name, struct sbx_err *err)
{
	struct stat st;

	if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : sbx_fail_errno(err, "stat %s", name);
	if (!S_ISDIR(st.st_mode)) {
		if (unlinkat(parent, name, 0) < 0 && errno != ENOENT)
			return sbx_fail_errno(err, "remove %s", name);
		return 0;
	}
	_cleanup_close_ int fd = sbx_open_beneath(parent, name, O_RDONLY | O_DIRECTORY, 0, err);
	if (fd < 0)
		return -1;
	/* Make it ours to empty even if something made it read-only. */
	fchmod(fd, 0700);
	if (remove_contents(fd, name, 0, err) < 0)
		return -1;
	if (unlinkat(parent, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
		return sbx_fail_errno(err, "remove %s", name);
	return 0;
}

int mkdirs_beneath(int dirfd, const char *path, const char **base, struct sbx_err *err)
{
	char buf[RUN_PATH_MAX + 1];
	int cur = fcntl(dirfd, F_DUPFD_CLOEXEC, 3);
	char *comp;

	if (cur < 0)
		return sbx_fail_errno(err, "dup");
	snprintf(buf, sizeof(buf), "%s", path);
	comp = buf;
	for (char *slash; (slash = strchr(comp, '/')); comp = slash + 1) {
		int next;

		*slash = '\0';
		if (mkdirat(cur, comp, 0755) < 0 && errno != EEXIST) {
			sbx_fail_errno(err, "mkdir %s", buf);
			close(cur);
			return -1;
		}
		next = sbx_open_beneath(cur, comp, O_RDONLY | O_DIRECTORY, 0, err);
		close(cur);
		if (next < 0)
			return sbx_err_prefix(err, "%s", path);
		cur = next;
		*slash = '/';
	}
	*base = path + (comp - buf);
	return cur;
}

void run_alert(struct sbx_run *r, const char *fmt, ...)
{
	char buf[RUN_ALERT_BYTES];
	va_list ap;

	if (r->n_alerts >= RUN_ALERTS_MAX) {
		r->alerts_dropped++;
		return;
	}
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	r->alerts[r->n_alerts] = strdup(buf);
	if (r->alerts[r->n_alerts])
		r->n_alerts++;
	else
		r->alerts_dropped++;
}

const char *exit_reason_name(Sbx__V1__ExitReason r)
{
	switch (r) {
	case SBX__V1__EXIT_REASON__RUNNING:
		return "running";
	case SBX__V1__EXIT_REASON__EXITED:
		return "exited";
	case SBX__V1__EXIT_REASON__SIGNALED:
		return "signaled";
	case SBX__V1__EXIT_REASON__TIMEOUT:
		return "timeout";
	case SBX__V1__EXIT_REASON__OOM:
		return "oom";
	case SBX__V1__EXIT_REASON__RUN_EXPIRED:
		return "run_expired";
	case SBX__V1__EXIT_REASON__TORN_DOWN:
		return "torn_down";
	case SBX__V1__EXIT_REASON__SETUP_FAILED:
		return "setup_failed";
	default:
		return "unspecified";
	}
}

const char *run_state_name(Sbx__V1__RunState s)
{
	switch (s) {
	case SBX__V1__RUN_STATE__CREATED:
		return "created";
	case SBX__V1__RUN_STATE__ACTIVE:
		return "active";
	case SBX__V1__RUN_STATE__EXPIRED:
		return "expired";
	case SBX__V1__RUN_STATE__TORN:
		return "torn";
	case SBX__V1__RUN_STATE__FAILED:
		return "failed";
	default:
		return "unspecified";
	}
}

struct run_exec *run_find_exec(struct sbx_run *r, const char *exec_id)
{
	const char *p = exec_id;
	uint64_t n = 0;

	if (!p || strncmp(p, "exec-", 5) != 0 || p[5] < '1' || p[5] > '9')
		return NULL;
	for (p += 5; *p; p++) {
		if (*p < '0' || *p > '9' || n > (UINT64_MAX - 9) / 10)
			return NULL;
		n = n * 10 + (uint64_t)(*p - '0');
	}
	for (struct run_exec *e = r->execs; e; e = e->next)
		if (e->num == n)
			return e;
	return NULL;
}

void run_audit(struct sbx_run *r, const char *event, void *fields)
{
	sbx_audit(event, r->id, r->identity, r->policy_digest, fields);
}

void run_queue_audit(struct sbx_run *r, const char *event, void *fields)
{
	struct run_event *ev = malloc(sizeof(*ev));

	if (!ev) {
		json_decref(fields);
		return;
	}
	*ev = (struct run_event){.event = event, .fields = fields};
	if (!r->events_tail)
		r->events_tail = &r->events;
	*r->events_tail = ev;
	r->events_tail = &ev->next;
}

void run_unlock(struct sbx_run *r)
{
	struct run_event *ev = r->events, *next;

	r->events = NULL;
	r->events_tail = &r->events;
	pthread_mutex_unlock(&r->mu);
	for (; ev; ev = next) {
		next = ev->next;
		run_audit(r, ev->event, ev->fields);
		free(ev);
	}
}
