/* SPDX-License-Identifier: Apache-2.0 */
/* The run manager's state (struct sbx_runs): its settings, what the host
 * can enforce, and the registry of runs. sbx_runs_init (runs.c) makes one;
 * handlers get it through SBX_HANDLER and each run points back to it.
 *
 * Who guards what:
 *   cfg, host, lock_fd, images: written by sbx_runs_init (runs_startup.c)
 *     before any handler runs, constant until sbx_runs_shutdown: read
 *     without a lock (the store locks what it changes itself);
 *   egress, egress_down: written by sbx_runs_set_egress before any handler
 *     runs, constant after: read without a lock;
 *   live: what a reload may change (sbx_runs_reload), under live_mu, a
 *     leaf lock (nothing is taken while it is held, so it may be taken
 *     under any other): read only as a copy, runs_live(), so that one
 *     decision (a CreateRun) uses one consistent set of values;
 *   tombstones: runs someone other than their owner tore down (an
 *     operator, the drain), under tomb_mu (a leaf lock too), so that their
 *     owners learn why (runs_not_found);
 *   the registry (head ... idem_gone): the registry lock `mu`, which may be
 *     taken before a run's lock, never after it (runs_registry.c). */
#ifndef SBX_RUNS_MANAGER_H
#define SBX_RUNS_MANAGER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "err.h"

struct sbx_run;
struct sbx_egress;
struct img_store;

/* Listings of /out and digest passes at once (runs_artifacts.c). An
 * identity's first is admitted while fewer than RUNS_OUT_PASSES_MAX run
 * (two short workers of the default eight always stay for other calls); a
 * further one, up to RUNS_OUT_PASSES_PER_IDENTITY, only while fewer than
 * RUNS_OUT_PASSES_SHARED run, so that identities holding their share leave
 * room for one pass of each other identity. */
#define RUNS_OUT_PASSES_MAX	     6
#define RUNS_OUT_PASSES_SHARED	     4
#define RUNS_OUT_PASSES_PER_IDENTITY 2

struct runs_settings {
	char *state_dir;
	char *runs_dir;
	char *helper;
	char *cgroup_root;
	bool rlimit_fallback;
	bool host_uids_shared;	 /* --host-uids shared (config host_uids) */
	bool exec_prepare;	 /* without --no-prepare (config exec_prepare) */
	char *host_id_dir;	 /* --host-id-dir (config host_id_dir), or NULL */
	uint64_t host_uid_slots; /* subordinate: runs that can have one at once */
	char *input_dirs[SBX_CONFIG_MAX_INPUT_DIRS]; /* realpath'd */
	size_t n_input_dirs;
	uint32_t runs_max;
	uint32_t exec_fds_share;      /* config exec_fds_share: a run's execs' descriptors */
	uint64_t max_message_bytes;   /* a listing and a manifest fit in it */
	bool allow_unpinned;	      /* images.allow_unpinned: a name:tag alone runs */
	bool same_host_export;	      /* config same_host_export: ExportArtifacts answers */
	uint32_t same_host_record_ms; /* config same_host_record_ms (runs_side.h) */
	uint32_t same_host_call_ms;   /* config same_host_call_ms */
	bool same_host_import;	      /* config same_host_import: ImportInputs answers */
	char *helper_env[8];	      /* NULL-terminated: what sbx-helper runs with */
};

/* The settings a reload may change (sbx_runs_reload): runs already there
 * keep what they were created with; the next decision uses the new ones. */
struct runs_live {
	uint32_t runs_max_per_identity; /* live runs: one that stopped does not count */
	uint32_t idle_seconds_default;	/* a policy's idle_seconds 0 (runs_lease.c) */
	uint32_t expired_keep_seconds;	/* a stopped run is kept, then swept */
	struct sbx_limits_max limits_max;
	struct sbx_quotas quotas;
	struct sbx_config_capacity capacity; /* config capacity (runs_capacity.c) */
};

/* What the host can enforce (`sbx-helper check --json`, asked at start-up). */
struct runs_host {
	bool userns;
	bool seccomp;
	char cgroup[8]; /* "v2", "v1" or "none" */
	/* Measured at start (runs_capacity.c): CPUs x 1000 and MiB sbxd may
	 * use; 0 unknown. config capacity.cpu_millis / memory_mb win. */
	uint64_t cpu_millis;
	uint64_t memory_mb;
	char capacity_source[160]; /* where they come from, for Health */
};

/* Runs torn down by someone other than their owner (an operator, the
 * SIGTERM drain), kept so the owner is told so rather than NOT_FOUND (and
 * nobody else learns the id existed): at most RUNS_TOMBSTONES,
 * each for RUNS_TOMBSTONE_MS, the oldest overwritten (runs_registry.c). */
#define RUNS_TOMBSTONES	  256
#define RUNS_TOMBSTONE_MS (3600 * 1000)

struct runs_tombstone {
	char id[40]; /* RUN_ID_BUF */
	char owner[128];
	char why[192]; /* "torn down by operator token:ops" */
	int64_t at;    /* monotonic ms; 0: empty */
	int64_t at_unix_ms;
};

/* Idempotency keys whose run was torn down (runs_idem.c), so that a late
 * repeat is told so rather than making a second run: at most
 * RUNS_IDEM_GONE host-wide and RUNS_IDEM_GONE_PER_IDENTITY of one
 * identity (its oldest goes first), each for RUNS_IDEM_GONE_MS. */
