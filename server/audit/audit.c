/* SPDX-License-Identifier: Apache-2.0 */
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
 * the group callers join to reach the ipc socket by default. A log that was
 * more open than that, or not sbxd's, is moved aside and a new one made: a
 * chmod would not shut out a reader that already holds it open.
 *
 * What callers and sandboxes say (an argv[0], an artifact's path) is cut to
 * AUDIT_STRING_MAX bytes in a line, and each identity's lines are bounded
 * by a byte rate (config quotas.audit_identity_kb_per_s): past it, lines
 * are dropped and counted in an audit_lines_dropped line once the identity
 * is under its rate again, so one caller cannot fill the log's disk.
 * sbx_audit_exempt's lines are never dropped by it: their number is
 * bounded elsewhere (the egress proxy's by each run's and identity's
 * accept budgets and its identity's budget of line bytes), and
 * a record of what left a sandbox must not go missing. */
#include "audit.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
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

#define AUDIT_STRING_MAX 256 /* bytes of a caller's string in a line */
#define AUDIT_IDENTITIES 256 /* identities with a rate bucket at once */
#define AUDIT_BURST_S	 64  /* a bucket holds this many seconds of its rate */

/* An identity's audit bytes: a token bucket. */
struct audit_bucket {
	char identity[80];
	double bytes;	  /* what it may still write now */
	int64_t last_ms;  /* monotonic: when bytes was last refilled */
	uint64_t dropped; /* lines dropped since its last summary */
	uint64_t dropped_bytes;
};

static pthread_mutex_t audit_lock = PTHREAD_MUTEX_INITIALIZER;
static int audit_fd = STDERR_FILENO;
static bool audit_owned;
static unsigned long audit_lost;       /* [audit_lock] since start */
static unsigned long audit_unreported; /* [audit_lock] not yet in the log */
static uint64_t audit_rate;	       /* [audit_lock] bytes/s per identity; 0: none */
static struct audit_bucket audit_buckets[AUDIT_IDENTITIES]; /* [audit_lock] */

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

static bool write_whole(const char *line, size_t len);
static void now_rfc3339(char buf[64]);

/* Who may have opened an existing log: anyone its mode lets in beyond
 * `want`, its group when that is not log_group's, its owner when that is
 * not us, and whoever holds another name of it. */
static const char *too_open(const struct stat *sb, mode_t want, gid_t gid)
{
	if (sb->st_uid != geteuid())
		return "owned by another user";
	if (sb->st_mode & 07777 & ~want)
		return "more open than its mode should be";
	if ((sb->st_mode & 070) && sb->st_gid != gid)
		return "open to another group";
	if (sb->st_nlink != 1)
		return "linked under another name";
	return NULL;
}

/* The log's directory, opened, and *base the log's name in it; or -1. The
 * log is opened relative to this descriptor, so the directory checked is
 * the one used. A directory another user can rename in (one of theirs, or
 * writable by all without the sticky bit) is refused: they could remove
 * or replace the log under sbxd, or point a name in it elsewhere; a
 * reload (SIGHUP) may move the log to any path the config names, so the
 * check is made at every open, not only at start. */
static int open_log_dir(const char *path, const char **base, struct sbx_err *err)
{
	const char *slash = strrchr(path, '/');
	char dir[PATH_MAX];
	struct stat sb;
	_cleanup_close_ int fd = -1;

	*base = slash ? slash + 1 : path;
	if (!**base)
		return sbx_fail(err, "audit log %s: names a directory, not a file", path);
	if ((size_t)(slash ? slash - path : 1) >= sizeof(dir))
		return sbx_fail(err, "audit log %.64s...: path too long", path);
	snprintf(dir, sizeof(dir), "%.*s", slash ? (slash == path ? 1 : (int)(slash - path)) : 1,
		 slash ? path : ".");
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &sb) < 0)
		return sbx_fail_errno(err, "audit log %s: its directory %s", path, dir);
	if ((sb.st_uid != 0 && sb.st_uid != geteuid()) ||
	    ((sb.st_mode & S_IWOTH) && !(sb.st_mode & S_ISVTX)))
		return sbx_fail(err,
				"audit log %s: its directory %s (mode %o, uid %u) lets another "
				"user remove or replace the log: use a directory of root's or "
				"sbxd's user that others cannot write",
				path, dir, (unsigned)(sb.st_mode & 07777), (unsigned)sb.st_uid);
	return sbx_steal_fd(fd);
}

/* An existing log, name in dir, or -1 (ENOENT: there is none). Never
 * follows a link; a FIFO (which would block the open, then take the
 * lines) or any other non-regular file is refused. path is for errors. */
static int open_existing(int dir, const char *name, const char *path, struct stat *sb,
			 struct sbx_err *err)
{
	_cleanup_close_ int fd =
	    openat(dir, name, O_WRONLY | O_APPEND | O_CLOEXEC | O_NOCTTY | O_NOFOLLOW | O_NONBLOCK);

