/* SPDX-License-Identifier: Apache-2.0 */
/* sbxd's configuration: a JSON file (strict, errors name the JSON path, the
 * same way policies are read) with command-line flags on top. */
#ifndef SBX_CONFIG_H
#define SBX_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* The most of sbxd's own descriptors one running exec holds: its stdout
 * and stderr pipes' read ends and their two spill files (runs_output.c),
 * a streamed stdin's write end (runs_stdin.c), and egress deny's resolver
 * socket and connect watch (runs_deny.c). The descriptors an Exec opens
 * only while it is answered (the command's ends of those pipes, a stdin
 * memfd) are its worker's (16 each in the reserve), and an egress exec's
 * listener is the proxy's (its listeners_max, egress.c). An Exec is
 * charged this many at admission, within its run's exec_fds_share, and
 * gives them back once every one of them is closed or handed to the closer
 * (runs_monitor.c). */
#define SBX_EXEC_FDS 7
/* Descriptors of ended execs and of ended runs' directories that sbxd's
 * closer threads hold at most, waiting or being closed (runs_closer.h): in
 * sbxd's own reserve (rpc_server.c), not in a run's. */
#define SBX_CLOSER_FDS 16
/* exec_fds_per_run at most: RUN_EXECS_RUNNING_MAX (64) execs' worth. */
#define SBX_EXEC_FDS_PER_RUN_MAX (64 * SBX_EXEC_FDS)

#define SBX_CONFIG_MAX_LISTEN	  8
#define SBX_CONFIG_MAX_TOKENS	  256
#define SBX_CONFIG_MAX_INPUT_DIRS 32
#define SBX_CONFIG_MAX_OPERATORS  64
#define SBX_CONFIG_IDENTITY_MAX	  128 /* struct sbx_identity's name, NUL included */

#define SBX_IDLE_SECONDS_DEFAULT	 600 /* idle_seconds_default */
#define SBX_EXPIRED_KEEP_SECONDS_DEFAULT 600 /* expired_keep_seconds */
#define SBX_DRAIN_SECONDS_DEFAULT	 300 /* drain_seconds */
#define SBX_DRAIN_SECONDS_MAX		 86400

struct sbx_token {
	char name[64];	    /* the identity it grants: "token:<name>" */
	uint8_t sha256[32]; /* of the token's bytes; the token itself is never stored */
};

/* Administrator ceilings on what a CreateRun may ask (config "limits_max";
 * config_limits.c has the defaults). */
struct sbx_limits_max {
	uint32_t cpu_millis;
	uint64_t memory_mb;
	uint32_t script_seconds;
	uint32_t run_seconds;
	uint32_t idle_seconds; /* a run's lease */
	uint32_t pids;	       /* default min(4096, the host's pid_max) */
	uint64_t out_mb;
	uint64_t tmp_mb;
	uint64_t output_kb;
	uint64_t input_bytes; /* the sum of CreateRun.inputs[].size */
	uint32_t inputs;      /* entries in CreateRun.inputs */
	/* Open files a run may hold: each of its processes gets RLIMIT_NOFILE
	 * files / limits.pids (at most 4096; run_files.h). Default
	 * min(262144, half of fs.file-max / runs_max less pinned_files);
	 * written, runs_max of it and of pinned_files must fit in half of
	 * fs.file-max. */
	uint64_t files;
	/* Not a key: the files a run at these ceilings (its memory cgroup's
	 * memory_mb + out_mb + 2 x tmp_mb, pids) may pin through mappings
	 * besides (run_files.h), set when the config is checked against the
	 * host's fs.file-max. */
	uint64_t pinned_files;
};

/* What callers' uploads and kept output may take of state_dir (config
 * "quotas"); 0 turns a quota off. */
struct sbx_quotas {
	uint64_t identity_mb;		  /* per identity, inputs and output spill together */
	uint64_t host_mb;		  /* all identities together */
	uint64_t reserve_mb;		  /* free space on state_dir no write may take */
	uint64_t reserve_inodes;	  /* free inodes on state_dir no CreateRun may take */
	uint64_t audit_identity_kb_per_s; /* an identity's audit log lines */
};

/* What the host can give runs (config "capacity"; runs_capacity.c): a
 * CreateRun whose policy can never fit is INVALID_ARGUMENT, one that does
 * not fit beside the runs committed now RESOURCE_EXHAUSTED. */
