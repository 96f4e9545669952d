/* SPDX-License-Identifier: Apache-2.0 */
/* One run: its record, its lock, its references (run.c).
 *
 * Who guards what, marked on every field below:
 *   [reg]   the registry lock (struct sbx_runs, runs_registry.c);
 *   [mu]    the run's lock: run_lock()/run_unlock(), never a raw mutex call;
 *   [once]  written by CreateRun while the run is STARTING (nobody else can
 *           find it yet), constant afterwards: read without a lock;
 *   [mon]   the run's monitor thread alone (runs_monitor.c), or the Teardown
 *           that claimed the run once it joined the monitor;
 *   [owner] CreateRun while STARTING, then the Teardown that claimed it.
 * While a run is STARTING no other thread can reach it (lookups skip it and
 * its monitor starts last), so CreateRun also writes [mu] fields (alerts,
 * ctl, out_fd) without the lock.
 *
 * The rules: the registry lock may be taken before a run's lock, never
 * after it. A run's lock is never held across a blocking call: long polls
 * wait on the run's condvar (run_wait, run_wait_until), which releases it;
 * audit lines are queued under it and written by run_unlock after it is
 * released. The run's state is run_state.c's (run_state.h).
 *
 * Lifetime: a run is reference-counted; the registry holds one reference
 * and every handler working on the run another, so a Teardown never frees
 * what a concurrent Wait still looks at. */
#ifndef SBX_RUN_H
#define SBX_RUN_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "images.h"
#include "out_reader.h"
#include "policy.h"
#include "run_state.h"
#include "service.h"
#include "thread_safety.h"

#define RUN_ID_BUF	      40    /* "run-" + 32 hex + NUL */
#define RUN_IDEM_KEY_MAX      128   /* CreateRunRequest.idempotency_key, bytes */
#define RUN_EXECS_RUNNING_MAX 64    /* at once, as sbx-helper's pid 1 allows */
#define RUN_EXECS_MAX	      10000 /* over a run's life: bounds its records */
#define RUN_DENIED_NAMES      16    /* ExecStatus.network_denied_names, distinct, first */
#define RUN_EXEC_ARGV_RECORD  8192  /* argv bytes kept per exec for Status */
#define RUN_ALERTS_MAX	      100
/* Alerts raised once a Teardown claimed the run, kept past RUN_ALERTS_MAX
 * for its audit line (a run that said 100 things before would otherwise
 * drop the helper's last words and sbxd's own). */
#define RUN_TEARDOWN_ALERTS  16
#define RUN_ALERT_BYTES	     1024
#define RUN_LONGPOLL_MAX_MS  60000
#define RUN_CHUNK_MAX	     (1u << 20) /* PutInput, ReadOutput, FetchArtifact */
#define RUN_READY_TIMEOUT_MS 15000	/* helper start-up */
#define RUN_GRACE_MS	     2000	/* past a deadline before sbxd steps in */
#define RUN_OUTPUT_GRACE_MS  1000	/* pipes still open after an exec ended */
#define RUN_HELPER_EXIT_MS   5000	/* after DestroyRequest, then SIGKILL */
#define RUN_ARTIFACTS_MAX    100000	/* /out entries a listing walks, then truncated */
#define RUN_LIST_MAX	     20000	/* artifacts a listing or manifest holds */
#define RUN_OUT_PASS_MS	     5000	/* a listing or digest pass, then truncated */
#define RUN_PATH_MAX	     1024	/* input and artifact paths */

enum { RUN_STDOUT, RUN_STDERR };

struct sbx_runs;
struct sbx_egress_run;
struct run_hash_cache;
struct run_fetch;

/* One output stream of one exec: kept bytes spill to a file in the run's
 * directory, so sbxd's memory does not grow with output. At most
 * output_kb KiB per stream are kept: the head (the first half) and the
 * tail (the last half, a ring in the file after the head), with one gap
 * between them that is only counted (runs_output.c). Positions count the
 * bytes the command wrote; all of these are written by the monitor alone,
 * which reads them without mu. */
struct run_stream {
	int pipe;	/* [mon] read end; -1 once closed */
	int file;	/* [mon] spill file being written; -1 */
	uint64_t head;	/* set by Exec, then constant: bytes of the head */
	uint64_t tail;	/* the same: bytes of the tail's ring */
	uint64_t end;	/* [mu] positions below this are kept, or in the gap */
	uint64_t lo;	/* [mu] the first position of the tail still in the
			 * ring (> head: the gap is [head, lo)); raised before
			 * the ring's bytes below it are overwritten */
	uint64_t kept;	/* [mu] bytes kept: head + tail */
	uint64_t total; /* [mu] bytes the command wrote */
	bool truncated; /* [mu] */
	bool closed;	/* [mu] no byte will come any more */
	bool midline;	/* [mon] its last byte so far is not a newline */
	/* [mu] non-empty: nothing is kept past `kept` any more, and why (the
	 * disk or a quota was full); written by the monitor alone. */
	char cut[256];
};

