/* SPDX-License-Identifier: Apache-2.0 */
/* The image store (server/images/images_store.c, images_refs.c,
 * images_resolve.c) on a real directory: stage and commit, reuse of a
 * digest already there, refs.json replaced by rename, what a policy's
 * reference resolves to, a run's hold refusing rm, the tree going with its
 * last tag, stages of a killed import cleaned (and a live one left alone),
 * a store directory someone else could write refused, rm --untag and the
 * sweep of unnamed trees, and refs.json parsed once per version and
 * bounded. The trees are
 * written by hand: the store never looks inside them. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "images.h"
#include "images_internal.h"
#include "images_store_private.h"
#include "tree.h"
#include "util.h"

#define D1 "sha256:1111111111111111111111111111111111111111111111111111111111111111"
#define D2 "sha256:2222222222222222222222222222222222222222222222222222222222222222"
#define D3 "sha256:3333333333333333333333333333333333333333333333333333333333333333"
#define D4 "sha256:4444444444444444444444444444444444444444444444444444444444444444"
#define D5 "sha256:5555555555555555555555555555555555555555555555555555555555555555"
#define D9 "sha256:9999999999999999999999999999999999999999999999999999999999999999"
#define H1 "1111111111111111111111111111111111111111111111111111111111111111"
#define H4 "4444444444444444444444444444444444444444444444444444444444444444"
#define H5 "5555555555555555555555555555555555555555555555555555555555555555"

static char top[] = "/tmp/sbx-test-images-store-XXXXXX";
static char store_dir[256];

static bool exists(const char *rel)
{
	char path[512];
	struct stat st;

	snprintf(path, sizeof(path), "%s/%s", store_dir, rel);
	return lstat(path, &st) == 0;
}

static int count_entries(const char *rel)
{
	char path[512];
	_cleanup_closedir_ DIR *d = NULL;
	struct dirent *de;
	int n = 0;

	snprintf(path, sizeof(path), "%s/%s", store_dir, rel);
	if (!(d = opendir(path)))
		return -1;
	while ((de = readdir(d)))
		n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
	return n;
}

static char *read_file(const char *rel)
{
	char path[512];
	_cleanup_fclose_ FILE *f = NULL;
	static char buf[65536];
	size_t n;

	snprintf(path, sizeof(path), "%s/%s", store_dir, rel);
	if (!(f = fopen(path, "r")))
		return NULL; /* the callers check: text && ... */
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	return buf;
}

/* A stage with a small tree (a file with `content`, a directory made
 * read-only, a symlink), committed as name_tag -> digest. */
static int import_fake(struct img_store *s, const char *name_tag, const char *digest,
		       const char *content, bool *reused, struct sbx_err *err)
{
	struct img_stage st;
	_cleanup_close_ int fd = -1;
	json_auto_t *meta =
	    json_pack("{s:s, s:I}", "kind", "rootfs", "size_bytes", (json_int_t)strlen(content));

	if (img_stage_begin(s, &st, err) < 0)
		return -1;
	fd = openat(st.rootfs_fd, "file", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0 || write(fd, content, strlen(content)) != (ssize_t)strlen(content) ||
	    mkdirat(st.rootfs_fd, "ro", 0700) < 0 || symlinkat("file", st.rootfs_fd, "link") < 0 ||
	    fchmodat(st.rootfs_fd, "ro", 0555, 0) < 0) {
		img_stage_abort(s, &st);
		return sbx_fail_errno(err, "writing the fake tree");
	}
	return img_stage_commit(s, &st, digest, name_tag, meta, reused, err);
}