/* capacity.memory_reserve_mb not written: 1024 MiB, or an eighth of the
 * memory if that is less, so that a small host (a 2 GiB VM, a laptop's
 * private sbxd) still runs a default policy (runs_capacity.c). */
#define SBX_MEMORY_RESERVE_AUTO UINT64_MAX
#define SBX_MEMORY_RESERVE_MB	1024

struct sbx_config_capacity {
	uint64_t cpu_millis; /* the host's CPUs x 1000; 0: measured (CPUs sbxd may use) */
	uint64_t memory_mb;  /* the host's memory; 0: measured (MemTotal or sbxd's cgroup) */
	uint32_t cpu_overcommit_percent;    /* allowed = capacity x this / 100; default 400 */
	uint32_t memory_overcommit_percent; /* default 100 */
	/* kept for the host and sbxd; default SBX_MEMORY_RESERVE_AUTO */
	uint64_t memory_reserve_mb;
};

/* Bounds on connections (rpc/conn_guard.c); docs/operator/connections.md says what each costs. */
struct sbx_config_connections {
	uint32_t per_listener; /* open connections, pending ones included; default 1024 */
	uint32_t per_peer;     /* across listeners (uid on ipc, address on tcp); 64 */
	uint32_t new_per_peer_per_second;   /* new connections, burst as many; 50 */
	uint32_t idle_seconds;		    /* a connection with no request in hand; 300 */
	uint32_t message_seconds;	    /* a request arriving on ipc or tcp; 30 */
	uint32_t first_request_seconds;	    /* ipc, tcp: accept to a whole first request; 10 */
	uint32_t pending_bytes_per_peer_mb; /* announced, incomplete messages of a peer; 16 */
	uint32_t pending_bytes_mb;	    /* of every peer together; 256 */
	bool per_listener_given;	    /* written; if not, it shrinks to fit RLIMIT_NOFILE */
};

#define SBX_CONFIG_MAX_EGRESS_DESTINATIONS 256

/* Host-wide limits on one egress destination, across every run (config
 * "egress.destinations": {"host:port": {...}}); 0 turns a limit off. The
 * host is normalized as an allowlist entry is (common/hostname.h), and may
 * be a wildcard "*.suffix". */
struct sbx_egress_destination {
	char *host;
	uint32_t port;
	uint64_t bytes_per_second;	 /* both directions together */
	uint32_t connections_per_minute; /* new connections */
	uint32_t max_concurrent;	 /* open at once */
};

/* sbxd's egress proxy (server/egress/, config "egress"). */
struct sbx_config_egress {
	char *hosts_file;	      /* names looked up here first; default /etc/hosts; "" none */
	char *resolv_conf;	      /* nameservers; default /etc/resolv.conf; "" none */
	uint32_t head_seconds;	      /* accept to a whole request head; default 10 */
	uint32_t lookup_seconds;      /* name lookup; default 5 */
	uint32_t connect_seconds;     /* TCP connect to the destination; default 10 */
	uint32_t idle_seconds;	      /* a relayed connection with no byte either way; 300 */
	uint32_t connections_per_run; /* open at once per run, heads included; default 256 */
	uint32_t connections_max;     /* open at once, every run; default 4096 */
	uint32_t records_per_run;     /* kept for Status, the oldest summarized; 256 */
	uint32_t accepts_per_run_per_second; /* a run's new connections, burst twice; 50 */
	/* An identity's runs' new connections together, burst twice; 100 (0 in
	 * a struct not read from a file: none). */
	uint32_t accepts_per_identity_per_second;
	/* Not a file key: RLIMIT_NOFILE's descriptors the proxy must leave to
	 * the rest of sbxd (sbx_rpc_fd_need), set before it starts; 0 (a
	 * program other than sbxd): the proxy takes at most half. */
	uint64_t fd_reserve;
	struct sbx_egress_destination destinations[SBX_CONFIG_MAX_EGRESS_DESTINATIONS];
	size_t n_destinations;
};

/* The "images" section (config_images.c): the image store and what one
 * import may write (server/images/images.h). 0 in a bound: its default. */
struct sbx_config_images {
	char *dir;	     /* NULL: <state_dir>/images */
	bool allow_unpinned; /* a policy's name:tag without @sha256: runs; default false */
	uint64_t max_entries, max_bytes, max_file_bytes;
};

