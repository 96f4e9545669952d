/* SPDX-License-Identifier: Apache-2.0 */
/* Files in and out of a run: sha256, chunked upload and verified download. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "client_internal.h"
#include "text.h"
#include "tree.h"
#include "util.h"

static void md_freep(EVP_MD_CTX **md)
{
	EVP_MD_CTX_free(*md);
}

static void sbx_fetch_resp_freep(Sbx__V1__FetchArtifactResponse **r)
{
	if (*r)
		sbx__v1__fetch_artifact_response__free_unpacked(*r, NULL);
}

static EVP_MD_CTX *sha256_new(void)
{
	/* openssl.cnf configures nothing a sha256 needs, and reading it costs
	 * milliseconds per process. */
	OPENSSL_init_crypto(OPENSSL_INIT_NO_LOAD_CONFIG, NULL);
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	if (md && !EVP_DigestInit_ex(md, EVP_sha256(), NULL)) {
		EVP_MD_CTX_free(md);
		return NULL;
	}
	return md;
}

static int sha256_hex(EVP_MD_CTX *md, char hex[65])
{
	unsigned char out[EVP_MAX_MD_SIZE];
	unsigned int n = 0;

	if (!EVP_DigestFinal_ex(md, out, &n) || n != 32)
		return -1;
	sbx_hex(out, 32, hex);
	return 0;
}