struct run_exec {
	struct run_exec *next; /* [mu] */
	/* Set by Exec before the exec is on the run's list, then constant. */
	uint64_t num; /* "exec-<num>"; also the helper protocol's exec id */
	char **argv;  /* the record (at most RUN_EXEC_ARGV_RECORD bytes) */
	size_t argc;
	int64_t started_ms; /* unix */
	int64_t deadline;   /* monotonic: when sbxd ends it if the helper did not */
	/* [mu] from here */
	bool ended;	  /* the helper (or sbxd's watchdog) says it ended */
	bool done;	  /* ended, and both streams closed: Wait returns */
	int64_t ended_at; /* monotonic, for RUN_OUTPUT_GRACE_MS */
	int64_t ended_ms; /* unix */
	Sbx__V1__ExitReason reason;
	int32_t exit_code;
	int32_t signal;
	uint64_t cpu_ms;
	uint64_t peak_memory_bytes;
	char *message;
	bool egress_listener; /* its listener went to the proxy (at most one) */
	struct run_stream out[2];
	/* Set by Exec before the exec is on the run's list, then constant:
	 * what the ExecRequest set over the policy's env ("NAME=value", at
	 * most RUN_EXEC_ARGV_RECORD bytes of it recorded), where it ran and
	 * the wall clock it had (seconds). */
	char **env;
	size_t n_env;
	char *cwd;
	uint32_t timeout_seconds;
	bool stdin_stream; /* stdin comes by WriteStdin (runs_stdin.c) */
	/* [mu] a streamed stdin: the pipe's write end (non-blocking; -1 once
	 * closed: eof, the exec's end), the bytes taken, whether eof came. */
	int stdin_fd;
	uint64_t stdin_accepted;
	bool stdin_eof;
	bool stdin_enlarged; /* its pipe counts in RUN_STDIN_HOST_BYTES */
	/* Egress deny (runs_deny.c): the exec's deny resolver and connect
	 * watch ([mon], -1: none or closed; both or neither), its answer
	 * budget ([mon]) and what it recorded ([mu]). */
	int deny_fd;
	int watch_fd;
	/* [mu] SBX_EXEC_FDS of the run's exec_fds held for it, from its start
	 * until every descriptor of sbxd's it held is closed (runs_monitor.c). */
	bool fds_charged;
	uint32_t deny_tokens;
	int64_t deny_refill_ms; /* monotonic */
	uint32_t denied_attempts;
	char *denied_names[RUN_DENIED_NAMES];
	size_t n_denied_names;
};

/* An input file: declared at CreateRun (r->inputs, [once]) or by a
 * PutInput (r->added, [mu]: the fields up to `mode` are constant once it
 * is on that list). */
struct run_input {
	struct run_input *next; /* [mu] r->added */
	char *path;
	uint64_t size;
	char sha256[65];
	uint64_t serial; /* its upload's name in staging/ */
	/* [mu] from here */
	uint32_t mode; /* permission bits; 0: not said yet (0644) */
	/* The mode the upload in progress gives (its first chunk's, else
	 * `mode`): it becomes `mode` only once the upload completes, so that a
	 * failed upload never pins its mode for the retry. */
	uint32_t upload_mode;
	int64_t arrived_ms; /* unix: renamed into /data, complete */
	uint64_t received;
	bool complete;
	bool busy; /* a PutInput is writing it (outside the lock) */
	void *md;  /* EVP_MD_CTX of the bytes so far */
};

/* An audit line to write once the run's lock is released. */
struct run_event {
	struct run_event *next;
	const char *event;
	void *fields; /* json_t * */
};

/* The run's lock: a pthread mutex that clang's thread-safety analysis
 * knows as a capability (thread_safety.h). Taken and released only by
 * run_lock() and run_unlock(). */
typedef pthread_mutex_t run_mutex_t CAPABILITY("mutex");