static void test_open(void)
{
	char path[512];
	struct img_store *s = NULL;
	struct sbx_err err;
	struct stat st;

	snprintf(path, sizeof(path), "%s/state/images", top);
	check(img_store_open(path, false, &s, &err) < 0 && err.errnum == ENOENT,
	      "a missing store is not made without create: %s", err.msg);
	check(img_store_open(path, true, &s, &err) == 0, "create makes it (and a missing parent)");
	check(stat(path, &st) == 0 && (st.st_mode & 07777) == 0700, "0700");
	img_store_close(s);
	s = NULL;

	snprintf(path, sizeof(path), "%s/open", top);
	if (mkdir(path, 0700) < 0 || chmod(path, 0770) < 0)
		return;
	check(img_store_open(path, false, &s, &err) < 0 && strstr(err.msg, "lets group or others"),
	      "a group-writable store is refused: %s", err.msg);
	if (chmod(path, 0702) == 0)
		check(img_store_open(path, true, &s, &err) < 0 && strstr(err.msg, "chmod 0700"),
		      "an other-writable one too: %s", err.msg);
	if (geteuid() != 0) {
		/* Owned by root: as this user the store is someone else's. */
		check(img_store_open("/usr", false, &s, &err) < 0 &&
			  strstr(err.msg, "owned by uid 0"),
		      "a store owned by another user is refused: %s", err.msg);
	} else {
		if (chmod(path, 0700) == 0 && chown(path, 65534, 65534) == 0)
			check(img_store_open(path, false, &s, &err) < 0 &&
				  strstr(err.msg, "owned by uid 65534"),
			      "root refuses a store owned by another user: %s", err.msg);
	}
	img_store_close(s);
}

static void test_commit_and_reuse(struct img_store *s)
{
	struct sbx_err err;
	bool reused = true;
	char *text;

	check(import_fake(s, "a:1", D1, "one", &reused, &err) == 0 && !reused,
	      "a stage commits as a new tree: %s", reused ? "reused" : err.msg);
	check(img_store_has(s, D1) && exists("sha256/" H1) && !exists("sha256/x"),
	      "the digest is in the store");
	text = read_file("sha256/" H1 "/rootfs/file");
	check(text && !strcmp(text, "one"), "with the stage's rootfs as its rootfs");
	text = read_file("sha256/" H1 "/image.json");
	check(text && strstr(text, "\"digest\": \"" D1 "\"") && strstr(text, "imported_unix_ms") &&
		  strstr(text, "\"kind\": \"rootfs\""),
	      "image.json holds the meta and the store's fields");
	check(!exists("sha256/" H1 "/scratch"),
	      "the stage's scratch directory went before the commit");
	check(count_entries("tmp") == 0, "nothing stays in tmp/");
	text = read_file("refs.json");
	check(text && strstr(text, "\"a:1\": \"" D1 "\""), "refs.json names a:1");

	check(import_fake(s, "a:2", D1, "one again", &reused, &err) == 0 && reused,
	      "the same digest again is reused: %s", reused ? "" : err.msg);
	check(count_entries("sha256") == 1 && count_entries("tmp") == 0,
	      "one tree, and the discarded stage is gone");
	text = read_file("sha256/" H1 "/rootfs/file");
	check(text && !strcmp(text, "one"), "the first tree is kept as it was");
	check(img_store_has(s, D1) && !img_store_has(s, D2) && !img_store_has(s, "sha256:zz"),
	      "img_store_has");
	check(img_store_tag(s, "a:3", D9, &err) < 0 && strstr(err.msg, "not in the image store"),
	      "a tag cannot name a digest the store lacks: %s", err.msg);
	check(img_store_tag(s, "a:3", D1, &err) == 0, "but one it has: %s", err.msg);
}

static void test_refs_atomic(struct img_store *s)
{
	char path[512], before[4096] = "";
	_cleanup_close_ int old_fd = -1;
	struct sbx_err err;
	struct stat a, b;
	bool reused;
	ssize_t n;
	char *now;

	snprintf(path, sizeof(path), "%s/refs.json", store_dir);
	old_fd = open(path, O_RDONLY | O_CLOEXEC);
	if (old_fd < 0 || fstat(old_fd, &a) < 0)
		return;
	check(import_fake(s, "b:1", D2, "two", &reused, &err) == 0 && !reused, "b:1 commits: %s",
	      err.msg);
	n = pread(old_fd, before, sizeof(before) - 1, 0);
	before[n > 0 ? n : 0] = '\0';
	now = read_file("refs.json");
	check(stat(path, &b) == 0 && a.st_ino != b.st_ino,
	      "refs.json is replaced by another file (a rename), not rewritten in place");
	check(strstr(before, "\"a:1\"") && !strstr(before, "\"b:1\"") && now &&
		  strstr(now, "\"b:1\": \"" D2 "\"") && strstr(now, "\"a:1\""),
	      "a reader of the old one reads it whole; the new one has both");
	check(!exists("refs.json.new"), "no temporary file stays");
}