static ssize_t read_full(int fd, uint8_t *buf, size_t len)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = read(fd, buf + got, len - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		if (n == 0)
			break;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

static int write_full(int fd, const uint8_t *buf, size_t len)
{
	while (len) {
		ssize_t n = write(fd, buf, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

int sbx_file_sha256(const char *path, char hex[65], uint64_t *size, struct sbx_err *err)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	_cleanup_(md_freep) EVP_MD_CTX *md = NULL;
	_cleanup_free_ uint8_t *buf = NULL;
	struct stat stb;
	uint64_t total = 0;
	ssize_t n;

	if (fd < 0 || fstat(fd, &stb) < 0)
		return sbx_fail_errno(err, "%s", path);
	if (!S_ISREG(stb.st_mode))
		return sbx_fail(err, "%s: not a regular file", path);
	if (!(md = sha256_new()) || !(buf = malloc(SBX_CHUNK_BYTES)))
		return sbx_fail(err, "%s: out of memory", path);
	while ((n = read_full(fd, buf, SBX_CHUNK_BYTES)) > 0) {
		if (!EVP_DigestUpdate(md, buf, (size_t)n))
			return sbx_fail(err, "%s: sha256 failed", path);
		total += (uint64_t)n;
	}
	if (n < 0)
		return sbx_fail_errno(err, "%s", path);
	if (sha256_hex(md, hex) < 0)
		return sbx_fail(err, "%s: sha256 failed", path);
	if (size)
		*size = total;
	return 0;
}

int sbx_put_file(sbx_client *c, const char *run_id, const char *local_path, const char *remote_path,
		 sbx_progress_fn progress, void *progress_arg, struct sbx_rpc_status *st)
{
	_cleanup_close_ int fd = open(local_path, O_RDONLY | O_CLOEXEC);
	_cleanup_free_ uint8_t *buf = NULL;
	struct stat stb;
	uint64_t offset = 0;

	if (fd < 0 || fstat(fd, &stb) < 0)
		return sbx_rpc_fail_errno(st, SBX__V1__CODE__INVALID_ARGUMENT, "%s", local_path);
	if (!S_ISREG(stb.st_mode))
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT, "%s: not a regular file",
				    local_path);
	if (!(buf = malloc(SBX_CHUNK_BYTES)))
		return sbx_rpc_fail(st, SBX__V1__CODE__RESOURCE_EXHAUSTED, "out of memory");
	/* The size the manifest was made with: a file that shrinks meanwhile is
	 * an error here, one that grows is sent as it was (and sbxd's sha256
	 * check says whether that was still the same file). */
	uint64_t size = (uint64_t)stb.st_size;
	/* The first chunk declares the file (size, sha256, mode bits), so a
	 * file the run's manifest did not name can still be added between
	 * execs; for a declared one the server checks they repeat it. */
	char sha256[65];
	struct sbx_err err;
	if (sbx_file_sha256(local_path, sha256, NULL, &err) < 0)
		return sbx_rpc_fail(st, SBX__V1__CODE__INVALID_ARGUMENT, "%s", err.msg);
	do {
		size_t want =
		    size - offset < SBX_CHUNK_BYTES ? (size_t)(size - offset) : SBX_CHUNK_BYTES;
		ssize_t n = read_full(fd, buf, want);
		if (n < 0)
			return sbx_rpc_fail_errno(st, SBX__V1__CODE__INVALID_ARGUMENT, "%s",
						  local_path);
		if ((size_t)n != want)
			return sbx_rpc_fail(st, SBX__V1__CODE__ABORTED,
					    "%s: shrank while being uploaded", local_path);
		Sbx__V1__PutInputRequest req = SBX__V1__PUT_INPUT_REQUEST__INIT;
		req.run_id = (char *)run_id;
		req.path = (char *)remote_path;
		req.offset = offset;
		req.data.data = buf;
		req.data.len = want;
		req.last = offset + want == size;
		if (offset == 0) {
			req.size = size;
			req.sha256 = sha256;
			req.mode = (uint32_t)(stb.st_mode & 0777);
		}
		Sbx__V1__PutInputResponse *r = sbx_put_input(c, &req, st);
		if (!r)
			return sbx_rpc_prefix(st, "PutInput %s at %llu", remote_path,
					      (unsigned long long)offset);
		bool bad = r->received != offset + want || (req.last && !r->complete);
		uint64_t received = r->received;
		sbx__v1__put_input_response__free_unpacked(r, NULL);
		if (bad)
			return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL,
					    "PutInput %s: server has %llu bytes, expected %llu%s",
					    remote_path, (unsigned long long)received,
					    (unsigned long long)(offset + want),
					    req.last ? " and the file complete" : "");
		offset += want;
		if (progress)
			progress(remote_path, offset, size, progress_arg);
	} while (offset < size);
	return 0;
}

/* A file being written under a temporary name: removed on scope exit
 * unless renamed into place (then path is NULL). */
struct temp_file {
	char *path;
	int fd;
};

static void temp_file_freep(struct temp_file *t)
{
	sbx_closep(&t->fd);
	if (t->path)
		unlink(t->path);
	free(t->path);
}

/* A temporary file next to the destination, so that the final rename is
 * atomic; created with 0666 so that the umask decides as for any new file. */
static int open_temp(const char *dest, struct temp_file *t, struct sbx_rpc_status *st)
{
	_cleanup_free_ char *copy = strdup(dest);
	char id[33];

	if (!copy)
		return sbx_rpc_fail(st, SBX__V1__CODE__RESOURCE_EXHAUSTED, "out of memory");
	const char *dir = dirname(copy);
	for (int tries = 0; tries < 16; tries++) {
		if (sbx_request_id(id, &st->err) < 0)
			return sbx_rpc_code(st, SBX__V1__CODE__INTERNAL);
		id[12] = '\0';
		_cleanup_free_ char *path = NULL;
		if (asprintf(&path, "%s/.sbx-fetch-%s.tmp", dir, id) < 0)
			return sbx_rpc_fail(st, SBX__V1__CODE__RESOURCE_EXHAUSTED, "out of memory");
		t->fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666);
		if (t->fd >= 0) {
			t->path = sbx_steal_ptr(path);
			return 0;
		}
		if (errno != EEXIST)
			return sbx_rpc_fail_errno(st, SBX__V1__CODE__INVALID_ARGUMENT, "%s", dir);
	}
	return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "%s: no free temporary name", dir);
}

/* A file that changed under a fetch was changed by an exec of the run (no
 * other process can write /out): not corruption, so ABORTED, and fetching
 * it again once the exec has ended gives the final file. */
#define CHANGED_BY_AN_EXEC                                                                         \
	"an exec is running, so the file can change and digests are not final; fetch it "          \
	"again when the run's execs have ended"

