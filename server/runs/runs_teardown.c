/* SPDX-License-Identifier: Apache-2.0 */
/* Teardown: kill everything, record what the run was, remove every trace.
 *
 * The order is what makes it leave nothing: DestroyRequest (pid 1 exits,
 * and with it every process of the sandbox), the monitor stopped, the
 * control socket closed, the helper waited for (it removes the run's
 * cgroups; one that hangs is SIGKILLed with its process group after 5 s and
 * its cgroups removed by `sbx-helper cleanup`), then the artifacts hashed
 * through the /out fd before it is closed (which frees the tmpfs), then the
 * run's directory removed (never a caller's input_dir: it is not in there). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "audit.h"
#include "clock.h"
#include "egress.h"
#include "helper_client.h"
#include "run_exec.h"
#include "runs_artifacts.h"
#include "runs_egress.h"
#include "runs_last_words.h"
#include "runs_manager.h"
#include "runs_monitor.h"
#include "runs_operator.h"
#include "runs_output.h"
#include "runs_proc.h"
#include "runs_quota.h"
#include "runs_registry.h"
#include "runs_status.h"
#include "runs_sweeper.h"
#include "runs_teardown.h"
#include "tree.h"
#include "util.h"

#define UNFINISHED_RETRY_FIRST_MS 5000
#define UNFINISHED_RETRY_MAX_MS	  60000

/* The helper and its sandbox are gone when this returns, or as gone as a
 * SIGKILL makes them. */
static void stop_helper(struct sbx_run *r, struct last_words *lw)
{
	bool reaped, gone;
	int status = 0;

	run_lock(r);
	if (r->ctl >= 0)
		close(r->ctl);
	r->ctl = -1;
	reaped = r->reaped;
	gone = r->sandbox_gone || r->pid <= 0;
	r->sandbox_gone = gone;
	run_unlock(r);
	if (gone)
		return;
	if (reaped) {
		/* The monitor reaped a killed helper, and the sweep of its
		 * cgroups failed: once more. */
		monitor_reaped(r, false);
		return;
	}
	if (!last_words_reap(lw, r->pid, r->pidfd, RUN_HELPER_EXIT_MS, &status)) {
		proc_kill_group(r->pid);
		run_lock(r);
		r->killed = true;
		run_alert(r, "sbxd: sbx-helper did not exit within %d s of DestroyRequest; killed",
			  RUN_HELPER_EXIT_MS / 1000);
		run_unlock(r);
		last_words_reap(lw, r->pid, r->pidfd, RUN_HELPER_EXIT_MS, &status);
	}
	monitor_reaped(r, WIFEXITED(status));
}

/* mu held: the helper's last words become alerts (the helper is reaped:
 * what it said is in the pipe, and what was kept), instead of going unread
 * with the pipe. */
static void last_words_said(struct sbx_run *r, struct last_words *lw) REQUIRES(r->mu)
{
	last_words_read(lw);
	/* First: the lines may fill the alerts the teardown has. */
	if (lw->lost)
		run_alert(
		    r, "sbxd: sbx-helper said %llu bytes more on stderr at its end than are kept",
		    (unsigned long long)lw->lost);
	if (lw->kept)
		run_alerts_from_bytes(r, lw->kept, lw->len);
}

/* mu held: the alerts raised since the run was claimed, for its teardown's
 * audit line (nobody can ask Status for them any more): at most
 * RUN_TEARDOWN_ALERTS (run_alert keeps no more), then how many more; NULL
 * when there were none. */
static json_t *teardown_alerts(struct sbx_run *r) REQUIRES(r->mu)
{
	uint64_t more = r->alerts_dropped - r->dropped_at_teardown;
	json_t *a;

	if (!r->claim_marked || (r->n_alerts <= r->alerts_at_teardown && !more))
		return NULL;
	if (!(a = json_array()))
		return NULL;
	for (size_t i = r->alerts_at_teardown; i < r->n_alerts; i++)
		json_array_append_new(a, json_string(r->alerts[i]));
	if (more)
		json_array_append_new(a, json_sprintf("sbxd: %llu more alerts were dropped",
						      (unsigned long long)more));
	return a;
}

/* mu held. */
static bool input_busy(struct sbx_run *r) REQUIRES(r->mu)
{
	for (size_t i = 0; i < r->n_inputs; i++)
		if (r->inputs[i].busy)
			return true;
	for (struct run_input *in = r->added; in; in = in->next)
		if (in->busy)
			return true;
	return false;
}

