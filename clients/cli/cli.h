/* SPDX-License-Identifier: Apache-2.0 */
/* The sbxctl command: what its files share. */
#ifndef SBX_CLI_H
#define SBX_CLI_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "err.h"
#include "rpc_status.h"
#include "sbxclient.h"

/* Exit statuses besides a command's own (as sbx-helper's). */
#define EXIT_FAILURE_RPC 1 /* a call or a local step failed */
#define EXIT_USAGE	 2
#define EXIT_TIMEOUT	 124
#define EXIT_SETUP	 125 /* run/exec: sbxctl itself failed; the reason is on stderr */

#define CLI_MAX_LABELS	  64
#define CLI_TOKEN_MAX	  256
#define CLI_MAX_ENV	  256
#define CLI_MAX_ENV_FILES 16
#define CLI_MAX_ALLOW	  256
#define CLI_MAX_ENDPOINTS 64

/* Options of run and create that write over the policy (policy_args.c, policy_doc.c). */
enum {
	CLI_OPT_ENV = 'e',
	CLI_OPT_ENV_FILE = 512,
	CLI_OPT_MEMORY,
	CLI_OPT_CPUS,
	CLI_OPT_SCRIPT_TIMEOUT,
	CLI_OPT_RUN_TIMEOUT,
	CLI_OPT_IDLE_TIMEOUT,
	CLI_OPT_PIDS,
	CLI_OPT_IMAGE,
	CLI_OPT_ALLOW,
	CLI_OPT_OUT_MB,
	CLI_OPT_TMP_MB,
};

struct cli_policy_flags {
	bool any; /* some flag was given: the document is rewritten */
	const char *image;
	const char *env[CLI_MAX_ENV]; /* NAME=VALUE or NAME (the caller's value) */
	unsigned n_env;
	const char *env_files[CLI_MAX_ENV_FILES];
	unsigned n_env_files;
	const char *allow[CLI_MAX_ALLOW]; /* egress allowlist entries */
	unsigned n_allow;
	uint32_t memory_mb, script_seconds, run_seconds, idle_seconds, pids, out_mb,
	    tmp_mb;  /* 0: unset */
	double cpus; /* 0: unset */
};

enum cli_cmd {
	CMD_NONE,
	CMD_RUN,
	CMD_CREATE,
	CMD_PUT,
	CMD_EXEC,
	CMD_STATUS,
	CMD_ARTIFACTS,
	CMD_FETCH,
	CMD_TEARDOWN,
	CMD_RUNS,
	CMD_HEALTH,
	CMD_POLICY,
	CMD_WAIT,
	CMD_LOGS,
	CMD_DRAIN,
	CMD_UNDRAIN,
	CMD_COUNT,
};

struct cli {
	/* Global options (also accepted after the command). */
	const char *endpoint; /* the first of endpoints (or the default) */
	bool endpoint_given;  /* by --endpoint or SBX_ENDPOINT(S): never start a private sbxd */
	const char *endpoints[CLI_MAX_ENDPOINTS]; /* --endpoint, repeated (each may be a list) */
	unsigned n_endpoints;
	bool fleet; /* several endpoints or dns+srv://: runs are placed, handles RUN@HOST */
	const char *tls_cert, *tls_key, *tls_ca, *tls_server_name;
	const char *token, *token_file;
	uint32_t timeout_ms; /* 0: the library's default */
	bool json;
	bool help; /* print the help of cmd (CMD_NONE: the tool's) and exit 0 */
	bool version;

	enum cli_cmd cmd;
	/* The command's options and operands. */
	const char *policy, *data, *out, *stdin_file;
	const char *cwd; /* run, exec: ExecRequest.cwd */
	struct cli_policy_flags pf;
	bool print_policy;
	const char *labels[CLI_MAX_LABELS];
	unsigned n_labels;
	bool no_wait, no_upload;
	const char *idempotency_key; /* create: CreateRunRequest.idempotency_key */
	bool no_export;		     /* run --out, fetch --all: chunks even on ipc:// */
	bool no_import;		     /* run/create --data, put: PutInput chunks even on ipc:// */
	bool follow, logs_stderr;    /* logs */
	const char *exec_id;	     /* wait, logs */
	bool runs_all;		     /* runs --all: every identity's (operators) */
	const char *run_id, *local, *remote, *path, *dest, *all_dir;
	char **argv; /* run/exec: the command for the sandbox, NULL-terminated */
	int argc;