static int fetch_into(sbx_client *c, const char *run_id, const char *remote_path, int fd,
		      const char *expect_sha256, bool expect_live, sbx_progress_fn progress,
		      void *progress_arg, struct sbx_fetch_info *info, struct sbx_rpc_status *st)
{
	_cleanup_(md_freep) EVP_MD_CTX *md = sha256_new();
	uint64_t offset = 0, size = 0;
	char got[65];
	/* The path may come from a sandbox's listing: escaped in messages,
	 * and short enough to leave room for the rest. */
	char name[256];

	sbx_escape(name, sizeof(name), remote_path);

	if (!md)
		return sbx_rpc_fail(st, SBX__V1__CODE__RESOURCE_EXHAUSTED, "out of memory");
	for (;;) {
		Sbx__V1__FetchArtifactRequest req = SBX__V1__FETCH_ARTIFACT_REQUEST__INIT;
		req.run_id = (char *)run_id;
		req.path = (char *)remote_path;
		req.offset = offset;
		req.max_bytes = SBX_CHUNK_BYTES;
		_cleanup_(sbx_fetch_resp_freep) Sbx__V1__FetchArtifactResponse *r =
		    sbx_fetch_artifact(c, &req, st);
		if (!r)
			return sbx_rpc_prefix(st, "FetchArtifact %s at %llu", name,
					      (unsigned long long)offset);
		if (offset == 0)
			size = r->size;
		if (r->data.len > SBX_CHUNK_BYTES ||
		    (r->size == size && offset + r->data.len > size))
			return sbx_rpc_fail(st, SBX__V1__CODE__DATA_LOSS,
					    "%s: the server sent %zu bytes at %llu of %llu", name,
					    r->data.len, (unsigned long long)offset,
					    (unsigned long long)size);
		if (r->size != size)
			return sbx_rpc_fail(st, SBX__V1__CODE__ABORTED,
					    "%s: changed while being fetched (size %llu, then %llu "
					    "at %llu): " CHANGED_BY_AN_EXEC,
					    name, (unsigned long long)size,
					    (unsigned long long)r->size,
					    (unsigned long long)offset);
		if (r->data.len && (write_full(fd, r->data.data, r->data.len) < 0))
			return sbx_rpc_fail_errno(st, SBX__V1__CODE__INTERNAL, "writing %s", name);
		if (!EVP_DigestUpdate(md, r->data.data, r->data.len))
			return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "sha256 failed");
		offset += r->data.len;
		if (progress && r->data.len)
			progress(remote_path, offset, size, progress_arg);
		if (!r->eof) {
			if (!r->data.len)
				return sbx_rpc_fail(st, SBX__V1__CODE__DATA_LOSS,
						    "%s: the server sent no bytes at %llu of %llu",
						    name, (unsigned long long)offset,
						    (unsigned long long)size);
			continue;
		}
		if (offset != size)
			return sbx_rpc_fail(
			    st, r->live ? SBX__V1__CODE__ABORTED : SBX__V1__CODE__DATA_LOSS,
			    "%s: got %llu bytes of %llu%s", name, (unsigned long long)offset,
			    (unsigned long long)size, r->live ? ": " CHANGED_BY_AN_EXEC : "");
		if (sha256_hex(md, got) < 0)
			return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "sha256 failed");
		/* sbxd hashes the file afresh when it changed between chunks:
		 * then the bytes received are of no one version of it. */
		if (!r->sha256 || strcmp(r->sha256, got)) {
			if (r->live && r->sha256 && *r->sha256)
				return sbx_rpc_fail(
				    st, SBX__V1__CODE__ABORTED,
				    "%s: changed while being fetched (the bytes "
				    "received hash to %s, the file now to %s): " CHANGED_BY_AN_EXEC,
				    name, got, r->sha256);
			return sbx_rpc_fail(st, SBX__V1__CODE__DATA_LOSS,
					    "%s: sha256 of the bytes received is %s, the server "
					    "says %s",
					    name, got,
					    r->sha256 && *r->sha256 ? r->sha256 : "nothing");
		}
		if (expect_sha256 && strcmp(expect_sha256, got)) {
			if (r->live || expect_live)
				return sbx_rpc_fail(st, SBX__V1__CODE__ABORTED,
						    "%s: changed since it was listed (sha256 %s, "
						    "listed as %s): " CHANGED_BY_AN_EXEC,
						    name, got, expect_sha256);
			return sbx_rpc_fail(st, SBX__V1__CODE__DATA_LOSS,
					    "%s: sha256 of the bytes received is %s, expected %s",
					    name, got, expect_sha256);
		}
		if (info) {
			info->size = size;
			memcpy(info->sha256, got, sizeof(got));
			info->live = r->live;
		}
		return 0;
	}
}

int sbx_fetch_fd(sbx_client *c, const char *run_id, const char *remote_path, int fd,
		 sbx_progress_fn progress, void *progress_arg, struct sbx_fetch_info *info,
		 struct sbx_rpc_status *st)
{
	return fetch_into(c, run_id, remote_path, fd, NULL, false, progress, progress_arg, info,
			  st);
}

int sbx_fetch_file(sbx_client *c, const char *run_id, const char *remote_path,
		   const char *local_path, const char *expect_sha256, sbx_progress_fn progress,
		   void *progress_arg, struct sbx_rpc_status *st)
{
	return sbx_fetch_file_ex(c, run_id, remote_path, local_path, expect_sha256, false, progress,
				 progress_arg, NULL, st);
}