static int remove_run_dir(struct sbx_run *r, struct sbx_err *err)
{
	const char *dir = r->runs->cfg.runs_dir;
	_cleanup_close_ int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0)
		return sbx_fail_errno(err, "%s", dir);
	return sbx_remove_tree_at(fd, r->id, err);
}

/* mu held: the record of the run, as the manifest (its artifacts come later). */
static Sbx__V1__RunManifest *manifest_new(struct sbx_run *r, Sbx__V1__RunState final)
    REQUIRES(r->mu)
{
	Sbx__V1__RunManifest *m = malloc(sizeof(*m));
	const struct run_input *added = r->added;
	size_t n = 0;

	if (!m)
		return NULL;
	sbx__v1__run_manifest__init(m);
	m->created_unix_ms = r->created_ms;
	m->launch = r->launch;
	m->ended_unix_ms = r->ended_ms ? r->ended_ms : sbx_unix_ms();
	m->final_state = final;
	if (!(m->run_id = xstrdup(r->id)) || !(m->identity = xstrdup(r->identity)) ||
	    !(m->policy_digest = xstrdup(r->policy_digest)) ||
	    !(m->image_digest = xstrdup(r->image_digest)) || !(m->policy = policy_copy(r->policy)))
		goto oom;
	/* Inputs: what /data held, i.e. every upload that completed, those
	 * declared at CreateRun (by path) and then those added later. */
	m->inputs = calloc(r->n_inputs + r->n_added + 1, sizeof(*m->inputs));
	if (!m->inputs)
		goto oom;
	for (size_t i = 0; i < r->n_inputs + r->n_added; i++) {
		const struct run_input *in = i < r->n_inputs ? &r->inputs[i] : added;
		Sbx__V1__InputFile *f;

		if (i >= r->n_inputs)
			added = added->next;
		if (!in->complete)
			continue;
		if (!(f = malloc(sizeof(*f))))
			goto oom;
		sbx__v1__input_file__init(f);
		m->inputs[m->n_inputs++] = f;
		f->size = in->size;
		f->mode = in->mode;
		f->arrived_unix_ms = in->arrived_ms;
		if (!(f->path = strdup(in->path)) || !(f->sha256 = strdup(in->sha256)))
			goto oom;
	}
	for (struct run_exec *e = r->execs; e; e = e->next)
		n++;
	m->execs = calloc(n ? n : 1, sizeof(*m->execs));
	if (!m->execs)
		goto oom;
	for (struct run_exec *e = r->execs; e; e = e->next) {
		if (!(m->execs[m->n_execs] = exec_status_new(e)))
			goto oom;
		m->n_execs++;
	}
	return m;
oom:
	sbx__v1__run_manifest__free_unpacked(m, NULL);
	return NULL;
}

/* A finish that could not be done: the run stays registered (TORN, its
 * /out fd and directory kept) with r->unfinished set, so that its owner's
 * next Teardown finds it and tries again (run_take_unfinished). */
static int unfinished(struct sbx_run *r, struct sbx_rpc_status *st, const char *what)
{
	run_audit(r, "teardown_error",
		  json_pack("{s:s, s:s, s:b}", "what", what, "error", st->err.msg, "kept", 1));
	sbx_rpc_code_unless_short(st, SBX__V1__CODE__INTERNAL);
	sbx_rpc_prefix(st,
		       "run %s is torn down (none of its processes is left), but %s failed; sbxd "
		       "keeps its record and files: call Teardown again to finish it and get its "
		       "manifest",
		       r->id, what);
	pthread_mutex_lock(&r->runs->mu);
	r->unfinished = true;
	/* Nobody may call again (the sweeper's run, a caller gone): the
	 * sweeper tries it later itself, backing off as the shortage lasts. */
	r->retry_ms = r->retry_ms ? r->retry_ms * 2 : UNFINISHED_RETRY_FIRST_MS;
	if (r->retry_ms > UNFINISHED_RETRY_MAX_MS)
		r->retry_ms = UNFINISHED_RETRY_MAX_MS;
	r->retry_at = sbx_mono_ms() + r->retry_ms;
	pthread_mutex_unlock(&r->runs->mu);
	return -1;
}

/* What a teardown needs descriptors and memory for, once the sandbox is
 * gone: the record and the artifacts' digests (in what is left of
 * max_message_bytes, read through /out's fd before closing it), the run's
 * directory removed. Without a manifest to give (an expiry, sbxd draining)
 * nothing is hashed: the files are only counted. Run again by a later
 * Teardown when it could not finish, so that a shortage is never answered
 * OK with files left behind. */