static void test_resolve(struct img_store *s)
{
	struct img_hold h = IMG_HOLD_INIT;
	struct sbx_err err;
	char want[512];
	const char *got;
	struct stat st;
	int rc;

	rc = img_store_resolve(s, "a:1@" D1, false, &h, &err);
	snprintf(want, sizeof(want), "%s/sha256/" H1 "/rootfs", store_dir);
	/* (gcc's format check cannot tell that rc == 0 means a rootfs) */
	got = h.rootfs ? h.rootfs : "(none)";
	check(rc == 0 && h.lock_fd >= 0 && h.rootfs && !strcmp(h.rootfs, want) &&
		  !strcmp(h.digest, D1) && !strcmp(h.pinned, "a:1@" D1),
	      "a pinned reference the store has resolves to its tree: %s", rc ? err.msg : got);
	/* The identity sbx-helper --image-root-id checks: the tree's own. */
	check(rc == 0 && lstat(want, &st) == 0 && h.rootfs_dev == st.st_dev &&
		  h.rootfs_ino == st.st_ino,
	      "the hold records the rootfs directory's st_dev and st_ino");
	img_hold_release(&h);
	check(h.lock_fd == -1 && !h.rootfs, "release empties the hold");

	rc = img_store_resolve(s, "a:1@" D9, false, &h, &err);
	check(rc == IMG_REFUSED && strstr(err.msg, "a:1@" D9) && strstr(err.msg, D1) &&
		  strstr(err.msg, "not in this host's image store"),
	      "a digest not in the store is refused (naming the store's a:1 too): %s", err.msg);
	rc = img_store_resolve(s, "zz:9@" D9, false, &h, &err);
	check(rc == IMG_REFUSED && strstr(err.msg, "not in this host's image store"),
	      "so is an unknown name: %s", err.msg);
	rc = img_store_resolve(s, "a:1@" D2, false, &h, &err);
	check(rc == IMG_REFUSED && strstr(err.msg, "a:1@" D2) &&
		  strstr(err.msg, "the store's a:1 is " D1) && strstr(err.msg, "re-import"),
	      "a tag pointing elsewhere is refused, naming both digests: %s", err.msg);
	rc = img_store_resolve(s, "a:1", false, &h, &err);
	check(rc == IMG_REFUSED && strstr(err.msg, "unpinned") && strstr(err.msg, "a:1@" D1),
	      "an unpinned reference is refused (the message gives the pin): %s", err.msg);
	rc = img_store_resolve(s, "a:1", true, &h, &err);
	check(rc == 0 && !strcmp(h.pinned, "a:1@" D1) && !strcmp(h.digest, D1),
	      "and allowed with allow_unpinned, resolved to its digest: %s", rc ? err.msg : "");
	img_hold_release(&h);
	rc = img_store_resolve(s, "zz:9", true, &h, &err);
	check(rc == IMG_REFUSED, "an unpinned unknown one is refused: %s", err.msg);
	rc = img_store_resolve(s, "Bad:ref", true, &h, &err);
	check(rc == IMG_REFUSED && h.lock_fd == -1, "a malformed one too: %s", err.msg);
}