/* The "metrics" section (config_metrics.c): the Prometheus listener. */
struct sbx_config_metrics {
	char *listen;	   /* "127.0.0.1:9464", "[::1]:9464"; NULL (default): off */
	bool allow_remote; /* listen may be a non-loopback address; default false */
};

/* One shape of the warm pool (config_pool.c): a policy and how many
 * sandboxes built from it sbxd keeps ready (docs/operator/pool.md). */
#define SBX_CONFIG_MAX_POOL	 16
#define SBX_CONFIG_POOL_SIZE_MAX 256
struct sbx_config_pool_shape {
	char name[64];	   /* unique, 1..63 of A-Z a-z 0-9 . _ - */
	char *policy_json; /* the policy document (inline, or policy_file's bytes) */
	char *policy_file; /* where it came from; NULL when inline */
	uint32_t size;	   /* members kept ready; 0 (default): none, nothing spent */
};

struct sbx_config {
	/* ipc://PATH, tls+tcp://HOST:PORT, tcp:// (insecure) */
	char *listen[SBX_CONFIG_MAX_LISTEN];
	size_t n_listen;
	char *state_dir;      /* per-run directories (inputs, output spill); default /var/lib/sbx */
	char *helper;	      /* sbx-helper; default: next to sbxd, ../helper/sbx-helper,
				 ../libexec/sbx/sbx-helper, PATH */
	char *cgroup_root;    /* passed to sbx-helper --cgroup-root; NULL: its default */
	bool rlimit_fallback; /* passed as --allow-rlimit-fallback; default false */
	/* "host_uids": "shared" (true) runs every sandbox as sbxd's own uid;
	 * default "subordinate": a uid of /etc/subuid's for each run. */
	bool host_uids_shared;
	char *host_id_dir; /* --host-id-dir for every helper; NULL: the helper's default */
	char *log_path;	   /* the audit log (JSON lines); NULL: stderr */
	char *tls_cert;	   /* server certificate + key (PEM) */
	char *tls_key;
	char *tls_client_ca; /* CA that client certificates must chain to */
	struct sbx_token tokens[SBX_CONFIG_MAX_TOKENS];
	size_t n_tokens;
	/* same-host CreateRun.input_dir may be under these */
	char *input_dirs[SBX_CONFIG_MAX_INPUT_DIRS];
	size_t n_input_dirs;
	bool insecure; /* allow plain tcp:// (with a warning) */
	/* ExportArtifacts: same-host callers get /out's files as descriptors */
	bool same_host_export;
	/* Its deadlines: one record's bytes taken, the whole call. */
	uint32_t same_host_record_ms;
	uint32_t same_host_call_ms;
	/* ImportInputs: same-host callers upload over a socket (its
	 * deadlines are the two above) */
	bool same_host_import;
	/* Each run's next exec init made ahead (sbx-helper serve without
	 * --no-prepare); default true. */
	bool exec_prepare;
	uint32_t runs_max;		/* host-wide; default 64 */
	uint32_t runs_max_per_identity; /* default 16; runs that stopped do not count */
	/* A policy's limits.idle_seconds when it says 0 or nothing; default 600
	 * (at most limits_max.idle_seconds). */
	uint32_t idle_seconds_default;
	/* An expired or failed run keeps its artifacts this long, then sbxd
	 * tears it down itself; default 600. */
	uint32_t expired_keep_seconds;
	/* Descriptors of sbxd's that one run's running execs may hold between
	 * them (SBX_EXEC_FDS an exec): as written, 0 for "fit RLIMIT_NOFILE";
	 * exec_fds_share is what sbxd uses, set at start by
	 * sbx_rpc_fit_exec_fds (rpc.h), never by the config file. */
	uint32_t exec_fds_per_run;
	uint32_t exec_fds_share;
	uint32_t workers;	    /* worker threads; default 16 */
	uint32_t ipc_mode;	    /* socket file mode; default 0660 */
	uint64_t max_message_bytes; /* RECVMAXSZ per listener; default 4 MiB + 64 KiB */
	struct sbx_limits_max limits_max;
	struct sbx_quotas quotas;
	char *log_group; /* may read the audit log (0640); NULL: sbxd alone (0600) */
	struct sbx_config_connections connections;
	struct sbx_config_egress egress;
	struct sbx_config_images images;
	struct sbx_config_metrics metrics;
	/* Identities that may see and end every run, drain and undrain
	 * ("uid:N", "token:NAME", "tls:NAME"); rpc_auth.c marks them. */
	char operators[SBX_CONFIG_MAX_OPERATORS][SBX_CONFIG_IDENTITY_MAX];
	size_t n_operators;
	struct sbx_config_capacity capacity;
	/* After SIGTERM, runs already there go on this long at most (their
	 * callers tear them down, or they expire), then sbxd tears the rest
	 * down and exits; default 300 (the unit's TimeoutStopSec is 330). */
	uint32_t drain_seconds;
	/* The warm pool (config_pool.c): shapes, the age after which a ready
	 * member is rebuilt (seconds, default 600) and the builds per second
	 * its refill may start (a token bucket, default 4). */
	struct sbx_config_pool_shape pool[SBX_CONFIG_MAX_POOL];
	size_t n_pool;
	uint32_t pool_max_age_seconds;
	uint32_t pool_builds_per_second;
};