static int teardown_finish(struct sbx_run *r, Sbx__V1__RunManifest **manifest,
			   struct sbx_rpc_status *st)
{
	struct artifact_list al = {0};
	Sbx__V1__RunState final;
	json_t *said;
	bool idle;
	size_t budget = 0, used = 0;
	uint64_t n_artifacts;
	int out_fd, rc = 0;

	/* [owner]: the claiming Teardown, and nobody reads /out once claimed. */
	out_fd = r->out_fd;
	run_lock(r);
	final = run_final_state(r);
	idle = r->idle_ended;
	run_unlock(r);
	if (manifest) {
		run_lock(r);
		*manifest = manifest_new(r, final);
		run_unlock(r);
		/* Final totals: the run's egress was closed with its sandbox.
		 * They take their share (egress_reply_bytes) of the listing's
		 * half: the record and the execs keep theirs. */
		if (*manifest && r->egress &&
		    runs_egress_destinations(r->egress, egress_reply_bytes(r->runs),
					     &(*manifest)->egress, &(*manifest)->n_egress,
					     &(*manifest)->egress_destinations_folded,
					     &st->err) < 0) {
			sbx__v1__run_manifest__free_unpacked(*manifest, NULL);
			*manifest = NULL;
		}
		if (*manifest)
			budget = artifacts_reply_bytes(r->runs);
		if (*manifest)
			used = exec_records_fit(&(*manifest)->base, &(*manifest)->execs,
						&(*manifest)->n_execs,
						budget / 2 + egress_reply_bytes(r->runs),
						&(*manifest)->execs_not_listed);
		if (used > budget)
			used = budget;
	}
	/* Hashing (up to out_mb a run) is one of the identity's share of
	 * passes: one identity tearing down many runs at once never holds
	 * every short worker for it. */
	if (out_fd >= 0 &&
	    (manifest ? artifacts_list_manifest(r, out_fd, budget - used, &al, &st->err)
		      : artifacts_list(r, out_fd, 0, &al, &st->err)) < 0) {
		if (sbx_errno_shortage(st->err.errnum)) {
			rc = unfinished(r, st, "listing its /out");
			goto drop_manifest;
		}
		run_lock(r);
		run_alert(r, "sbxd: listing /out at teardown: %s", st->err.msg);
		run_unlock(r);
	}
	if (remove_run_dir(r, &st->err) < 0) {
		rc = unfinished(r, st, "removing its directory");
		goto drop_manifest;
	}
	run_lock(r);
	r->out_fd = -1;
	artifacts_drop_files(r);
	/* The reader holds /out too: it ends now (EOF), and with it the
	 * last hold on the sandbox's files. The fd itself goes with the run,
	 * after any fetch still in it has failed. */
	if (r->reader.sock >= 0)
		shutdown(r->reader.sock, SHUT_RDWR);
	run_unlock(r);
	if (out_fd >= 0)
		close(out_fd);
	sbx_err_clear(&st->err);
	if (manifest && *manifest &&
	    !((*manifest)->artifacts_listing = artifacts_listing_new(&al))) {
		sbx__v1__run_manifest__free_unpacked(*manifest, NULL);
		*manifest = NULL;
	}
	n_artifacts = al.n + al.not_listed;
	if (manifest && *manifest) {
		(*manifest)->artifacts = al.items;
		(*manifest)->n_artifacts = al.n;
		al.items = NULL;
		al.n = 0;
	}
	if (manifest && !*manifest)
		rc = sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL,
				  "run %s was torn down, but its manifest could not be built: out "
				  "of memory",
				  r->id);
	/* Torn down by the sweeper, nobody may be there to take the
	 * manifest: its digest-relevant part goes to the audit log, and that
	 * line is its only record. So it is never dropped by the identity's
	 * audit rate (sbx_audit_exempt): one line per run, written just
	 * before the run leaves the registry, so their number is bounded by
	 * the runs made (each a sandbox started), not by the caller's calls.
	 * Its length is for callers that charge a budget of their own: none
	 * here. Its alerts are those raised since the Teardown claimed the
	 * run (the helper's last words among them): nobody can ask Status
	 * for them now. */
	run_lock(r);
	said = teardown_alerts(r);
	run_unlock(r);
	(void)sbx_audit_exempt("teardown", r->id, r->identity, r->policy_digest,
			       json_pack("{s:s, s:s, s:b, s:I, s:I, s:b, s:o*, s:o*}",
					 "final_state", run_public_state_name(final), "reason",
					 r->teardown_why ? r->teardown_why : "teardown", "idle",
					 idle, "execs", (json_int_t)r->n_execs, "artifacts",
					 (json_int_t)n_artifacts, "killed", r->killed, "manifest",
					 r->teardown_why && manifest && *manifest
					     ? manifest_audit_json(*manifest)
					     : NULL,
					 "alerts", said));
	artifacts_list_free(&al);
	quota_release_run(r);
	/* Only now may `sbxd image rm` take the tree: the sandbox that saw
	 * it is gone, and so is everything the run kept. */
	run_release_image(r);
	run_unregister(r);
	return rc;