/* Its fields in one block per owner (the tags above). */
struct sbx_run {
	/* [reg] */
	struct sbx_run *next; /* registry list */
	/* TORN, but its teardown ran short before listing /out or removing
	 * its directory: still registered for a later Teardown. */
	bool unfinished;
	/* With unfinished: when the sweeper tries it again (monotonic), and
	 * the wait before the next try (5 s, doubling to 60 s). */
	int64_t retry_at;
	int64_t retry_ms;
	uint64_t disk_charged; /* bytes of state_dir charged to the caller */
	/* A warm pool member whose run slot and capacity are counted in
	 * runs->pool_members and pool_cost (runs_pool.c) until a CreateRun's
	 * run_register moves them to the registry, or it is destroyed. */
	bool pool_reserved;
	/* CreateRuns with this run's idempotency_key waiting for it to leave
	 * STARTING (runs_idem.c): at most RUNS_IDEM_WAITERS. */
	unsigned idem_waiters;

	/* Atomics, read and written without a lock. */
	atomic_int refs;
	atomic_uint out_gen; /* bumped by Teardown: listings and digest passes stop */
	/* The lease (runs_lease.c): monotonic ms of the owner's last call on
	 * the run (run_lookup), written without a lock by every handler. */
	_Atomic int64_t last_call;

	/* [once] */
	struct sbx_runs *runs; /* the manager it belongs to */
	char id[RUN_ID_BUF];
	char identity[sizeof(((struct sbx_identity *)0)->name)];
	SbxPolicy *policy;
	char policy_digest[72]; /* "sha256:<hex>" */
	/* CreateRun's idempotency_key ("" without one) and the sha256 of the
	 * request it came with (runs_idem.c). */
	char idem_key[RUN_IDEM_KEY_MAX + 1];
	uint8_t idem_digest[32];
	/* "sha256:<hex>" of a store image, "unpinned" for host: a copy of
	 * image.digest, which outlives the hold's release. */
	char image_digest[IMG_DIGEST_LEN + 1];
	size_t n_labels;
	char **label_keys;
	char **label_values;
	struct run_input *inputs; /* sorted by path */
	size_t n_inputs;
	size_t n_input_dirs; /* the directories the inputs' paths make */
	char *dir;	     /* state_dir/runs/<id> */
	int dir_fd;
	char *data_path; /* what the helper mounts as /data */
	int data_fd;	 /* where PutInput renames complete inputs; -1 with a caller's input_dir */
	int staging_fd;	 /* dir/staging: inputs being uploaded, outside /data's tree */
	bool caller_data;
	int spill_fd;		 /* dir/output: the execs' kept output */
	int64_t created_ms;	 /* unix */
	int64_t deadline_ms;	 /* unix: run_seconds after the sandbox was ready */
	int64_t deadline;	 /* the same, monotonic */
	int64_t earliest_expiry; /* monotonic: the helper's own deadline is later */
	uint64_t output_cap;	 /* bytes kept per stream */
	/* COLD: built for its CreateRun; WARM: a member of the warm pool,
	 * claimed by it (runs_pool.h) */
	Sbx__V1__Launch launch;
	/* The run's place in the egress proxy (egress.h), NULL without an
	 * allowlist. Its calls are never made under mu (they may wait for the
	 * proxy's loop); closed at expiry, failure and teardown, freed with
	 * the run. */
	struct sbx_egress_run *egress;
	pid_t pid; /* sbx-helper, leader of its own process group */
	int pidfd; /* -1 without pidfd_open: the monitor polls */
	int wake;  /* eventfd: tells the monitor the exec list changed */

	/* [owner] */
	/* A store image's hold (images.h): its shared flock keeps `sbxd image
	 * rm` off the tree while the sandbox may still see it. Taken by
	 * CreateRun, released by run_release_image once the teardown
	 * finished (or CreateRun failed); lock_fd -1 for host. */
	struct img_hold image;
	pthread_t monitor;
	bool monitor_started;
	/* Why it is torn down, for the audit line: NULL for the owner's
	 * Teardown (the manifest went to the caller); the sweeper's reason
	 * ("expired_keep", "stopped_runs_max") writes the manifest there. */
	const char *teardown_why;

	/* The lock and its condvar. */
	run_mutex_t mu;
	pthread_cond_t cv; /* broadcast on every change a handler may wait for */