static void test_hold_and_rm(struct img_store *s)
{
	struct img_hold h = IMG_HOLD_INIT;
	_cleanup_free_ char *refs_before = NULL;
	char *text;
	struct sbx_err err;
	char **pins = NULL;
	size_t n = 0, total = 0;
	int rc;

	check(img_store_pins(s, 2, &pins, &n, &total, &err) == 0 && total == 4 && n == 2 &&
		  !strcmp(pins[0], "a:1@" D1) && !strcmp(pins[1], "a:2@" D1),
	      "pins: sorted, the first max, and how many there are");
	img_pins_free(pins, n);

	check(img_store_resolve(s, "b:1@" D2, false, &h, &err) == 0, "a run holds b:1: %s",
	      err.msg);
	text = read_file("refs.json");
	refs_before = text ? strdup(text) : NULL;
	rc = img_store_rm(s, "b:1", &err);
	check(rc == IMG_REFUSED && strstr(err.msg, "in use by a live run") &&
		  strstr(err.msg, "nothing was removed"),
	      "rm of a held image is refused: %s", err.msg);
	rc = img_store_rm(s, D2, &err);
	check(rc == IMG_REFUSED, "by its digest too: %s", err.msg);
	text = read_file("refs.json");
	check(refs_before && text && !strcmp(refs_before, text) && img_store_has(s, D2),
	      "and nothing changed");
	img_hold_release(&h);
	check(img_store_rm(s, "b:1", &err) == 0, "released, rm removes it: %s", err.msg);
	text = read_file("refs.json");
	check(!img_store_has(s, D2) && text && !strstr(text, "b:1") && count_entries("tmp") == 0,
	      "its last tag gone, the tree is gone, nothing left in tmp/");

	check(img_store_rm(s, "a:2", &err) == 0 && img_store_has(s, D1),
	      "rm of one tag of several keeps the tree: %s", err.msg);
	check(img_store_rm(s, "a:2", &err) < 0 && strstr(err.msg, "not in the image store"),
	      "rm of a tag not there: %s", err.msg);
	check(img_store_rm(s, "a:1@" D2, &err) < 0 && strstr(err.msg, "the store's a:1 is " D1) &&
		  img_store_has(s, D1),
	      "rm of a pin the tag does not match is refused: %s", err.msg);
	check(img_store_rm(s, D9, &err) < 0 && strstr(err.msg, "not in the image store"),
	      "rm of an unknown digest: %s", err.msg);
}

static void test_retag_and_list(struct img_store *s)
{
	struct img_hold h = IMG_HOLD_INIT;
	json_auto_t *list = NULL, *doc = NULL;
	struct sbx_err err;
	bool reused;

	/* a:1 and a:3 name D1. a:1 -> D2, a:3 -> D3: D1 untagged and unheld. */
	check(import_fake(s, "a:1", D2, "two", &reused, &err) == 0, "a:1 now D2: %s", err.msg);
	check(img_store_has(s, D1), "D1 stays while a:3 names it");
	check(import_fake(s, "a:3", D3, "three", &reused, &err) == 0, "a:3 now D3: %s", err.msg);
	check(!img_store_has(s, D1), "a tree no tag names any more goes");

	check(img_store_resolve(s, "a:3@" D3, false, &h, &err) == 0, "a run holds D3");
	check(img_store_tag(s, "a:3", D2, &err) == 0, "retagging a held image's tag: %s", err.msg);
	check(img_store_has(s, D3), "keeps the held tree, untagged");
	check(img_store_list(s, &list, &err) == 0 && json_array_size(list) == 3,
	      "list: a:1, a:3 and the untagged tree: %s", err.msg);
	if (json_array_size(list) == 3) /* else the check above failed */
		check(
		    !strcmp(json_string_value(json_object_get(json_array_get(list, 0), "ref")),
			    "a:1@" D2) &&
			!strcmp(json_string_value(json_object_get(json_array_get(list, 2), "ref")),
				D3) &&
			json_integer_value(
			    json_object_get(json_array_get(list, 0), "size_bytes")) == 3 &&
			!strcmp(json_string_value(json_object_get(json_array_get(list, 0), "kind")),
				"rootfs"),
		    "sorted, tagged first, with size and kind");
	img_hold_release(&h);
	check(img_store_inspect(s, "a:1", &doc, &err) == 0 &&
		  json_array_size(json_object_get(doc, "refs")) == 2 &&
		  !strcmp(json_string_value(json_object_get(doc, "digest")), D2),
	      "inspect shows the digest and every tag naming it: %s", err.msg);
	json_decref(doc);
	doc = NULL;
	check(img_store_inspect(s, "a:1@" D3, &doc, &err) < 0 && strstr(err.msg, D2),
	      "inspect of a wrong pin says what the tag is: %s", err.msg);
	check(img_store_rm(s, D3, &err) == 0 && !img_store_has(s, D3),
	      "the untagged tree is removed by its digest: %s", err.msg);
}