	char token_buf[CLI_TOKEN_MAX + 2];
	/* RUN_ID@HOST given as RUN: run_id points at the id, run_host at the host. */
	struct sbx_run_ref run_ref;
	const char *run_host; /* NULL: the endpoint's (or, with a fleet, refused) */
};

/* Parses argv (argv[0] is the program). Returns 0, or -1 with a usage error
 * in err (exit EXIT_USAGE). Reads no environment and no file. */
int cli_parse(int argc, char **argv, struct cli *cli, struct sbx_err *err);
/* Fills what flags left open from SBX_ENDPOINT, SBX_TLS_CERT, SBX_TLS_KEY,
 * SBX_TLS_CA, SBX_TLS_SERVER_NAME and SBX_TOKEN, and reads --token-file. */
int cli_resolve(struct cli *cli, struct sbx_err *err);
const char *cli_help(enum cli_cmd cmd);
/* One of the CLI_OPT_ policy options with its argument, checked. */
int cli_policy_flag(int opt, const char *arg, struct cli *cli, struct sbx_err *err);
/* The policy document for CreateRun: --policy's file as written when no
 * flag writes over it, else the file (or {"image": "host"}) with the flags
 * applied; malloc'd, NUL-terminated, its length in *len. */
char *cli_policy_document(const struct cli *cli, size_t *len, struct sbx_rpc_status *st);
/* --print-policy: the effective policy of that document on stdout, its
 * digest on stderr; returns the exit status. */
int cli_print_policy(const struct cli *cli);
/* All of p to fd, across short writes and EINTR; -1 with errno. */
int cli_write_all(int fd, const uint8_t *p, size_t n);
/* A whole file ("-": stdin) of at most max bytes, NUL-terminated. */
char *cli_read_file(const char *what, const char *path, size_t max, size_t *len,
		    struct sbx_rpc_status *st);
const char *cli_cmd_name(enum cli_cmd cmd);

/* Output helpers. */
/* "sbxctl: CODE: message" on stderr; each returns -1. */
__attribute__((format(printf, 2, 3))) int cli_error(Sbx__V1__Code code, const char *fmt, ...);
int cli_err_error(Sbx__V1__Code code, const struct sbx_err *err);
int cli_status_error(const struct sbx_rpc_status *st);
/* --json: a message as JSON in the policy file's style (pbjson.h's
 * SBX_PBJSON_POLICY_STYLE, every default written), its policy field (if
 * any) as the policy document; NULL when out of memory. */
json_t *cli_json_of(const ProtobufCMessage *m);
/* Prints j (taken) on stdout, terminal-safe (cli_json_safe). */
int cli_print_json_value(json_t *j);
int cli_print_json(const ProtobufCMessage *m);
/* The client for the command: endpoint if given, else the run's host
 * (RUN@HOST, through the fleet, never another host), else the endpoint.
 * With a fleet and no run host, NULL with an error unless the command
 * places runs (create, run: create_with_inputs picks the host). */
sbx_client *cli_connect(const struct cli *cli, const char *endpoint);
/* The fleet of the endpoints (opened at first use; NULL with the error
 * printed). Its clients are its own: cli_client_closep leaves them. */
sbx_fleet *cli_fleet(const struct cli *cli);
/* A host's client from the fleet (NULL with the error printed). */
sbx_client *cli_connect_host(const struct cli *cli, const char *host);
/* A client closed on scope exit. */
void cli_client_closep(sbx_client **c);
#define _cleanup_client_ __attribute__((cleanup(cli_client_closep)))
void cli_progress(const char *path, uint64_t done, uint64_t total, void *arg);
/* sbxd's refusal of a same-host transfer because it could not connect to
 * our socket (common/export_wire.h, SBX_SIDE_UNREACHED): then chunks. */
bool cli_same_host_unreached(const struct sbx_rpc_status *st);
int cli_exit_status(const Sbx__V1__ExecStatus *s);

