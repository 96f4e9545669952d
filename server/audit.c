/* The audit log: JSON lines an operator can grep and a program can parse.
 *
 * Every line is built whole in memory and written with one write(2) on an
 * O_APPEND descriptor, under a mutex: lines from different threads never
 * interleave, and a log shared with another writer (logrotate's copytruncate,
 * a second sbxd by mistake) stays line-aligned. A failed write is counted on
 * stderr, never fatal: losing the service over a full disk would be worse. */
#include "audit.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "clock.h"
#include "util.h"

static pthread_mutex_t audit_lock = PTHREAD_MUTEX_INITIALIZER;
static int audit_fd = STDERR_FILENO;
static bool audit_owned;

int sbx_audit_open(const char *path, struct sbx_err *err)
{
	int fd = STDERR_FILENO;

	if (path) {
		fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0640);
		if (fd < 0)
			return sbx_fail_errno(err, "audit log %s", path);
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

static void write_line(const char *line, size_t len)
{
	static unsigned long lost;

	pthread_mutex_lock(&audit_lock);
	while (len > 0) {
		ssize_t n = write(audit_fd, line, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			struct sbx_err err;

			/* stderr may be the log itself; then this is lost too. */
			if (audit_fd != STDERR_FILENO) {
				sbx_fail_errno(&err, "audit log write failed (%lu lost)", ++lost);
				fprintf(stderr, "sbxd: %s\n", err.msg);
			}
			break;
		}
		line += n;
		len -= (size_t)n;
	}
	pthread_mutex_unlock(&audit_lock);
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
