/* SPDX-License-Identifier: Apache-2.0 */
/* The inputs of a run: every regular file under a directory, with its size
 * and sha256, as CreateRun's manifest; then their upload. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "util.h"

#define MAX_INPUTS     10000 /* sandbox.proto's bound on CreateRun.inputs */
#define MAX_PATH_BYTES 1024
#define MAX_DEPTH      64

/* mode: the local file's permission bits, which it keeps in /data (its
 * setuid, setgid and sticky bits are dropped: sbxd refuses them). */
static int add_file(struct manifest *m, const char *rel, const char *local, mode_t mode,
		    struct sbx_err *err)
{
	char hex[65];
	uint64_t size;

	if (m->n >= MAX_INPUTS)
		return sbx_fail(err, "more than %d input files", MAX_INPUTS);
	if (strlen(rel) > MAX_PATH_BYTES)
		return sbx_fail(err, "%s: input paths are at most %d bytes", rel, MAX_PATH_BYTES);
	if (sbx_file_sha256(local, hex, &size, err) < 0)
		return -1;
	Sbx__V1__InputFile **files = realloc(m->files, (m->n + 1) * sizeof(*files));
	if (files)
		m->files = files;
	char **locals = realloc(m->local, (m->n + 1) * sizeof(*locals));
	if (locals)
		m->local = locals;
	Sbx__V1__InputFile *f = malloc(sizeof(*f));
	if (!files || !locals || !f) {
		free(f);
		return sbx_fail(err, "out of memory");
	}
	sbx__v1__input_file__init(f);
	f->path = strdup(rel);
	f->sha256 = strdup(hex);
	f->size = size;
	f->mode = (uint32_t)(mode & 0777);
	m->local[m->n] = strdup(local);
	m->files[m->n++] = f;
	if (!f->path || !f->sha256 || !m->local[m->n - 1])
		return sbx_fail(err, "out of memory");
	return 0;
}

/* Walks dir (an open fd, owned) without following any link. */
static int walk(int dfd, const char *rel, const char *local, int depth, struct manifest *m,
		struct sbx_err *err)
{
	_cleanup_closedir_ DIR *d = fdopendir(dfd);
	struct dirent *e;
	int rc = 0;

	if (!d) {
		sbx_closep(&dfd);
		return sbx_fail_errno(err, "%s", local);
	}
	if (depth > MAX_DEPTH)
		return sbx_fail(err, "%s: nested deeper than %d", local, MAX_DEPTH);
	while (rc == 0 && (errno = 0, e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		_cleanup_free_ char *crel = NULL, *clocal = NULL;
		struct stat st;
		if (asprintf(&crel, "%s%s%s", rel, *rel ? "/" : "", e->d_name) < 0 ||
		    asprintf(&clocal, "%s/%s", local, e->d_name) < 0) {
			rc = sbx_fail(err, "out of memory");
			break;
		}
		if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			rc = sbx_fail_errno(err, "%s", clocal);
		} else if (S_ISREG(st.st_mode)) {
			rc = add_file(m, crel, clocal, st.st_mode, err);
		} else if (S_ISDIR(st.st_mode)) {
			int sub = openat(dirfd(d), e->d_name,
					 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			rc = sub < 0 ? sbx_fail_errno(err, "%s", clocal)
				     : walk(sub, crel, clocal, depth + 1, m, err);
		} else {
			/* As sbx-helper does with /out: links and special files
			 * are named and left out, never followed. */
			fprintf(stderr,
				"sbxctl: %s: not a regular file or directory, not uploaded\n",
				clocal);
		}
	}
	if (rc == 0 && errno)
		rc = sbx_fail_errno(err, "%s", local);
	return rc;
}

static int cmp_index(const void *a, const void *b, void *arg)
{
	Sbx__V1__InputFile **files = arg;
	const size_t *x = a, *y = b;

	return strcmp(files[*x]->path, files[*y]->path);
}

/* Sorted by path, so that the manifest (and the upload order) does not
 * depend on the order of directory entries. */
static int sort(struct manifest *m, struct sbx_err *err)
{
	_cleanup_free_ size_t *idx = malloc((m->n + 1) * sizeof(*idx));
	_cleanup_free_ Sbx__V1__InputFile **files = malloc((m->n + 1) * sizeof(*files));
	_cleanup_free_ char **local = malloc((m->n + 1) * sizeof(*local));

	if (!idx || !files || !local)
		return sbx_fail(err, "out of memory");
	for (size_t i = 0; i < m->n; i++)
		idx[i] = i;
	qsort_r(idx, m->n, sizeof(*idx), cmp_index, m->files);
	for (size_t i = 0; i < m->n; i++) {
		files[i] = m->files[idx[i]];
		local[i] = m->local[idx[i]];
	}
	memcpy(m->files, files, m->n * sizeof(*files));
	memcpy(m->local, local, m->n * sizeof(*local));
	return 0;
}

int manifest_build(const char *dir, struct manifest *m, struct sbx_err *err)
{
	memset(m, 0, sizeof(*m));
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return sbx_fail_errno(err, "--data %s", dir);
	if (walk(fd, "", dir, 0, m, err) < 0 || sort(m, err) < 0) {
		manifest_free(m);
		return -1;
	}
	return 0;
}

void manifest_free(struct manifest *m)
{
	for (size_t i = 0; i < m->n; i++) {
		if (m->files[i])
			sbx__v1__input_file__free_unpacked(m->files[i], NULL);
		if (m->local)
			free(m->local[i]);
	}
	free(m->files);
	free(m->local);
	memset(m, 0, sizeof(*m));
}

/* Up to SBX_IMPORT_BATCH files per ImportInputs (its limit). */
#define SBX_IMPORT_BATCH 256

int put_files(sbx_client *c, const char *run_id, size_t n, const char *const *locals,
	      const char *const *remotes, const char *const *sums, bool no_import,
	      struct sbx_rpc_status *st)
{
	/* On sbxd's own host the bytes go over a unix socket of ours
	 * (ImportInputs); an sbxd older than that, one whose config turned it
	 * off, or one on a kernel that cannot refuse descriptors on that
	 * socket says UNIMPLEMENTED and gets chunks. */
	bool import = !no_import && !strncmp(sbx_client_endpoint(c), "ipc://", 6);
	size_t done = 0;