/* Printing what a sandbox chose (print.c). A name (an artifact path, an
 * argv word, a label) is escaped as common/text.h's sbx_escape says: C0,
 * DEL, C1, bidi overrides and isolates and non-UTF-8 bytes as "\xNN" per
 * byte, a backslash as "\\", so one name is one line and shows as itself. */
void cli_put_name(FILE *f, const char *s);
/* Text sbxd wrote (an alert, a message, an error), which quotes names
 * escaped already: the same escapes, backslashes kept. */
void cli_put_text(FILE *f, const char *s);
/* A JSON text with DEL, C1 and bidi controls written as \uNNNN: the same
 * JSON value, safe to show on a terminal; malloc'd, NULL when out of memory. */
char *cli_json_safe(const char *json);
/* On stderr, what a listing (ListArtifacts' or the manifest's) says about
 * itself: live digests, files left out, busy files, bad names, and the
 * skipped entries that are none of those. what: "artifacts", "manifest". */
void cli_note_listing(const Sbx__V1__ArtifactListing *l, uint32_t skipped, const char *what);
/* Milliseconds since the epoch as UTC ISO 8601 in buf; "-" for 0. */
const char *cli_time(int64_t ms, char *buf, size_t size);
/* A run's egress (StatusResponse): "N older records summarized" when
 * dropped, then one line per record: connection, time, decision,
 * host:port, address, reason, bytes out and in, "open" while relaying. */
void cli_print_egress(FILE *f, Sbx__V1__EgressRecord *const *records, size_t n_records,
		      uint64_t dropped);
/* The per-destination sums as a table (nothing when there are none). */
void cli_print_egress_destinations(FILE *f, Sbx__V1__EgressDestination *const *d, size_t n);
/* On stderr, that an exec's stream ends early: cut (sbxd stopped keeping
 * it at kept_bytes, and why) or truncated (output_kb). */
/* Where an exec's stream went and how its output there ended, so that a
 * notice starts on a line of its own. */
struct cli_out_tail {
	int fd;
	bool written;
	uint8_t last;
};
void cli_out_wrote(struct cli_out_tail *t, const uint8_t *p, size_t n);
/* The one gap past output_kb, at the place in the output where it is. */
void cli_note_gap(const char *stream, uint64_t dropped, const struct cli_out_tail *t);
/* At the end: the stream was cut (the disk or a quota), or sbxd's record
 * of it truncated while all_shown (no gap came, every byte was written). */
void cli_note_cut(const char *stream, const char *cut, uint64_t kept_bytes, bool truncated,
		  bool all_shown, const struct cli_out_tail *t);

/* The number of the SIGINT, SIGTERM or SIGHUP that arrived outside an
 * exec (0: none), once cli_install_signals ran: calls in progress end
 * CANCELLED. */
extern volatile sig_atomic_t cli_interrupted;
/* Non-zero while live_exec waits for an exec: a signal then only counts
 * in cli_signals, and live_exec passes the first on to the command's
 * process group and kills it at the second. cli_first_signal: the first
 * signal that arrived at all (0: none). */
extern volatile sig_atomic_t cli_forwarding, cli_signals, cli_first_signal;
void cli_install_signals(void);

/* The commands; each returns the process's exit status. */
int cmd_run(struct cli *cli);
int cmd_create(struct cli *cli);
int cmd_put(struct cli *cli);
int cmd_exec(struct cli *cli);
int cmd_status(struct cli *cli);
int cmd_artifacts(struct cli *cli);
int cmd_fetch(struct cli *cli);
int cmd_teardown(struct cli *cli);
int cmd_runs(struct cli *cli);
int cmd_health(struct cli *cli);
int cmd_drain(struct cli *cli);
int cmd_policy(struct cli *cli);
int cmd_wait(struct cli *cli);
int cmd_logs(struct cli *cli);

/* Pieces of run/create/exec. */
struct manifest {
	Sbx__V1__InputFile **files; /* path relative to the data dir, size, sha256 */
	char **local;		    /* the file on this host */
	size_t n;
};
int manifest_build(const char *dir, struct manifest *m, struct sbx_err *err);
void manifest_free(struct manifest *m);
/* The files uploaded: on an ipc:// endpoint, unless no_import, over a
 * socket (sbx_import_files, 256 at a time), falling back to chunks
 * (sbx_put_file) when sbxd says UNIMPLEMENTED; sums: NULL or n digests
 * already known. */