/* sbxd's threads share one struct img_store: one holder's unlock must not
 * release another's lock. */
static void test_lock_per_holder(struct img_store *s)
{
	char path[512];
	struct sbx_err err;
	int a, b, probe;

	snprintf(path, sizeof(path), "%s/lock", store_dir);
	a = img_store_lock(s, LOCK_SH, &err);
	b = img_store_lock(s, LOCK_SH, &err);
	img_store_unlock(a);
	probe = open(path, O_RDONLY | O_CLOEXEC);
	check(a >= 0 && b >= 0 && probe >= 0 && flock(probe, LOCK_EX | LOCK_NB) < 0 &&
		  errno == EWOULDBLOCK,
	      "a second holder's shared lock outlives the first one's unlock");
	img_store_unlock(b);
	check(probe >= 0 && flock(probe, LOCK_EX | LOCK_NB) == 0, "and goes with its own");
	if (probe >= 0)
		close(probe);
}

/* A child that stages and stays, and one that stages and is SIGKILLed:
 * the next stage_begin removes the second's and leaves the first's. */
static void test_stale(struct img_store *s)
{
	int ready[2], hold[2];
	char live_name[4 + sizeof(((struct img_stage *)0)->name)] = "tmp/", ours[128];
	pid_t dead, live;
	struct img_stage st;
	struct sbx_err err;
	int status;

	if (pipe(ready) < 0 || pipe(hold) < 0)
		return;
	live = fork();
	if (live == 0) {
		struct img_store *own = NULL;
		char c;

		close(ready[0]);
		close(hold[1]);
		if (img_store_open(store_dir, false, &own, &err) < 0 ||
		    img_stage_begin(own, &st, &err) < 0 ||
		    write(ready[1], st.name, sizeof(st.name)) != sizeof(st.name))
			_exit(1);
		if (read(hold[0], &c, 1) < 0) /* until the parent closes it */
			_exit(1);
		img_stage_abort(own, &st);
		img_store_close(own);
		_exit(0);
	}
	close(ready[1]);
	close(hold[0]);
	check(read(ready[0], live_name + 4, sizeof(st.name)) == sizeof(st.name),
	      "a live stage is made");
	dead = fork();
	if (dead == 0) {
		struct img_store *own = NULL;

		if (img_store_open(store_dir, false, &own, &err) == 0 &&
		    img_stage_begin(own, &st, &err) == 0 && mkdirat(st.rootfs_fd, "half", 0700) < 0)
			_exit(1);
		raise(SIGKILL);
		_exit(1);
	}
	waitpid(dead, &status, 0);
	check(WIFSIGNALED(status) && count_entries("tmp") == 2,
	      "a killed import's stage is left in tmp/ beside the live one");
	check(img_stage_begin(s, &st, &err) == 0, "the next stage begins: %s", err.msg);
	snprintf(ours, sizeof(ours), "tmp/%s", st.name);
	check(count_entries("tmp") == 2 && exists(live_name) && exists(ours),
	      "the killed one's stage went; the live one and ours stay");
	img_stage_abort(s, &st);
	close(hold[1]);
	waitpid(live, &status, 0);
	check(WIFEXITED(status) && WEXITSTATUS(status) == 0 && count_entries("tmp") == 0,
	      "aborted stages are removed");
	close(ready[0]);
}

