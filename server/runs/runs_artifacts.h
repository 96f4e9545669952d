/* /out's files with their digests (runs_artifacts.c; ListArtifacts and
 * FetchArtifact are there too). */
#ifndef SBX_RUNS_ARTIFACTS_H
#define SBX_RUNS_ARTIFACTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "run.h"

struct artifact_list {
	Sbx__V1__Artifact **items;
	size_t n;
	uint32_t skipped;
	uint64_t oversize; /* sparse files larger than out_mb: counted in skipped */
	bool partial;	   /* more than RUN_ARTIFACTS_MAX entries */
};
int artifacts_list(struct sbx_run *r, int out_fd, struct artifact_list *al, struct sbx_err *err);
void artifacts_list_free(struct artifact_list *al);
void artifacts_forget(struct sbx_run *r); /* frees hash cache and fetch cursors */

#endif