	for (; import && done < n; done += SBX_IMPORT_BATCH) {
		size_t k = n - done < SBX_IMPORT_BATCH ? n - done : SBX_IMPORT_BATCH;

		if (sbx_import_files(c, run_id, k, locals + done, remotes + done,
				     sums ? sums + done : NULL, st) == 0)
			continue;
		/* sbxd could not reach our socket (another local user can keep
		 * its backlog full): this batch and the rest go in chunks. */
		if (st->code != SBX__V1__CODE__UNIMPLEMENTED && !cli_same_host_unreached(st))
			return sbx_rpc_prefix(st, "ImportInputs");
		import = false;
		break;
	}
	for (size_t i = done; i < n; i++)
		if (sbx_put_file(c, run_id, locals[i], remotes[i], cli_progress, NULL, st) < 0)
			return -1;
	return 0;
}

/* sbxd's answer to a chunk of an input it already has whole. */
static bool already_complete(const struct sbx_rpc_status *st)
{
	return st->code == SBX__V1__CODE__FAILED_PRECONDITION &&
	       strstr(st->err.msg, "is already complete");
}

int manifest_upload(sbx_client *c, const char *run_id, const struct manifest *m, bool no_import,
		    bool repeat, struct sbx_rpc_status *st)
{
	_cleanup_free_ const char **remotes = calloc(m->n + 1, sizeof(*remotes));
	_cleanup_free_ const char **sums = calloc(m->n + 1, sizeof(*sums));

	if (!remotes || !sums)
		return sbx_rpc_fail(st, SBX__V1__CODE__RESOURCE_EXHAUSTED, "out of memory");
	for (size_t i = 0; i < m->n; i++) {
		remotes[i] = m->files[i]->path;
		sums[i] = m->files[i]->sha256;
	}
	if (put_files(c, run_id, m->n, (const char *const *)m->local, remotes, sums, no_import,
		      st) == 0)
		return 0;
	if (!repeat || !already_complete(st))
		return -1;
	/* A repeat of a create that uploaded some or all of them: one by one,
	 * each complete one left as it is. */
	for (size_t i = 0; i < m->n; i++)
		if (sbx_put_file(c, run_id, m->local[i], remotes[i], cli_progress, NULL, st) < 0 &&
		    !already_complete(st))
			return -1;
	sbx_rpc_ok(st);
	return 0;
}