	if (fd < 0 && errno == ENXIO)
		return sbx_fail(err, "audit log %s: not a regular file (a FIFO or socket)", path);
	if (fd < 0)
		return sbx_fail_errno(err, "audit log %s", path);
	if (fstat(fd, sb) < 0)
		return sbx_fail_errno(err, "audit log %s", path);
	if (!S_ISREG(sb->st_mode))
		return sbx_fail(err, "audit log %s: not a regular file", path);
	if (fcntl(fd, F_SETFL, O_APPEND) < 0)
		return sbx_fail_errno(err, "audit log %s", path);
	return sbx_steal_fd(fd);
}

/* The log, owned by us with mode want (0600, or 0640 and group gid). */
static int open_log(const char *path, const char *group, struct sbx_err *err)
{
	mode_t want = group ? 0640 : 0600;
	gid_t gid = (gid_t)-1;
	struct stat sb;
	const char *why, *name;
	_cleanup_close_ int fd = -1, dir = -1;

	if (group && group_id(group, &gid, err) < 0)
		return -1;
	if ((dir = open_log_dir(path, &name, err)) < 0)
		return -1;
	fd = open_existing(dir, name, path, &sb, err);
	if (fd < 0 && err->errnum != ENOENT)
		return -1;
	if (fd >= 0 && (why = too_open(&sb, want, gid))) {
		char aside[NAME_MAX + 1];

		close(sbx_steal_fd(fd));
		snprintf(aside, sizeof(aside), "%.200s.unsafe-%lld", name,
			 (long long)sbx_unix_ms());
		if (renameat(dir, name, dir, aside) < 0)
			return sbx_fail_errno(err, "audit log %s was %s; moving it aside", path,
					      why);
		fprintf(stderr,
			"sbxd: audit log %s was %s (mode %o, uid %u, gid %u): moved aside to %s "
			"(beside it) and started anew\n",
			path, why, (unsigned)(sb.st_mode & 07777), (unsigned)sb.st_uid,
			(unsigned)sb.st_gid, aside);
	}
	if (fd < 0) {
		fd = openat(dir, name,
			    O_WRONLY | O_APPEND | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY |
				O_NOFOLLOW,
			    0600);
		if (fd < 0 || fstat(fd, &sb) < 0)
			return sbx_fail_errno(err, "audit log %s", path);
	}
	/* Ours and no more open than want: a group or mode to add. */
	if (group && sb.st_gid != gid && fchown(fd, (uid_t)-1, gid) < 0)
		return sbx_fail_errno(err, "audit log %s: log_group %s", path, group);
	if ((sb.st_mode & 07777) != want && fchmod(fd, want) < 0)
		return sbx_fail_errno(err, "audit log %s: chmod %o", path, (unsigned)want);
	return sbx_steal_fd(fd);
}

int sbx_audit_open(const char *path, const char *group, struct sbx_err *err)
{
	int fd = STDERR_FILENO;

	if (path && (fd = open_log(path, group, err)) < 0)
		return -1;
	pthread_mutex_lock(&audit_lock);
	if (audit_owned)
		close(audit_fd);
	audit_fd = fd;
	audit_owned = path != NULL;
	pthread_mutex_unlock(&audit_lock);
	return 0;
}

void sbx_audit_set_identity_rate(uint64_t bytes_per_s)
{
	pthread_mutex_lock(&audit_lock);
	audit_rate = bytes_per_s;
	pthread_mutex_unlock(&audit_lock);
}

uint64_t sbx_audit_identity_rate(void)
{
	uint64_t r;

	pthread_mutex_lock(&audit_lock);
	r = audit_rate;
	pthread_mutex_unlock(&audit_lock);
	return r;
}

