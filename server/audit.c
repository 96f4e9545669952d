/* The audit log: JSON lines an operator can grep and a program can parse.
 *
 * Every line is built whole in memory and written with one write(2) on an
 * O_APPEND descriptor, under a mutex: lines from different threads never
 * interleave, and a log shared with another writer (logrotate's copytruncate,
 * a second sbxd by mistake) stays line-aligned. A line is written whole or
 * not at all: a short write (the disk filled mid-line) is cut back off, so
 * the next line never glues to half of one. A lost line is counted
 * (Health.audit_lines_lost, and an audit_lines_lost line once the log takes
 * lines again), never fatal: losing the service over a full disk would be
 * worse.
 *
 * The log names every caller's runs, commands and artifacts: it is sbxd's
 * alone (0600), or also log_group's (0640) when the config names one, never
 * the group callers join to reach the ipc socket by default. */
#include "audit.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "clock.h"
#include "util.h"

static pthread_mutex_t audit_lock = PTHREAD_MUTEX_INITIALIZER;
static int audit_fd = STDERR_FILENO;
static bool audit_owned;
static unsigned long audit_lost;       /* [audit_lock] since start */
static unsigned long audit_unreported; /* [audit_lock] not yet in the log */

static int group_id(const char *name, gid_t *gid, struct sbx_err *err)
{
	char buf[16384];
	struct group gr, *found = NULL;
	char *end;
	unsigned long n = strtoul(name, &end, 10);
	int rc;

	if (*name && !*end) {
		*gid = (gid_t)n;
		return 0;
	}
	rc = getgrnam_r(name, &gr, buf, sizeof(buf), &found);
	if (!found)
		return rc ? sbx_fail_errnum(err, rc, "log_group %s", name)
			  : sbx_fail(err, "log_group %s: no such group", name);
	*gid = gr.gr_gid;
	return 0;
}

/* The log's owner, group and mode, set on the open file whether it was
 * just made or left by an earlier sbxd (a log made 0640 for the socket's
 * group must not stay readable to it). A log sbxd cannot fix is refused. */
static int restrict_log(int fd, const char *path, const char *group, struct sbx_err *err)
{
	mode_t want = group ? 0640 : 0600;
	struct stat sb;
	gid_t gid = 0;

	if (group && group_id(group, &gid, err) < 0)
		return -1;
	if (fstat(fd, &sb) < 0)
		return sbx_fail_errno(err, "audit log %s", path);
	if (!S_ISREG(sb.st_mode))
		return 0; /* a pipe or a terminal: nobody else reads it back */
	if (group && sb.st_gid != gid && fchown(fd, (uid_t)-1, gid) < 0)
		return sbx_fail_errno(err, "audit log %s: log_group %s", path, group);
	if ((sb.st_mode & 07777) != want && fchmod(fd, want) < 0)
		return sbx_fail_errno(err, "audit log %s: chmod %o", path, (unsigned)want);
	return 0;
}

int sbx_audit_open(const char *path, const char *group, struct sbx_err *err)
{
	int fd = STDERR_FILENO;

	if (path) {
		fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0600);
		if (fd < 0)
			return sbx_fail_errno(err, "audit log %s", path);
		if (restrict_log(fd, path, group, err) < 0) {
			close(fd);
			return -1;
		}
	}
	pthread_mutex_lock(&audit_lock);
	if (audit_owned)
		close(audit_fd);
	audit_fd = fd;
	audit_owned = path != NULL;
	pthread_mutex_unlock(&audit_lock);
	return 0;
}

void sbx_audit_close(void)
{
	pthread_mutex_lock(&audit_lock);
	if (audit_owned)
		close(audit_fd);
	audit_fd = STDERR_FILENO;
	audit_owned = false;
	pthread_mutex_unlock(&audit_lock);
}

