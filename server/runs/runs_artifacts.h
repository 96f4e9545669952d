/* SPDX-License-Identifier: Apache-2.0 */
/* /out's files with their digests (runs_artifacts.c; ListArtifacts and
 * FetchArtifact are there too). */
#ifndef SBX_RUNS_ARTIFACTS_H
#define SBX_RUNS_ARTIFACTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "err.h"
#include "run.h"

struct artifact_list {
	Sbx__V1__Artifact **items;
	size_t n;
	uint32_t skipped;    /* everything below, and links, FIFOs, devices ... */
	uint64_t oversize;   /* sparse files larger than out_mb */
	uint64_t not_listed; /* regular files left out by a bound */
	uint64_t busy;	     /* leased: the open failed with EAGAIN */
	uint64_t bad_names;  /* not UTF-8 */
	const char *why;     /* the first bound that left files out */
	bool truncated;
	bool live; /* an exec could change /out while it was listed */
};
/* A bounded listing of /out (its names within max_bytes on the wire). */
int artifacts_list(struct sbx_run *r, int out_fd, size_t max_bytes, struct artifact_list *al,
		   struct sbx_err *err);
/* The same for a Teardown's manifest, as one of the run's identity's share
 * of passes; over the share it hashes nothing: only digests already known
 * (cached) are listed, the other files are counted as not listed. */
int artifacts_list_manifest(struct sbx_run *r, int out_fd, size_t max_bytes,
			    struct artifact_list *al, struct sbx_err *err);
void artifacts_list_free(struct artifact_list *al);
/* What al left out, as the proto says it; NULL when out of memory. */
Sbx__V1__ArtifactListing *artifacts_listing_new(const struct artifact_list *al);
/* The bytes an answer's artifacts may take: max_message_bytes less room for
 * the envelope and the rest of the answer. */
size_t artifacts_reply_bytes(const struct sbx_runs *runs);
/* A dup of the run's /out fd (a Teardown cannot pull it away), or -1 with
 * st: NOT_FOUND once torn down, FAILED_PRECONDITION without /out. */
int artifacts_out_dup(struct sbx_run *r, struct sbx_rpc_status *st);
/* One artifact opened read-only beneath /out by the run's reader (no link,
 * never leaving /out), refused unless a regular file of at most out_mb (a
 * larger one is sparse): the fd with *sb, or -1 with st naming the path. */
int artifacts_open(struct sbx_run *r, int out_fd, const char *path, struct stat *sb,
		   struct sbx_rpc_status *st);
/* Whether /out is settled (no process of the run can change it) and the
 * run's exec epoch (execs started so far): equal before and after some
 * work, and settled both times, nothing of the run wrote /out meanwhile. */
void artifacts_out_state(struct sbx_run *r, bool *settled, uint64_t *epoch);
/* The file's final digest if a listing or fetch of this epoch cached it for
 * this very file (inode, size, times) while /out was settled; else false. */
bool artifacts_final_sha256(struct sbx_run *r, const struct stat *sb, char sha256[65]);
void artifacts_forget(struct sbx_run *r); /* frees hash cache and fetch cursors */
/* mu held, at teardown: closes the files fetches in progress keep open
 * (the next chunks then fail as the run is gone), so that nothing of
 * sbxd holds the sandbox's files after it. */
void artifacts_drop_files(struct sbx_run *r) REQUIRES(r->mu);

#endif