/* rm --untag of a held image: its tags go at once (no new run), the run's
 * hold keeps the tree, and the first import or rm after the hold is gone
 * sweeps it; a tree a crash left unnamed goes the same way, and nothing
 * goes while refs.json cannot be read. */
static void test_untag_and_sweep(struct img_store *s)
{
	struct img_hold h = IMG_HOLD_INIT, h2 = IMG_HOLD_INIT;
	char kept[IMG_DIGEST_LEN + 1], path[512], *text;
	struct img_stage st;
	struct sbx_err err;
	bool reused;
	int rc;

	check(import_fake(s, "u:1", D4, "four", &reused, &err) == 0 &&
		  import_fake(s, "u:2", D4, "four", &reused, &err) == 0,
	      "u:1 and u:2 name D4: %s", err.msg);
	check(img_store_resolve(s, "u:1@" D4, false, &h, &err) == 0, "a run holds D4: %s", err.msg);
	rc = img_store_rm(s, "u:1", &err);
	check(rc == 0 && img_store_has(s, D4), "rm of one of two tags needs no --untag: %s",
	      err.msg);
	rc = img_store_rm(s, "u:2", &err);
	check(rc == IMG_REFUSED && strstr(err.msg, "in use by a live run") &&
		  strstr(err.msg, "rm --untag u:2"),
	      "rm of its last tag is refused, naming --untag: %s", err.msg);
	rc = img_store_untag(s, "u:2", kept, &err);
	text = read_file("refs.json");
	check(rc == 0 && !strcmp(kept, D4) && text && !strstr(text, "u:2") &&
		  exists("sha256/" H4 "/rootfs/file"),
	      "--untag removes the tag, keeps the held tree and says so: %s", rc ? err.msg : kept);
	rc = img_store_resolve(s, "u:2@" D4, false, &h2, &err);
	check(rc == IMG_REFUSED && strstr(err.msg, "not in this host's image store"),
	      "no new run takes it: %s", err.msg);
	check(img_stage_begin(s, &st, &err) == 0, "an import begins: %s", err.msg);
	img_stage_abort(s, &st);
	check(exists("sha256/" H4) && h.lock_fd >= 0, "and passes the held tree by");
	img_hold_release(&h);
	check(exists("sha256/" H4), "the hold's end alone removes nothing");
	check(img_stage_begin(s, &st, &err) == 0, "the next import begins: %s", err.msg);
	img_stage_abort(s, &st);
	check(!exists("sha256/" H4) && count_entries("tmp") == 0,
	      "and removes the unnamed tree nobody holds, through tmp/");

	check(import_fake(s, "u:3", D5, "five", &reused, &err) == 0, "u:3: %s", err.msg);
	rc = img_store_untag(s, "u:3", kept, &err);
	check(rc == 0 && !kept[0] && !img_store_has(s, D5),
	      "--untag of an image nobody holds removes the tree at once: %s", err.msg);

	/* A crash between a commit's rename and its tag: a tree no tag names. */
	snprintf(path, sizeof(path), "%s/sha256/" H5, store_dir);
	check(mkdir(path, 0700) == 0, "an unnamed tree made by hand");
	snprintf(path, sizeof(path), "%s/refs.json", store_dir);
	text = read_file("refs.json");
	{
		_cleanup_free_ char *good = text ? strdup(text) : NULL;
		_cleanup_fclose_ FILE *f = fopen(path, "w");

		/* refs.json damaged: the sweep cannot tell what is named. */
		if (f && fputs("{", f) >= 0 && fflush(f) == 0)
			check(img_store_rm(s, "zz:1", &err) < 0 && strstr(err.msg, "refs.json") &&
				  exists("sha256/" H5),
			      "a damaged refs.json fails rm and removes no tree: %s", err.msg);
		if (f && good && freopen(path, "w", f) && fputs(good, f) >= 0)
			fflush(f);
	}
	check(img_store_rm(s, "zz:1", &err) < 0 && strstr(err.msg, "not in the image store") &&
		  !exists("sha256/" H5),
	      "any rm sweeps it (even one that finds nothing to remove): %s", err.msg);
}