int sbx_fetch_file_ex(sbx_client *c, const char *run_id, const char *remote_path,
		      const char *local_path, const char *expect_sha256, bool expect_live,
		      sbx_progress_fn progress, void *progress_arg, struct sbx_fetch_info *info,
		      struct sbx_rpc_status *st)
{
	_cleanup_(temp_file_freep) struct temp_file tmp = {.fd = -1};

	if (open_temp(local_path, &tmp, st) < 0 ||
	    fetch_into(c, run_id, remote_path, tmp.fd, expect_sha256, expect_live, progress,
		       progress_arg, info, st) < 0)
		return -1;
	if (fsync(tmp.fd) < 0 || close(sbx_steal_fd(tmp.fd)) < 0)
		return sbx_rpc_fail_errno(st, SBX__V1__CODE__INTERNAL, "%s", tmp.path);
	if (rename(tmp.path, local_path) < 0)
		return sbx_rpc_fail_errno(st, SBX__V1__CODE__INTERNAL, "%s", local_path);
	free(sbx_steal_ptr(tmp.path)); /* renamed: nothing to remove */
	return 0;
}

/* A temporary file in a directory fd: removed on scope exit unless
 * renamed into place (then name is empty). */
struct temp_at {
	int dir;
	int fd;
	char name[40];
};

static void temp_at_freep(struct temp_at *t)
{
	sbx_closep(&t->fd);
	if (t->name[0])
		(void)unlinkat(t->dir, t->name, 0); /* already gone is what we want */
}

int sbx_fetch_at(sbx_client *c, const char *run_id, const char *remote_path, int dirfd,
		 const char *rel, mode_t mode, const char *expect_sha256, bool expect_live,
		 sbx_progress_fn progress, void *progress_arg, struct sbx_fetch_info *info,
		 struct sbx_rpc_status *st)
{
	char shown[256];
	const char *base;

	sbx_escape(shown, sizeof(shown), rel);
	_cleanup_close_ int dir = sbx_dest_subdir(dirfd, rel, &base, &st->err);
	/* Asked before the bytes are fetched, and again before the rename. */
	if (dir < 0 || sbx_dest_check_slot(dir, base, shown, &st->err) < 0)
		return sbx_rpc_code(st, SBX__V1__CODE__FAILED_PRECONDITION);
	/* After dir: removed while dir is still open. */
	_cleanup_(temp_at_freep) struct temp_at tmp = {.dir = dir, .fd = -1};
	for (int tries = 0; tmp.fd < 0; tries++) {
		char id[33];
		if (tries == 16)
			return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL,
					    "%s: no free temporary name", shown);
		if (sbx_request_id(id, &st->err) < 0)
			return sbx_rpc_code(st, SBX__V1__CODE__INTERNAL);
		snprintf(tmp.name, sizeof(tmp.name), ".sbx-fetch-%.12s.tmp", id);
		/* 0600 until the bytes are verified and the mode set on the fd. */
		tmp.fd =
		    sbx_open_beneath(dir, tmp.name, O_WRONLY | O_CREAT | O_EXCL, 0600, &st->err);
		if (tmp.fd < 0)
			tmp.name[0] = '\0';
		if (tmp.fd < 0 && st->err.errnum != EEXIST)
			return sbx_rpc_code(st, SBX__V1__CODE__FAILED_PRECONDITION);
	}
	if (fetch_into(c, run_id, remote_path, tmp.fd, expect_sha256, expect_live, progress,
		       progress_arg, info, st) < 0)
		return -1;
	/* The mode on the fd, never on a name someone could have swapped; the
	 * permission bits only: a caller that passes on what a server listed
	 * must not get a set-id file of its own from a hostile server. */
	if (fchmod(tmp.fd, mode & 0777) < 0 || fsync(tmp.fd) < 0 || close(sbx_steal_fd(tmp.fd)) < 0)
		return sbx_rpc_fail_errno(st, SBX__V1__CODE__INTERNAL, "%s", shown);
	if (sbx_dest_check_slot(dir, base, shown, &st->err) < 0)
		return sbx_rpc_code(st, SBX__V1__CODE__FAILED_PRECONDITION);
	if (renameat(dir, tmp.name, dir, base) < 0)
		return sbx_rpc_fail_errno(st, SBX__V1__CODE__INTERNAL, "%s", shown);
	tmp.name[0] = '\0'; /* renamed: nothing to remove */
	return 0;
}
