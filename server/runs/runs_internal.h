/* The run manager's shared state, internal to runs*.c.
 *
 * Locking: the registry lock (runs.c) may be taken before a run's lock,
 * never after it. A run's lock guards everything marked "mu" below and is
 * never held across a blocking call: long polls wait on the run's condvar,
 * which releases it. What is written once by CreateRun before the run is
 * visible needs no lock. Each run has one monitor thread (runs_monitor.c)
 * that alone reads the helper's control socket, its stderr and the execs'
 * output pipes, and enforces the deadlines.
 *
 * Lifetime: a run is reference-counted; the registry holds one reference
 * and every handler working on the run another, so a Teardown never frees
 * what a concurrent Wait still looks at. */
#ifndef SBX_RUNS_INTERNAL_H
#define SBX_RUNS_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "config.h"
#include "err.h"
#include "policy.h"
#include "service.h"

#define RUN_ID_BUF	      24    /* "run-" + 16 hex + NUL */
#define RUN_EXECS_RUNNING_MAX 64    /* at once, as sbx-helper's pid 1 allows */
#define RUN_EXECS_MAX	      10000 /* over a run's life: bounds its records */
#define RUN_EXEC_ARGV_RECORD  8192  /* argv bytes kept per exec for Status */
#define RUN_ALERTS_MAX	      100
#define RUN_ALERT_BYTES	      1024
#define RUN_LONGPOLL_MAX_MS   60000
#define RUN_CHUNK_MAX	      (1u << 20) /* PutInput, ReadOutput, FetchArtifact */
#define RUN_READY_TIMEOUT_MS  15000	 /* helper start-up */
#define RUN_GRACE_MS	      2000	 /* past a deadline before sbxd steps in */
#define RUN_OUTPUT_GRACE_MS   1000	 /* pipes still open after an exec ended */
#define RUN_HELPER_EXIT_MS    5000	 /* after DestroyRequest, then SIGKILL */
#define RUN_ARTIFACTS_MAX     100000
#define RUN_PATH_MAX	      1024 /* input and artifact paths */

enum { RUN_STDOUT, RUN_STDERR };

/* One output stream of one exec: kept bytes spill to a file in the run's
 * directory, so sbxd's memory does not grow with output (at most
 * output_kb KiB per stream are kept, the rest only counted). */
struct run_stream {
	int pipe;	/* read end; the monitor's alone; -1 once closed */
	int file;	/* spill file being written; the monitor's; -1 */
	uint64_t kept;	/* mu: bytes in the spill file, readable below this */
	uint64_t total; /* mu: bytes the command wrote */
	bool truncated; /* mu */
	bool closed;	/* mu: no byte will come any more */
};

struct run_exec {
	struct run_exec *next;
	uint64_t num; /* "exec-<num>"; also the helper protocol's exec id */
	char **argv;  /* the record (at most RUN_EXEC_ARGV_RECORD bytes) */
	size_t argc;
	int64_t started_ms; /* unix */
	int64_t deadline;   /* monotonic: when sbxd ends it if the helper did not */
	/* mu from here */
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
	struct run_stream out[2];
};

struct run_input {
	char *path;
	uint64_t size;
	char sha256[65];
	/* mu */
	uint64_t received;
	bool complete;
	bool busy; /* a PutInput is writing it (outside the lock) */
	void *md;  /* EVP_MD_CTX of the bytes so far */
};

struct run_hash_cache;
struct run_fetch;

/* An audit line to write once the run's lock is released. */
struct run_event {
	struct run_event *next;
	const char *event;
	void *fields; /* json_t * */
};

struct sbx_run {
	struct sbx_run *next; /* registry list (registry lock) */
	atomic_int refs;
	bool visible; /* registry lock: found by lookups (set when ready) */
	bool tearing; /* registry lock: a Teardown owns it */