#define RUNS_IDEM_GONE		    2048
#define RUNS_IDEM_GONE_PER_IDENTITY 128
#define RUNS_IDEM_GONE_MS	    (24 * 3600 * 1000)

struct runs_idem_gone {
	char owner[128];
	char key[129]; /* RUN_IDEM_KEY_MAX + 1 */
	uint8_t digest[32];
	char id[40]; /* RUN_ID_BUF */
	int64_t at;  /* monotonic ms; 0: empty */
	int64_t at_unix_ms;
	uint64_t seq; /* the order they came in (at may tie) */
};

struct sbx_runs {
	struct runs_settings cfg;
	struct runs_host host;
	int lock_fd; /* flock on state_dir/sbxd.lock: one sbxd per state directory */
	/* The image store (images.h) the policies' pinned images come from;
	 * NULL without settings (unit tests): only "host" runs then. Handlers
	 * call it at once: each of its lock holders takes its own open file
	 * description of the store's lock. */
	struct img_store *images;
	/* Why images is NULL when the store could not be opened (its owner,
	 * its mode or a parent's let someone else change it): store images
	 * are refused saying so, Health's images_error says it, host runs. */
	char images_down[SBX_ERR_MAX];
	/* sbxd's egress proxy (server/egress/egress.h), which the runs with an
	 * allowlist use; NULL when it did not start (egress_down says why, ""
	 * when nobody said: unit tests), and then allowlists are refused. */
	struct sbx_egress *egress;
	char egress_down[SBX_ERR_MAX];

	pthread_mutex_t live_mu; /* leaf: live */
	struct runs_live live;
	pthread_mutex_t tomb_mu; /* leaf: tombstones, tombstone_next */
	struct runs_tombstone tombstones[RUNS_TOMBSTONES];
	unsigned tombstone_next; /* the slot the next one takes */

	pthread_mutex_t mu; /* the registry lock */
	pthread_cond_t cv;  /* creating dropped to 0 (CLOCK_MONOTONIC) */
	struct sbx_run *head;
	unsigned count;	     /* every registered run, STARTING or not */
	unsigned creating;   /* registered and still STARTING */
	bool draining;	     /* SIGTERM's drain: CreateRun answers UNAVAILABLE */
	bool operator_drain; /* an operator's Drain: the same, until undrained */
	/* Torn-down runs' idempotency keys (runs_idem.c): under mu, so that a
	 * run leaves the registry and its key enters these at once. */
	struct runs_idem_gone idem_gone[RUNS_IDEM_GONE];
	uint64_t idem_seq;
	uint64_t disk_charged; /* the runs' disk_charged summed (runs_quota.c) */
	/* The warm pool's members (built, being built, or ready), which hold
	 * run slots (runs_max) and capacity as runs do: how many and what
	 * they commit (runs_pool.c). A CreateRun that claims one moves its
	 * share into the registry under this lock. */
	unsigned pool_members;
	uint64_t pool_cpu_millis, pool_memory_mb;
	/* The warm pool (runs_pool.c, its own lock); NULL without one. */
	struct runs_pool *pool;
	/* Listings of /out and digest passes in progress, per identity
	 * (runs_artifacts.c): each is bounded in time, and these bound how
	 * many workers they hold at once. */
	struct {
		char identity[128];
		unsigned n;
	} out_passes[RUNS_OUT_PASSES_MAX];
	/* The sweeper thread (runs_sweeper.c): stopped runs torn down after
	 * expired_keep_seconds. sweeper_stop and sweeper_cv under mu;
	 * the thread itself is sbx_runs_init's and sbx_runs_teardown_all's. */
	pthread_t sweeper;
	bool sweeper_started;
	bool sweeper_stop;
	pthread_cond_t sweeper_cv; /* CLOCK_MONOTONIC */
	/* Closes that wait for a grace period (runs_closer.h): sbx_runs_init's
	 * and runs_free's; NULL (unit tests) closes in place. */
	struct runs_closer *closer;
	/* The runs' host uid slots and their user namespaces (runs_slots.h):
	 * runs_startup's, NULL with host_uids shared (and in unit tests, where
	 * the helper takes its slot itself). */
	struct runs_slots *slots;
};

/* An empty manager without settings (runs_max 0 takes no runs): what
 * sbx_runs_init starts from, and what unit tests fill in by hand. */
struct sbx_runs *runs_new(void);
/* Frees an empty manager (every run torn down) and its settings. */
void runs_free(struct sbx_runs *runs);
/* ---- runs_reload.c ---- */
/* A copy of the settings a reload may change, as they are now. */
struct runs_live runs_live(struct sbx_runs *runs);
/* The settings a reload may change, from sbxd's config. */
void runs_live_from(struct runs_live *live, const struct sbx_config *cfg);

/* ---- runs_startup.c ---- */
/* Settings from sbxd's config, the state directory locked and cleaned,
 * the host asked what it can enforce. */
int runs_startup(struct sbx_runs *runs, const struct sbx_config *cfg, struct sbx_err *err);
void runs_settings_free(struct sbx_runs *runs);
/* `sbx-helper cleanup`, after sbxd had to kill a helper: true when it
 * emptied and removed every stale run cgroup. */
bool runs_cleanup_cgroups(struct sbx_runs *runs);

#endif