	/* [mu] */
	struct run_input *added; /* declared by PutInput, oldest first */
	struct run_input **added_tail;
	size_t n_added;
	uint64_t added_bytes; /* their sizes summed */
	/* What the policy, labels and inputs take of a manifest packed, at
	 * most half of an answer (runs_create.c, runs_inputs.c) */
	size_t record_bytes;
	enum run_state state;	     /* run_state.c alone assigns it */
	enum run_state claimed_from; /* run_state.c: the state a Teardown found */
	int ctl;		     /* -1 once the helper's pid 1 is gone; written by
				      * [mon] under mu, which reads it without mu */
	int out_fd;		     /* /out from Ready: artifacts stay readable until teardown */
	/* Opens beneath /out on our behalf (out_reader.h): its socket is -1
	 * until Ready, shut down at teardown, closed with the run. */
	struct sbx_out_reader reader;
	int err_pipe;		 /* [mon] under mu */
	bool reaped;		 /* the helper was waited for: its pid may be reused */
	bool killed;		 /* sbxd SIGKILLed the helper's group: its cgroups need cleanup */
	bool cgroups;		 /* the sandbox has run cgroups (Ready said so) */
	bool sandbox_gone;	 /* no process of the sandbox is left (monitor_reaped) */
	int64_t ended_ms;	 /* unix, when the sandbox ended */
	unsigned pollers;	 /* long polls waiting on cv now: each counts as a call */
	int64_t stopped_at;	 /* monotonic: it became EXPIRED or FAILED (run_state.c) */
	int64_t destroy_sent;	 /* monotonic: the lease ran out and sbxd asked pid 1 to end */
	bool idle_ended;	 /* the lease ran out: EXPIRED by idle_seconds */
	bool deny_watch_missing; /* [mu] an exec had no connect watch: alerted once */
	struct run_exec *execs;
	struct run_exec **exec_tail;
	uint64_t n_execs;
	unsigned running;
	/* Descriptors of sbxd's charged to the execs that hold them (SBX_EXEC_FDS
	 * each), within runs->cfg.exec_fds_share: one run's execs never take
	 * what FD_RESERVE keeps for another's run or connection. */
	uint32_t exec_fds;
	char *alerts[RUN_ALERTS_MAX + RUN_TEARDOWN_ALERTS];
	size_t n_alerts;
	uint64_t alerts_dropped;
	/* [mu] n_alerts and alerts_dropped when a Teardown (or the sweeper,
	 * a drain) claimed the run (claim_marked): those after it no caller
	 * can read, so the teardown's audit line carries them. */
	bool claim_marked;
	size_t alerts_at_teardown;
	uint64_t dropped_at_teardown;
	struct run_hash_cache *hashes;
	struct run_fetch *fetches;
	/* When /out's digests are final (runs_artifacts.c): */
	uint64_t out_epoch;	  /* execs started so far: a digest is cached for one epoch */
	bool out_unsettled;	  /* sbxd ended an exec's record without the sandbox's
				   * word (a deadline, an expiry): its processes may
				   * still write /out until sandbox_gone */
	struct run_event *events; /* queued audit lines */
	struct run_event **events_tail;
};

/* [owner] Lets go of the run's image (nothing when it holds none). */
void run_release_image(struct sbx_run *r);

/* A condvar whose timed waits run on CLOCK_MONOTONIC (sbx_mono_after_ms). */
void cond_init_monotonic(pthread_cond_t *cv);

/* A STARTING run of `runs` with one reference (the caller's). */
struct sbx_run *run_alloc(struct sbx_runs *runs);
void run_ref(struct sbx_run *r);
void run_unref(struct sbx_run *r); /* frees it with the last reference */

void run_lock(struct sbx_run *r) ACQUIRE(r->mu);
/* Releases the run's lock, then writes the audit lines queued under it, so
 * the log is never written under a run's lock. */
void run_unlock(struct sbx_run *r) RELEASE(r->mu);
/* mu held: waits on r->cv (releasing mu while waiting). */
void run_wait(struct sbx_run *r) REQUIRES(r->mu);
/* mu held: waits on r->cv until the monotonic deadline; false once it passed.
 * A long poll: while it waits, and when it wakes, it counts as a call on
 * the run (the lease). */
bool run_wait_until(struct sbx_run *r, int64_t deadline) REQUIRES(r->mu);
/* mu held: broadcasts r->cv. */
void run_changed(struct sbx_run *r) REQUIRES(r->mu);
/* Tells the run's monitor to look again (the exec list changed, or stop). */
void run_wake(struct sbx_run *r);

/* mu held. */
void run_alert(struct sbx_run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)))
REQUIRES(r->mu);
/* mu held: each line of text[0..len) an alert (a NUL ends one too, and a
 * line longer than an alert is split); empty lines none. */
void run_alerts_from_bytes(struct sbx_run *r, const char *text, size_t len) REQUIRES(r->mu);
/* Writes an audit line about r now (fields: json_t *, taken); never under mu. */
void run_audit(struct sbx_run *r, const char *event, void *fields) EXCLUDES(r->mu);
/* mu held: queues one for run_unlock to write. */
void run_queue_audit(struct sbx_run *r, const char *event, void *fields) REQUIRES(r->mu);

#endif