/* What the command line sets; NULL (or n_listen 0) leaves the file's. */
struct sbx_config_flags {
	const char *listen[SBX_CONFIG_MAX_LISTEN]; /* replaces the file's list */
	size_t n_listen;
	const char *state_dir, *cgroup_root, *log;
};

/* Defaults, then the file (if path is non-NULL). */
int sbx_config_load(const char *path, struct sbx_config *cfg, struct sbx_err *err);
/* Flags win over the file, and are held to the file's rules; an error names
 * the flag ("--state-dir var/sbx: must be an absolute path"). */
int sbx_config_apply_flags(struct sbx_config *cfg, const struct sbx_config_flags *f,
			   struct sbx_err *err);
/* Checks url against the listener rules (listen_url.h) with what cfg offers
 * (TLS files, tokens, insecure); where names it in the error. */
int sbx_config_check_listen(const struct sbx_config *cfg, const char *url, const char *where,
			    struct sbx_err *err);
void sbx_config_free(struct sbx_config *cfg);
/* Whether runs_max runs at their ceilings (descriptors and the files their
 * memory may pin) fit in half of fs.file-max, and vm.max_map_count: shrinks
 * an unwritten limits_max.files (and pids) to fit, refuses otherwise naming
 * the sysctl; sets limits_max.pinned_files. sbx_config_load calls it with
 * this host's values; the unit tests with others. */
int sbx_config_fit_files(struct sbx_config *cfg, uint64_t file_max, uint64_t max_map_count,
			 bool files_written, bool pids_written, struct sbx_err *err);
int sbx_config_check_files(struct sbx_config *cfg, bool files_written, bool pids_written,
			   struct sbx_err *err);

/* config_reload.c: the keys that differ between now and next and that a
 * reload (SIGHUP) cannot apply (listen, state_dir, helper, cgroup_root,
 * rlimit_fallback, host_uids, host_id_dir, input_dirs, insecure,
 * same_host_export, same_host_record_ms, same_host_call_ms, same_host_import,
 * exec_prepare, runs_max,
 * workers, ipc_mode, max_message_bytes, connections, egress, images), named
 * in out (", "-separated, cut at size); returns how many. The rest (tokens,
 * tls files, runs_max_per_identity, idle_seconds_default,
 * expired_keep_seconds, limits_max, quotas, log, log_group, drain_seconds)
 * a reload applies. */
size_t sbx_config_restart_keys(const struct sbx_config *now, const struct sbx_config *next,
			       char *out, size_t size);

/* config_limits.c: the defaults of limits_max and quotas (their tables'
 * rows, config_keys.h). */
void sbx_config_limits_defaults(struct sbx_config *cfg);

/* config_egress.c: what the "egress" section holds freed. */
void sbx_config_egress_free(struct sbx_config_egress *eg);

/* config_images.c: the store's directory (images.dir, else
 * <state_dir>/images; malloc'd, NULL without memory), and what the
 * section holds freed. */
char *sbx_config_images_dir(const struct sbx_config *cfg);
void sbx_config_images_free(struct sbx_config_images *im);

/* config_pool.c: what the "pool" list holds freed. */
void sbx_config_pool_free(struct sbx_config *cfg);

/* config_metrics.c: whether s is "IPv4:port" or "[IPv6]:port" (an error
 * naming metrics.listen otherwise) and whether its address is loopback;
 * what the "metrics" section holds freed. */
int sbx_config_metrics_address(const char *s, bool *loopback, struct sbx_err *err);
void sbx_config_metrics_free(struct sbx_config_metrics *m);

#endif