int put_files(sbx_client *c, const char *run_id, size_t n, const char *const *locals,
	      const char *const *remotes, const char *const *sums, bool no_import,
	      struct sbx_rpc_status *st);
/* The manifest's files, as put_files. repeat: the run may be an earlier
 * create's with the same idempotency key (create --idempotency-key), so a
 * file sbxd says is already complete is done, not an error: sbxd checked
 * its bytes against the sha256 this manifest declares (the key's request
 * is the same, inputs and all). */
int manifest_upload(sbx_client *c, const char *run_id, const struct manifest *m, bool no_import,
		    bool repeat, struct sbx_rpc_status *st);
/* Creates a run from cli's policy, labels and data dir (uploading it unless
 * told not to); *run_id is malloc'd; image_digest gets what the image
 * resolved to ("sha256:<hex>", or "unpinned" for host). */
#define CLI_DIGEST_BUF 72
/* With a fleet (cli->fleet), the host is placed (sbx_fleet_create_run), *c
 * becomes its client (the fleet's own) and host[] its name; else host is "". */
int create_with_inputs(sbx_client **c, const struct cli *cli, bool upload, char **run_id,
		       char image_digest[CLI_DIGEST_BUF], char host[SBX_HOST_MAX],
		       struct sbx_rpc_status *st);
/* Starts argv in the run; *exec_id is malloc'd. With stdin_fd non-NULL
 * the command's stdin is streamed (WriteStdin, by live_exec) from *stdin_fd
 * (ours, or --stdin's file; -1: not streamed, the caller closes it);
 * without, --stdin's file is sent whole (at most 1 MiB). exec's --env and
 * --timeout are the exec's own, run's are the policy's; --cwd both. */
int start_exec(sbx_client *c, const struct cli *cli, const char *run_id, char **exec_id,
	       int *stdin_fd, struct sbx_rpc_status *st);
/* Streams the exec's stdout and stderr to ours while it runs, and waits for
 * its end, passing an interrupt on to the command (see cli_forwarding);
 * the exec's stdout goes to stdout_fd (stderr with --json, whose object
 * alone is on stdout); *status is the final
 * ExecStatus (free with free_unpacked of the WaitResponse it came in, via *wait). */
int live_exec(sbx_client *c, const char *run_id, const char *exec_id, int stdout_fd, int stdin_fd,
	      Sbx__V1__WaitResponse **wait, struct sbx_rpc_status *st);
/* --out DIR opened (sbx_dest_open: ours, not writable by others, made if
 * missing), and a file can be written in it; returns its fd. */
int check_out_dir(const char *dir, struct sbx_err *err);
/* run --json, exec --json: the result object (result.c); NULL with st. */
json_t *cli_exec_result(const char *run_id, const Sbx__V1__ExecStatus *s, int exit_status,
			struct sbx_rpc_status *st);
/* Adds the run's artifacts now (ListArtifacts) to a result object. */
int cli_result_add_artifacts(json_t *r, sbx_client *c, const char *run_id,
			     struct sbx_rpc_status *st);
/* Fetches every artifact of the run beneath dirfd (sbx_dest_open's, dir
 * its name for messages), verified, never through a link (sbx_fetch_at). */
int fetch_all(sbx_client *c, const char *run_id, int dirfd, const char *dir, bool export,
	      struct sbx_rpc_status *st);
/* Checks that an artifact path from the server stays inside a directory. */
bool safe_relative_path(const char *p);

/* A private sbxd for `sbxctl run` when no server is there. */
struct private_sbxd {
	int pid;
	char dir[256];
	char endpoint[300];
};
int private_sbxd_start(struct private_sbxd *p, struct sbx_err *err);
void private_sbxd_stop(struct private_sbxd *p);
/* The sbxd binary to run: SBX_SBXD, next to this program, or PATH. */
int private_sbxd_find(const char *self, char *out, size_t size);

#endif