/* RFC 3339, UTC, milliseconds: 2026-08-01T12:34:56.789Z */
static void now_rfc3339(char buf[64])
{
	int64_t ms = sbx_unix_ms();
	time_t sec = (time_t)(ms / 1000);
	struct tm tm;

	gmtime_r(&sec, &tm);
	snprintf(buf, 64, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
		 tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ms % 1000));
}

static json_t *string_or_null(const char *s)
{
	return s ? json_string(s) : json_null();
}

/* audit_lock held: the whole line, or nothing of it in the log. */
static bool write_whole(const char *line, size_t len)
{
	struct stat sb;
	off_t end = -1;
	size_t off = 0;

	/* Only this process appends (under audit_lock), so the end before the
	 * write is where a torn line starts. A pipe or terminal has none. */
	if (fstat(audit_fd, &sb) == 0 && S_ISREG(sb.st_mode))
		end = lseek(audit_fd, 0, SEEK_END);
	while (off < len) {
		ssize_t n = write(audit_fd, line + off, len - off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		off += (size_t)n;
	}
	if (off == len)
		return true;
	if (off && end >= 0 && ftruncate(audit_fd, end) < 0) {
		/* Cannot cut it back: the next line at least starts on its own. */
		if (write(audit_fd, "\n", 1) < 0) {
		}
	}
	return false;
}

static void write_line(const char *line, size_t len)
{
	pthread_mutex_lock(&audit_lock);
	if (audit_unreported) {
		char note[160], when[64];
		int n;

		now_rfc3339(when);
		n = snprintf(note, sizeof(note),
			     "{\"time\":\"%s\",\"event\":\"audit_lines_lost\",\"lost\":%lu,"
			     "\"lost_since_start\":%lu}\n",
			     when, audit_unreported, audit_lost);
		if (n > 0 && (size_t)n < sizeof(note) && write_whole(note, (size_t)n))
			audit_unreported = 0;
	}
	if (!write_whole(line, len)) {
		audit_lost++;
		audit_unreported++;
		/* stderr may be the log itself; then this is lost too. */
		if (audit_fd != STDERR_FILENO)
			fprintf(stderr, "sbxd: audit log write failed (%lu lost)\n", audit_lost);
	}
	pthread_mutex_unlock(&audit_lock);
}

unsigned long sbx_audit_lost(void)
{
	unsigned long n;

	pthread_mutex_lock(&audit_lock);
	n = audit_lost;
	pthread_mutex_unlock(&audit_lock);
	return n;
}

void sbx_audit(const char *event, const char *run_id, const char *identity,
	       const char *policy_digest, void *fields)
{
	json_auto_t *extra = fields;
	json_auto_t *line = json_object();
	_cleanup_free_ char *text = NULL;
	char when[64];
	size_t len;
	char *buf;

	now_rfc3339(when);
	/* The fixed keys come first (jansson keeps insertion order) and win
	 * over same-named fields, so no caller can forge "identity". */
	if (line) {
		json_object_set_new(line, "time", json_string(when));
		json_object_set_new(line, "event", string_or_null(event));
		json_object_set_new(line, "run_id", string_or_null(run_id));
		json_object_set_new(line, "identity", string_or_null(identity));
		json_object_set_new(line, "policy_digest", string_or_null(policy_digest));
	}
	if (line && json_is_object(extra)) {
		const char *key;
		json_t *value;

		json_object_foreach(extra, key, value)
		{
			if (!json_object_get(line, key))
				json_object_set(line, key, value);
		}
	}
	text = line ? json_dumps(line, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
	if (!text) {
		fprintf(stderr, "sbxd: audit: out of memory for event %s\n",
			event ? event : "(null)");
		return;
	}
	/* The newline goes into the same buffer: one line, one write(2). */
	len = strlen(text);
	if (!(buf = realloc(text, len + 2)))
		return;
	text = buf;
	text[len] = '\n';
	text[len + 1] = '\0';
	write_line(text, len + 1);
}