drop_manifest:
	/* Built again by the Teardown that finishes the run. */
	if (manifest && *manifest) {
		sbx__v1__run_manifest__free_unpacked(*manifest, NULL);
		*manifest = NULL;
	}
	artifacts_list_free(&al);
	return rc;
}

int run_teardown(struct sbx_run *r, Sbx__V1__RunManifest **manifest, struct sbx_rpc_status *st)
{
	struct sbx_err err;
	int rc;

	run_ref(r);
	/* Listings and digest passes of this run stop now. */
	atomic_fetch_add(&r->out_gen, 1);
	/* Every relayed connection ends first, before the sandbox: its close
	 * record says torn_down (not a peer's close as its processes die), and
	 * the manifest sums final totals. Not under mu: it waits for the
	 * proxy's loop. A listener the monitor hands over later is refused. */
	if (r->egress)
		sbx_egress_run_close(r->egress);
	run_lock(r);
	/* No PutInput starts once the run is claimed; one already writing
	 * finishes before the data directory is removed under it. */
	while (input_busy(r))
		run_wait(r);
	if (r->ctl >= 0 && sbx_ctl_send_destroy(r->ctl, &err) < 0 && err.errnum != EPIPE &&
	    err.errnum != ECONNRESET)
		run_alert(r, "sbxd: DestroyRequest: %s", err.msg);
	run_unlock(r);
	monitor_stop(r);
	/* The monitor is gone: the pipe is read here alone. */
	struct last_words lw;
	last_words_init(&lw, r->err_pipe);
	stop_helper(r, &lw);

	run_lock(r);
	for (struct run_exec *e = r->execs; e; e = e->next)
		for (int w = 0; w < 2; w++)
			if (!e->out[w].closed)
				stream_close(r, e, w);
	run_end_execs(r, SBX__V1__EXIT_REASON__TORN_DOWN,
		      r->teardown_why && !strcmp(r->teardown_why, "drain")
			  ? "the run was torn down by sbxd's drain (sbxd is stopping)"
			  : "the run was torn down");
	run_state_move(r, RUN_TORN);
	if (!r->ended_ms)
		r->ended_ms = sbx_unix_ms();
	last_words_said(r, &lw);
	last_words_free(&lw);
	if (r->err_pipe >= 0)
		close(r->err_pipe);
	r->err_pipe = -1;
	run_changed(r); /* long polls return now */
	run_unlock(r);

	rc = teardown_finish(r, manifest, st);
	run_unref(r);
	return rc;
}

int run_teardown_unfinished(struct sbx_run *r, Sbx__V1__RunManifest **manifest,
			    struct sbx_rpc_status *st)
{
	return teardown_finish(r, manifest, st);
}

SBX_HANDLER(teardown, Sbx__V1__TeardownRequest, Sbx__V1__TeardownResponse)
{
	struct sbx_run *r = run_take_unfinished(runs, who, req->run_id);
	Sbx__V1__RunManifest *m = NULL;
	Sbx__V1__TeardownResponse *t;
	int rc;

	if (r) {
		/* An earlier Teardown of it ran short: finish it now. */
		rc = run_teardown_unfinished(r, &m, st);
	} else {
		if (!(r = run_lookup_operator(runs, who, req->run_id, st)))
			return -1;
		if (run_claim(r, st) < 0) {
			run_unref(r);
			return -1;
		}
		if (strcmp(r->identity, who->name) != 0) {
			/* An operator's: the manifest goes to the audit log too
			 * (its owner never sees it), and the owner is told. */
			char why[192];

			operator_audit(who, r, "teardown", true);
			snprintf(why, sizeof(why), "torn down by operator %.150s", who->name);
			runs_tombstone(r, why);
			r->teardown_why = "operator"; /* [owner]: claimed above */
		}
		rc = run_teardown(r, &m, st);
	}
	run_unref(r);
	if (rc < 0)
		return -1;
	t = malloc(sizeof(*t));
	if (!t) {
		sbx__v1__run_manifest__free_unpacked(m, NULL);
		return sbx_rpc_fail(st, SBX__V1__CODE__INTERNAL, "out of memory");
	}
	sbx__v1__teardown_response__init(t);
	t->manifest = m;
	*resp = t;
	return 0;
}