	/* Written by CreateRun before the run is visible, then constant. */
	char id[RUN_ID_BUF];
	char identity[sizeof(((struct sbx_identity *)0)->name)];
	SbxPolicy *policy;
	char policy_digest[72]; /* "sha256:<hex>" */
	const char *image_digest;
	size_t n_labels;
	char **label_keys;
	char **label_values;
	struct run_input *inputs;
	size_t n_inputs;
	char *dir; /* state_dir/runs/<id> */
	int dir_fd;
	char *data_path; /* what the helper mounts as /data */
	int data_fd;	 /* where PutInput writes; -1 with a caller's input_dir */
	bool caller_data;
	int spill_fd;		 /* dir/output: the execs' kept output */
	int64_t created_ms;	 /* unix */
	int64_t deadline_ms;	 /* unix: run_seconds after the sandbox was ready */
	int64_t deadline;	 /* the same, monotonic */
	int64_t earliest_expiry; /* monotonic: the helper's own deadline is later */
	uint64_t output_cap;	 /* bytes kept per stream */
	pid_t pid;		 /* sbx-helper, leader of its own process group */
	int pidfd;
	pthread_t monitor;
	bool monitor_started;

	pthread_mutex_t mu;
	pthread_cond_t cv; /* broadcast on every change a handler may wait for */
	/* mu from here */
	Sbx__V1__RunState state;
	int ctl;    /* -1 once the helper's pid 1 is gone */
	int out_fd; /* /out from Ready: artifacts stay readable until teardown */
	int err_pipe;
	int wake;  /* eventfd: tells the monitor the exec list changed or to stop */
	bool stop; /* the monitor must return */
	bool reaped;
	bool killed;	  /* sbxd SIGKILLed the helper's group: its cgroups need cleanup */
	int64_t ended_ms; /* unix, when the sandbox ended */
	struct run_exec *execs;
	struct run_exec **exec_tail;
	uint64_t n_execs;
	unsigned running;
	char *alerts[RUN_ALERTS_MAX];
	size_t n_alerts;
	uint64_t alerts_dropped;
	struct run_hash_cache *hashes;
	struct run_fetch *fetches;
	struct run_event *events; /* queued audit lines */
	struct run_event **events_tail;
};

/* ---- runs.c: registry and the manager's settings ---- */
struct runs_settings {
	char *state_dir;
	char *runs_dir;
	char *helper;
	char *cgroup_root;
	bool rlimit_fallback;
	char *input_dirs[SBX_CONFIG_MAX_INPUT_DIRS]; /* realpath'd */
	size_t n_input_dirs;
	uint32_t runs_max;
	uint32_t runs_max_per_identity;
	char *const *helper_env;
};
extern struct runs_settings runs_cfg;

/* ---- runs_startup.c ---- */
/* What the host can enforce (`sbx-helper check --json`, asked at start-up). */
struct runs_host {
	bool userns;
	bool seccomp;
	char cgroup[8]; /* "v2", "v1" or "none" */
};
extern struct runs_host runs_host;
int runs_startup(const struct sbx_config *cfg, struct sbx_err *err);
void runs_settings_free(void);

/* The caller's run, referenced; NULL with NOT_FOUND otherwise (the same
 * answer for someone else's run as for none, so existence is not revealed). */
struct sbx_run *run_lookup(const struct sbx_identity *who, const char *id, struct sbx_rpc_status *st);
void run_ref(struct sbx_run *r);
void run_unref(struct sbx_run *r);
/* CreateRun: checks the caps and the drain flag and adds an invisible run. */
int run_register(struct sbx_run *r, struct sbx_rpc_status *st);
void run_publish(struct sbx_run *r);
void run_unregister(struct sbx_run *r);
/* Teardown: claims the run (0) or answers NOT_FOUND when it is already going. */
int run_claim(struct sbx_run *r, struct sbx_rpc_status *st);
struct sbx_run *run_alloc(void);
void run_free(struct sbx_run *r);
size_t runs_of(const struct sbx_identity *who, struct sbx_run ***out);

/* ---- runs_util.c ---- */
int64_t mono_ms(void);
int64_t unix_ms(void);
/* Waits on r->cv until the monotonic deadline; false once it passed. */
bool run_wait_until(struct sbx_run *r, int64_t deadline);
/* A relative path under /data or /out: no leading '/', no empty, "." or
 * ".." component, at most max bytes. Returns NULL or what is wrong. */
const char *path_problem(const char *path, size_t max);
bool is_sha256_hex(const char *s);
/* Removes dirfd's contents (never following a link), then the directory
 * `name` under parent. Returns -1 with err on the first failure. */
int remove_tree_at(int parent, const char *name, struct sbx_err *err);
/* Makes the parent directories of `path` beneath dirfd; returns an fd of
 * the last one (or a dup of dirfd) and the final name in *base. */