/* audit_lock held: b's drop count as a line of its own, if it has one. */
static void report_dropped(struct audit_bucket *b)
{
	json_auto_t *note = NULL;
	_cleanup_free_ char *text = NULL;
	char when[64];

	if (!b->dropped)
		return;
	now_rfc3339(when);
	note = json_pack("{s:s, s:s, s:s, s:s, s:I, s:I}", "time", when, "event",
			 "audit_lines_dropped", "identity", b->identity, "quota",
			 "quotas.audit_identity_kb_per_s", "dropped", (json_int_t)b->dropped,
			 "dropped_bytes", (json_int_t)b->dropped_bytes);
	text = note ? json_dumps(note, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
	if (text) {
		size_t len = strlen(text);
		char *buf = realloc(text, len + 2);

		if (!buf)
			return;
		text = buf;
		memcpy(text + len, "\n", 2);
		if (write_whole(text, len + 1))
			b->dropped = b->dropped_bytes = 0;
	}
}

void sbx_audit_close(void)
{
	pthread_mutex_lock(&audit_lock);
	for (size_t i = 0; i < AUDIT_IDENTITIES; i++)
		report_dropped(&audit_buckets[i]);
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

/* audit_lock held: identity's bucket, refilled to now; the least recently
 * used one is taken over (its drop count written first) when none is. */
static struct audit_bucket *bucket(const char *identity)
{
	struct audit_bucket *b = NULL;
	int64_t now = sbx_mono_ms();
	double burst = (double)audit_rate * AUDIT_BURST_S;

	for (size_t i = 0; i < AUDIT_IDENTITIES && !b; i++)
		if (!strcmp(audit_buckets[i].identity, identity))
			b = &audit_buckets[i];
	if (!b) {
		b = &audit_buckets[0];
		for (size_t i = 1; i < AUDIT_IDENTITIES; i++)
			if (audit_buckets[i].last_ms < b->last_ms)
				b = &audit_buckets[i];
		report_dropped(b);
		snprintf(b->identity, sizeof(b->identity), "%s", identity);
		b->dropped = b->dropped_bytes = 0;
		b->bytes = burst;
		b->last_ms = now;
	}
	b->bytes += (double)(now - b->last_ms) * (double)audit_rate / 1000.0;
	if (b->bytes > burst)
		b->bytes = burst;
	b->last_ms = now;
	return b;
}

/* audit_lock held: may identity's line of len bytes go into the log? */
static bool within_rate(const char *identity, size_t len)
{
	struct audit_bucket *b;

	if (!identity || !audit_rate)
		return true;
	b = bucket(identity);
	if (b->bytes < (double)len) {
		b->dropped++;
		b->dropped_bytes += len;
		return false;
	}
	b->bytes -= (double)len;
	report_dropped(b);
	return true;
}

/* audit_lock held: an exempt line of identity's: the count of its lines
 * dropped so far goes in first, as the next line within its rate would
 * write it. Without that, a run whose last line (its teardown) is exempt
 * would leave its final drops unsaid. */
static void exempt_line(const char *identity)
{
	if (!identity || !audit_rate)
		return;
	for (size_t i = 0; i < AUDIT_IDENTITIES; i++)
		if (!strcmp(audit_buckets[i].identity, identity)) {
			report_dropped(&audit_buckets[i]);
			return;
		}
}

/* The line is identity's (NULL: nobody's); exempt: not taken from its rate. */
static void write_line(const char *identity, bool exempt, const char *line, size_t len)
{
	pthread_mutex_lock(&audit_lock);
	if (exempt)
		exempt_line(identity);
	else if (!within_rate(identity, len)) {
		pthread_mutex_unlock(&audit_lock);
		return;
	}
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

/* A string cut to AUDIT_STRING_MAX bytes on a UTF-8 character boundary
 * (jansson's strings are UTF-8), its full length recorded in full[name]. */
static void cut_strings(json_t *v, const char *name, json_t *full, int depth)
{
	const char *key;
	json_t *item;
	char sub[160];
	size_t i;

	if (json_is_string(v) && json_string_length(v) > AUDIT_STRING_MAX) {
		const char *text = json_string_value(v);
		size_t n = AUDIT_STRING_MAX;

		while (n > 0 && ((unsigned char)text[n] & 0xC0) == 0x80)
			n--;
		json_object_set_new(full, name, json_integer((json_int_t)json_string_length(v)));
		json_string_setn(v, text, n);
		return;
	}
	if (depth >= 4) /* no line nests deeper; a value that did is left whole */
		return;
	if (json_is_object(v))
		json_object_foreach(v, key, item)
		{
			snprintf(sub, sizeof(sub), "%s%s%.64s", name, name[0] ? "." : "", key);
			cut_strings(item, sub, full, depth + 1);
		}
	else if (json_is_array(v))
		json_array_foreach(v, i, item)
		{
			snprintf(sub, sizeof(sub), "%.120s[%zu]", name, i);
			cut_strings(item, sub, full, depth + 1);
		}
}

/* The line's length (0: none made). */
static size_t audit_line(const char *event, const char *run_id, const char *identity,
			 const char *policy_digest, void *fields, bool exempt)
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
		json_auto_t *full = json_object();
		const char *key;
		json_t *value;

		if (full) {
			cut_strings(extra, "", full, 0);
			if (json_object_size(full)) {
				json_object_set_new(line, "truncated", json_true());
				json_object_set(line, "full_bytes", full);
			}
		}

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
		return 0;
	}
	/* The newline goes into the same buffer: one line, one write(2). */
	len = strlen(text);
	if (!(buf = realloc(text, len + 2)))
		return 0;
	text = buf;
	text[len] = '\n';
	text[len + 1] = '\0';
	write_line(identity, exempt, text, len + 1);
	return len + 1;
}

void sbx_audit(const char *event, const char *run_id, const char *identity,
	       const char *policy_digest, void *fields)
{
	audit_line(event, run_id, identity, policy_digest, fields, false);
}

size_t sbx_audit_exempt(const char *event, const char *run_id, const char *identity,
			const char *policy_digest, void *fields)
{
	return audit_line(event, run_id, identity, policy_digest, fields, true);
}