/* sbxd parses refs.json once per version of the file: Health and
 * CreateRun reuse the parsed copy until the file is replaced. A file past
 * the bound is refused, and so is a write that would pass it. */
static void test_refs_cache(struct img_store *s)
{
	char **pins = NULL, path[512];
	size_t n = 0, total = 0;
	json_auto_t *big = NULL;
	struct sbx_err err;
	char *text;
	int rc;

	check(img_store_pins(s, 10, &pins, &n, &total, &err) == 0, "pins: %s", err.msg);
	img_pins_free(pins, n);
	/* A mark in the kept copy: a parse would not have it. */
	json_object_set_new(s->refs.named, "test-mark", json_true());
	check(img_store_pins(s, 10, &pins, &n, &total, &err) == 0 &&
		  json_object_get(s->refs.named, "test-mark"),
	      "an unchanged refs.json is not parsed again");
	img_pins_free(pins, n);
	check(img_store_tag(s, "c:1", D2, &err) == 0, "c:1 tagged: %s", err.msg);
	check(img_store_pins(s, 1000, &pins, &n, &total, &err) == 0 &&
		  !json_object_get(s->refs.named, "test-mark") && total == n && n >= 1 &&
		  strstr(pins[n - 1], "c:1@" D2) == pins[n - 1],
	      "a replaced one is: the new tag shows, sorted last");
	img_pins_free(pins, n);

	/* A write that would pass 4 MiB: refused, the file as it was. */
	text = read_file("refs.json");
	{
		_cleanup_free_ char *was = text ? strdup(text) : NULL;

		big = json_object();
		for (int i = 0; big && i < 50000; i++) {
			char key[64];

			snprintf(key, sizeof(key), "big%06d:v1", i);
			json_object_set_new(big, key, json_string(D1));
		}
		rc = img_refs_write(s, big, &err);
		text = read_file("refs.json");
		check(rc < 0 && strstr(err.msg, "more than the store's bound of 4194304 bytes") &&
			  was && text && !strcmp(was, text),
		      "a refs.json past the bound is not written: %s", err.msg);
	}
	/* One written past it by hand: refused, without parsing it. */
	snprintf(path, sizeof(path), "%s/refs.json", store_dir);
	{
		_cleanup_fclose_ FILE *f = fopen(path, "r+");

		if (f && fseek(f, (4 << 20) + 1, SEEK_SET) == 0 && fputc(' ', f) != EOF)
			fflush(f);
	}
	rc = img_store_pins(s, 10, &pins, &n, &total, &err);
	check(rc < 0 && strstr(err.msg, "more than the store's bound") && !pins,
	      "sbxd refuses a refs.json past the bound: %s", err.msg);
	check(truncate(path, (off_t)strlen(read_file("refs.json"))) == 0 &&
		  img_store_pins(s, 10, &pins, &n, &total, &err) == 0,
	      "and reads it again once it is back: %s", err.msg);
	img_pins_free(pins, n);
	check(img_store_rm(s, "c:1", &err) == 0, "c:1 removed: %s", err.msg);
}

int main(void)
{
	struct img_store *s = NULL;
	struct sbx_err err;

	if (!mkdtemp(top))
		return 2;
	snprintf(store_dir, sizeof(store_dir), "%s/store", top);
	test_open();
	if (!check(img_store_open(store_dir, true, &s, &err) == 0, "open: %s", err.msg))
		return check_done();
	test_commit_and_reuse(s);
	test_refs_atomic(s);
	test_resolve(s);
	test_hold_and_rm(s);
	test_retag_and_list(s);
	test_stale(s);
	test_lock_per_holder(s);
	test_untag_and_sweep(s);
	test_refs_cache(s);
	img_store_close(s);
	{
		_cleanup_close_ int tmp = open("/tmp", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

		if (tmp < 0 || sbx_remove_tree_at(tmp, strrchr(top, '/') + 1, &err) < 0)
			fprintf(stderr, "leaving %s\n", top);
	}
	return check_done();
}