int mkdirs_beneath(int dirfd, const char *path, const char **base, struct sbx_err *err);
void run_alert(struct sbx_run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *exit_reason_name(Sbx__V1__ExitReason r);
const char *run_state_name(Sbx__V1__RunState s);
/* The exec named "exec-<n>" in r, or NULL (mu held). */
struct run_exec *run_find_exec(struct sbx_run *r, const char *exec_id);

/* ---- runs_proc.c: processes ---- */
/* posix_spawn with stdin /dev/null, stdout/stderr on the given fds, fd3 as
 * fd 3 (or none), nothing else inherited, in its own process group. */
int proc_spawn(const char *const *argv, int fd3, int outfd, int errfd, pid_t *pid,
	       struct sbx_err *err);
/* Waits up to timeout_ms for pid to exit and reaps it: 1 reaped, 0 not yet. */
int proc_reap(pid_t pid, int pidfd, int timeout_ms, int *status);
/* Runs `sbx-helper ARGS...` to its end (bounded), returning what it wrote
 * on stdout and stderr together (caller frees). */
int proc_run_helper(const char *const *args, int timeout_ms, char **out, int *status,
		    struct sbx_err *err);
/* SIGKILL to a helper's process group (it and its sandbox's pid 1); only
 * before the helper is reaped, so the group id cannot have been reused. */
void proc_kill_group(pid_t pid);

/* ---- runs_monitor.c ---- */
int monitor_start(struct sbx_run *r, struct sbx_err *err);
void monitor_stop(struct sbx_run *r); /* tells it to return and joins it */
void run_wake(struct sbx_run *r);

/* ---- runs_exec.c ---- */
void exec_free(struct run_exec *e);
/* mu held: the exec ended (reason etc. already set); wakes waiters. */
void exec_mark_ended(struct sbx_run *r, struct run_exec *e);
/* mu held: every exec still running ends with `reason`. */
void run_end_execs(struct sbx_run *r, Sbx__V1__ExitReason reason, const char *message);
void exec_update_done(struct run_exec *e);

/* ---- runs_output.c ---- */
/* The monitor's half: moves what the pipe holds into the spill file. */
void stream_pump(struct sbx_run *r, struct run_exec *e, int which);
void stream_close(struct sbx_run *r, struct run_exec *e, int which); /* mu held */

/* ---- runs_inputs.c ---- */
int inputs_from_request(struct sbx_run *r, const Sbx__V1__CreateRunRequest *req,
			struct sbx_rpc_status *st);
void inputs_free(struct sbx_run *r);
/* mu held: NULL when every input is complete, else the first missing path. */
const char *inputs_missing(struct sbx_run *r);

/* ---- runs_artifacts.c ---- */
struct artifact_list {
	Sbx__V1__Artifact **items;
	size_t n;
	uint32_t skipped;
	uint64_t oversize; /* sparse files larger than out_mb: counted in skipped */
	bool partial; /* more than RUN_ARTIFACTS_MAX entries */
};
int artifacts_list(struct sbx_run *r, int out_fd, struct artifact_list *al, struct sbx_err *err);
void artifacts_list_free(struct artifact_list *al);
void artifacts_forget(struct sbx_run *r); /* frees hash cache and fetch cursors */

/* ---- runs_status.c: response pieces (every member malloc'd) ---- */
Sbx__V1__ExecStatus *exec_status_new(struct run_exec *e); /* mu held */
Sbx__V1__Policy *policy_copy(const SbxPolicy *p);
char *xstrdup(const char *s);

/* ---- runs_teardown.c ---- */
/* Tears a claimed run down; fills *manifest if non-NULL. */
int run_teardown(struct sbx_run *r, Sbx__V1__RunManifest **manifest, struct sbx_rpc_status *st);

/* ---- audit (runs_util.c) ---- */
void run_audit(struct sbx_run *r, const char *event, void *fields);
/* mu held: queues an audit line (fields: json_t *, taken) ... */
void run_queue_audit(struct sbx_run *r, const char *event, void *fields);
/* ... which this writes after releasing mu: use it wherever lines may
 * have been queued, so the log is never written under a run's lock. */
void run_unlock(struct sbx_run *r);
/* runs_startup.c: `sbx-helper cleanup`, after sbxd had to kill a helper. */
void runs_cleanup_cgroups(void);

#endif
