/* SPDX-License-Identifier: Apache-2.0 */
/* libsbxclient: the C client of sbxd's RPC API (proto/sbx/v1/sandbox.proto).
 *
 * One sbx_client holds one nng REQ socket dialed to one endpoint. Every call
 * is one Request/Response exchange on its own REQ context, so a client may be
 * shared by threads and calls may run concurrently (the CLI reads stdout and
 * stderr of an exec in parallel while a third thread waits for its end).
 *
 * Errors, in sbx's one idiom (err.h): a function that fails returns -1 or
 * NULL and fills a caller-owned struct whose message names the outermost
 * context first ("PutInput a.csv at 0: <what sbxd said>").
 *  - setting up (sbx_client_open, local files) fills a struct sbx_err;
 *  - a call fills a struct sbx_rpc_status (rpc_status.h): a gRPC code and,
 *    in .err, the struct sbx_err saying why (.err.msg is empty on success;
 *    .err.errnum is the errno of a local system error, else 0). The
 *    server's codes and messages come through unchanged; transport failures
 *    become UNAVAILABLE (no server, connection lost, TLS handshake refused)
 *    or DEADLINE_EXCEEDED (no connection or no answer within the call's
 *    timeout: a black-holed address, a hung server); local failures around
 *    a call (a file that cannot be read, a digest mismatch) use
 *    INVALID_ARGUMENT, INTERNAL or DATA_LOSS. Only the structs are API:
 *    the sbx_fail and sbx_rpc_fail helpers those headers also declare are
 *    the library's own and not exported by libsbxclient.so.
 *
 * Retries: a call that fails with UNAVAILABLE is tried again (by default 2
 * more times, after 100 ms and 200 ms). Calls that change something
 * (CreateRun, PutInput, Exec, Signal, WriteStdin, ExportArtifacts,
 * ImportInputs, Teardown) carry a request id: a
 * random one per call, the same on every try of that call, or
 * sbx_call_opts.request_id. sbxd answers a repeat of an id it has seen from
 * the same caller with the first answer, byte for byte, for 10 minutes
 * after that answer (a repeat that arrives while the first still runs
 * waits for it), instead of acting twice: a retried Exec starts one
 * process, a retried Teardown gets the run's manifest rather than
 * NOT_FOUND. An answer that says to try again (UNAVAILABLE,
 * RESOURCE_EXHAUSTED) is not kept, so the retry really runs; the same id
 * with another method or body is INVALID_ARGUMENT. nng's REQ also re-sends
 * by itself after a reconnect, which the same id makes harmless. A new call
 * is a new request: calling sbx_teardown again after it failed sends a new
 * id (sbx_client_call_opts with your own request_id spans calls). The calls
 * that only read (Health, Wait, ReadOutput, Status, ListArtifacts,
 * FetchArtifact, ListRuns) carry no id unless given one.
 *
 * Responses are ordinary protobuf-c messages: free them with their
 * generated __free_unpacked(msg, NULL) (or protobuf_c_message_free_unpacked). */
#ifndef SBX_SBXCLIENT_H
#define SBX_SBXCLIENT_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <sbx/v1/sandbox.pb-c.h>

#include "err.h"
#include "rpc_status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SBX_CLIENT_VERSION "0.1.0"

/* Where sbxd listens on this host unless told otherwise. */
#define SBX_DEFAULT_ENDPOINT	       "ipc:///run/sbx/sbxd.sock"
#define SBX_DEFAULT_TIMEOUT_MS	       30000
#define SBX_DEFAULT_RETRIES	       2
#define SBX_DEFAULT_CONNECT_TIMEOUT_MS 3000
#define SBX_DEFAULT_MAX_MESSAGE	       (8u << 20)
/* PutInput and FetchArtifact move files in chunks of this size (the API's cap). */
#define SBX_CHUNK_BYTES (1u << 20)
/* sbx_fetch_* ask for this many chunks at once (each a call of its own). */
#define SBX_FETCH_WINDOW 4

typedef struct sbx_client sbx_client;

/* Every field may be left zero (or NULL) for its default. */
struct sbx_client_opts {
	const char *endpoint;	     /* ipc://PATH, tls+tcp://HOST:PORT, tcp://HOST:PORT;
					NULL: SBX_DEFAULT_ENDPOINT */
	const char *tls_cert;	     /* tls+tcp: this client's certificate (PEM file) */
	const char *tls_key;	     /* ... and its private key (PEM file, unencrypted) */
	const char *tls_ca;	     /* tls+tcp: CA(s) the server's certificate must chain to;
					required for tls+tcp */
	const char *tls_server_name; /* name the server's certificate must carry;
					NULL: the endpoint's host */
	const char *token;	     /* bearer token sent in every request; NULL: none */
	uint32_t timeout_ms;	     /* per call; 0: SBX_DEFAULT_TIMEOUT_MS */
	int retries;	    /* extra tries after UNAVAILABLE: 0 = default (2), < 0 = none */
	size_t max_message; /* largest response accepted; 0: SBX_DEFAULT_MAX_MESSAGE */
	/* Longest a dial may take (a black-holed address), within the call's
	   timeout; 0: SBX_DEFAULT_CONNECT_TIMEOUT_MS. */
	uint32_t connect_timeout_ms;
};

/* Per-call overrides for sbx_client_call_opts. */
struct sbx_call_opts {
	uint32_t timeout_ms;	/* 0: the client's */
	const char *request_id; /* 1..64 bytes; NULL: a random one for calls that change
				   something, none for the others. Give your own to make a
				   call happen once across restarts of your own process. */
};

/* Progress of a file transfer: bytes done of total (total may be 0 for an
 * empty file). Called after every chunk, from the calling thread. */
typedef void (*sbx_progress_fn)(const char *path, uint64_t done, uint64_t total, void *arg);

/* Checks the options and reads the TLS files; no network yet. The first
 * call dials (blocking, bounded by its timeout), so that "nobody listens"
 * and a refused TLS handshake come back at once as UNAVAILABLE with their
 * reason; after a connection was lost for 2 s, the next call dials again.
 * NULL on bad options or unreadable files, with err filled. */
sbx_client *sbx_client_open(const struct sbx_client_opts *opts, struct sbx_err *err);
void sbx_client_close(sbx_client *c);
const char *sbx_client_endpoint(const sbx_client *c);
/* The per-call timeout in force (opts.timeout_ms or the default). */
uint32_t sbx_client_timeout_ms(const sbx_client *c);

/* Calls in progress, and calls made later, end with CANCELLED within about
 * 100 ms once *flag is non-zero (typically set by a SIGINT handler). NULL
 * removes the flag, e.g. to tear a run down after an interrupt. */
void sbx_client_set_interrupt(sbx_client *c, volatile sig_atomic_t *flag);

/* The generic call: method is "/sbx.v1.Sandbox/<Name>", req the request
 * message; on OK *resp is the unpacked response of type resp_desc and 0 is
 * returned. Otherwise -1, *resp NULL, st filled. */
int sbx_client_call(sbx_client *c, const char *method, const ProtobufCMessage *req,
		    const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp,
		    struct sbx_rpc_status *st);
int sbx_client_call_opts(sbx_client *c, const char *method, const ProtobufCMessage *req,
			 const ProtobufCMessageDescriptor *resp_desc, ProtobufCMessage **resp,
			 const struct sbx_call_opts *o, struct sbx_rpc_status *st);

/* The name of a code as in the .proto ("NOT_FOUND"); "CODE_<n>" if unknown
 * (in a thread-local buffer then). */
const char *sbx_code_name(Sbx__V1__Code code);
/* The name of an enum value of sandbox.proto ("EXITED", "ACTIVE"...). */
const char *sbx_exit_reason_name(Sbx__V1__ExitReason r);
const char *sbx_run_state_name(Sbx__V1__RunState s);
const char *sbx_serving_state_name(Sbx__V1__ServingState s);

/* Typed calls: NULL on failure with st filled; the response otherwise.
 * Wait and ReadOutput give the call timeout_ms plus the client's timeout, so
 * a long poll is never cut short by the transport. */
Sbx__V1__HealthResponse *sbx_health(sbx_client *c, struct sbx_rpc_status *st);
Sbx__V1__CreateRunResponse *sbx_create_run(sbx_client *c, const Sbx__V1__CreateRunRequest *req,
					   struct sbx_rpc_status *st);
Sbx__V1__PutInputResponse *sbx_put_input(sbx_client *c, const Sbx__V1__PutInputRequest *req,
					 struct sbx_rpc_status *st);
Sbx__V1__ExecResponse *sbx_exec(sbx_client *c, const Sbx__V1__ExecRequest *req,
				struct sbx_rpc_status *st);
Sbx__V1__WaitResponse *sbx_wait(sbx_client *c, const char *run_id, const char *exec_id,
				uint32_t timeout_ms, struct sbx_rpc_status *st);
Sbx__V1__ReadOutputResponse *sbx_read_output(sbx_client *c, const Sbx__V1__ReadOutputRequest *req,
					     struct sbx_rpc_status *st);
Sbx__V1__SignalResponse *sbx_signal(sbx_client *c, const char *run_id, const char *exec_id,
				    int signal, struct sbx_rpc_status *st);
/* One chunk (at most SBX_CHUNK_BYTES) of a streamed stdin (an exec started
 * with ExecRequest.stdin_stream) at offset, which must be the bytes taken
 * so far; eof ends it after data. sbxd never waits for the command: the
 * response's `accepted` says how much it has taken in all, and what it did
 * not take (its pipe was full) is sent again, from `accepted`, later.
 * ExecRequest.env, .cwd and .timeout_seconds are an exec's other options;
 * ReadOutputResponse.dropped the bytes of the one gap past output_kb. */
Sbx__V1__WriteStdinResponse *sbx_write_stdin(sbx_client *c, const char *run_id, const char *exec_id,
					     uint64_t offset, const void *data, size_t len,
					     bool eof, struct sbx_rpc_status *st);
Sbx__V1__StatusResponse *sbx_status(sbx_client *c, const char *run_id, struct sbx_rpc_status *st);
Sbx__V1__ListArtifactsResponse *sbx_list_artifacts(sbx_client *c, const char *run_id,
						   struct sbx_rpc_status *st);
Sbx__V1__FetchArtifactResponse *sbx_fetch_artifact(sbx_client *c,
						   const Sbx__V1__FetchArtifactRequest *req,
						   struct sbx_rpc_status *st);
Sbx__V1__TeardownResponse *sbx_teardown(sbx_client *c, const char *run_id,
					struct sbx_rpc_status *st);
Sbx__V1__ListRunsResponse *sbx_list_runs(sbx_client *c, struct sbx_rpc_status *st);
/* Operators (sbxd's config `operators`) only: every identity's runs, each
 * with its owner; PERMISSION_DENIED for anyone else. */
Sbx__V1__ListRunsResponse *sbx_list_all_runs(sbx_client *c, struct sbx_rpc_status *st);
/* Operators only: stop taking new runs (undrain false) or take them again
 * (true; a drain by SIGTERM stays). */
Sbx__V1__DrainResponse *sbx_drain(sbx_client *c, bool undrain, struct sbx_rpc_status *st);

/* Waits (long-polling, as often as needed) until the exec has ended; NULL
 * on failure. The returned status's reason is never RUNNING. */
Sbx__V1__WaitResponse *sbx_wait_end(sbx_client *c, const char *run_id, const char *exec_id,
				    struct sbx_rpc_status *st);

/* sha256 of a local file as 64 lowercase hex digits + NUL; size too if non-NULL. */
int sbx_file_sha256(const char *path, char hex[65], uint64_t *size, struct sbx_err *err);

/* Uploads local_path as remote_path (relative to /data) with PutInput:
 * 1 MiB chunks in order, the last one marked, the first carrying the
 * file's size, sha256 (sbx_file_sha256) and permission bits. A path the
 * run's manifest (CreateRun's inputs) names must match them; another one is
 * declared by them and may be added between execs. sbxd checks the sha256
 * at the end and only then makes the file appear in /data. */
int sbx_put_file(sbx_client *c, const char *run_id, const char *local_path, const char *remote_path,
		 sbx_progress_fn progress, void *progress_arg, struct sbx_rpc_status *st);

/* Downloads the artifact remote_path (relative to /out) into local_path:
 * chunks go to a temporary file in local_path's directory, the sha256 of the
 * bytes received is compared with the one sbxd reports (and with
 * expect_sha256, e.g. ListArtifacts' value, if non-NULL), and only a match is
 * renamed into place. A mismatch is DATA_LOSS and leaves no file behind
 * (a size that changed between chunks, which only an exec can do, is
 * ABORTED). Paths in its messages are escaped (common/text.h). */
int sbx_fetch_file(sbx_client *c, const char *run_id, const char *remote_path,
		   const char *local_path, const char *expect_sha256, sbx_progress_fn progress,
		   void *progress_arg, struct sbx_rpc_status *st);

/* What sbx_fetch_file_ex fetched. */
struct sbx_fetch_info {
	uint64_t size;
	char sha256[65]; /* of the bytes fetched, as sbxd also says */
	bool live;	 /* an exec could still change the file (FetchArtifactResponse.live):
			    the sha256 is of the bytes read then, not final */
};

/* sbx_fetch_file, and: info (if non-NULL) filled on success; expect_live
 * says expect_sha256 is from a listing that was live (ListArtifacts'
 * listing.live). A file that changed while an exec could change it (sbxd
 * said live, or expect_live) is ABORTED, not DATA_LOSS: a size that changed
 * between chunks, bytes that no longer hash as sbxd's fresh digest, or a
 * digest other than the listing's. The message says an exec is running;
 * fetching again after the execs ended gives the final file. */
int sbx_fetch_file_ex(sbx_client *c, const char *run_id, const char *remote_path,
		      const char *local_path, const char *expect_sha256, bool expect_live,
		      sbx_progress_fn progress, void *progress_arg, struct sbx_fetch_info *info,
		      struct sbx_rpc_status *st);

/* A directory to fetch artifacts into (`sbxctl run --out`, `fetch --all`):
 * opened once, its last component never followed (a link there is
 * refused), made (0700) beneath its parent when missing, and refused unless
 * the caller's euid owns it and neither its group nor others can write it:
 * whoever can write a directory can plant a link in it (keys -> ~/.ssh)
 * between our steps. Every directory above it must be owned by root or the
 * caller and writable by no one else unless sticky (/tmp), as OpenSSH asks
 * of the paths it trusts: else its owner could swap a link in on the way.
 * Returns an O_DIRECTORY fd for sbx_fetch_at, or -1
 * with err naming the path and the reason. */
int sbx_dest_open(const char *dir, struct sbx_err *err);

/* sbx_fetch_file_ex into rel (a relative path, e.g. the artifact's) beneath
 * dirfd (sbx_dest_open's): every directory on the way made or opened
 * without following a link and held to sbx_dest_open's rule, the bytes
 * written to a new temporary file there (O_EXCL, never through a link),
 * given `mode` & 0777 (never set-id or sticky) with fchmod once verified
 * (the caller applies its umask) and renamed over rel. What is in the
 * way -- a link, a directory where the file goes, a file where a directory
 * goes, a FIFO -- is refused (FAILED_PRECONDITION naming it), never
 * followed or removed; an existing regular file is replaced. */
int sbx_fetch_at(sbx_client *c, const char *run_id, const char *remote_path, int dirfd,
		 const char *rel, mode_t mode, const char *expect_sha256, bool expect_live,
		 sbx_progress_fn progress, void *progress_arg, struct sbx_fetch_info *info,
		 struct sbx_rpc_status *st);

/* What sbx_export_at exported, per path. */
struct sbx_export_info {
	uint64_t size;
	char sha256[65]; /* of our copy: the bytes now in the destination */
};

/* On sbxd's own host (an ipc:// endpoint) only: the artifacts paths[0..n)
 * (at most 256) of /out copied into rels[i] (NULL: the same paths) beneath
 * dirfd (sbx_dest_open's, with sbx_fetch_at's rules for what is on the
 * way), without chunks over the RPC: sbxd opens each file beneath /out
 * (no link, regular files only) and sends its bytes over a unix socket
 * only this uid listens on (ExportArtifacts); the copy is written before
 * that socket is closed (what tells sbxd it arrived), and its sha256 is
 * sbxd's final digest when sbxd vouches that nothing of the run could
 * write the file while it read it, else read back from the copy: either
 * way of the bytes written. Each file gets its mode in /out & mode_mask
 * & 0777. expect_sha256 (NULL, or n entries, each NULL or a digest, e.g.
 * ListArtifacts'): a copy that differs is not kept, DATA_LOSS (ABORTED
 * with expect_live: an exec changed it). A file that shrinks while it is
 * copied is ABORTED. On tls+tcp:// or tcp://, FAILED_PRECONDITION: use
 * sbx_fetch_at. info gets n entries. */
int sbx_export_at(sbx_client *c, const char *run_id, size_t n, const char *const *paths,
		  const char *const *rels, int dirfd, mode_t mode_mask,
		  const char *const *expect_sha256, bool expect_live, struct sbx_export_info *info,
		  struct sbx_rpc_status *st);

/* On sbxd's own host (an ipc:// endpoint) only: the local regular files
 * local_paths[0..n) (at most 256) uploaded as remote_paths[i] (relative
 * to /data) without chunks over the RPC (ImportInputs): each declared as
 * sbx_put_file's first chunk declares it (size, sha256, permission bits;
 * sha256 NULL, or n entries each NULL or a digest the caller already has,
 * e.g. a manifest's), its bytes sent over a unix socket only sbxd's uid
 * is heard on, checked by sbxd as PutInput checks them, and put in /data
 * only once every file matched. A file without a digest is declared with
 * none first, which sbxd takes for a path the run declared (its manifest:
 * the bytes are checked against that digest, and the file is read once);
 * when sbxd answers that a path is new, those files are hashed here and
 * the call made again. UNIMPLEMENTED when sbxd has it off or its
 * kernel cannot refuse descriptors on that socket (before Linux 6.16);
 * FAILED_PRECONDITION on another transport: use sbx_put_file then. */
int sbx_import_files(sbx_client *c, const char *run_id, size_t n, const char *const *local_paths,
		     const char *const *remote_paths, const char *const *sha256,
		     struct sbx_rpc_status *st);

/* The artifact's bytes written to fd as they arrive (a pipe, a terminal:
 * `sbxctl fetch RUN PATH -`), with the same checks as sbx_fetch_file_ex; the
 * bytes are out before the last check, so a failure (DATA_LOSS, ABORTED)
 * says that what was written is not the file. */
int sbx_fetch_fd(sbx_client *c, const char *run_id, const char *remote_path, int fd,
		 sbx_progress_fn progress, void *progress_arg, struct sbx_fetch_info *info,
		 struct sbx_rpc_status *st);

/* ---- Several hosts (issue 19; discovery.c, fleet.c) ----
 *
 * An sbx_fleet holds several endpoints: tls+tcp:// (or ipc://, tcp://)
 * URLs, and dns+srv://_sbx._tcp.NAME, whose SRV records (a Kubernetes
 * headless Service's, Consul's) name the hosts: each target's address is
 * looked up too (A, else AAAA), the host dialed as tls+tcp://ADDR:PORT and
 * its certificate checked against the target's name; the records are
 * looked up again once their least TTL (at least 1 s) has passed. Lookups
 * go through c-ares to the servers of /etc/resolv.conf, or to
 * $SBX_DNS_SERVER ("127.0.0.1:5353", a test and debug knob).
 *
 * Placement (sbx_fleet_create_run): among the hosts not excluded, up to
 * `sample` (3) whose Health says SERVING, the one whose fullest resource
 * (committed CPU and memory of allowed, used run slots of all) would be
 * the least full with this client's creates in flight and made since that
 * Health (cached health_ttl_ms, 2 s, so placement costs no round trip per
 * create). RESOURCE_EXHAUSTED or a draining refusal: another host, this one
 * not excluded; a connection failure: the host excluded for backoff_ms
 * (doubling to 60 s while it stays down); DEADLINE_EXCEEDED: the same host
 * again with the same idempotency key and request id (at most 3 times)
 * until it answers or cannot be reached, only then another. UNAVAILABLE
 * with in_progress (an earlier attempt of the create ran or runs there):
 * the same host again, pausing 50 ms doubling to 1 s, until four call
 * timeouts have passed, then that error (in_progress still set, naming the
 * host and the key; the host left out of placement for backoff_ms): never
 * another host, which could make a second run. sbx_fleet_set_interrupt
 * ends the wait. At most
 * `attempts` (3) hosts; the final error names each. Every create carries
 * an idempotency key (CreateRunRequest.idempotency_key, made here unless
 * the request has one). A client's dials are bounded by connect_timeout_ms,
 * so a dead host costs at most that per try. Thread-safe. */
#define SBX_HOST_MAX			280 /* a host's name ("target:port") + NUL */
#define SBX_FLEET_MAX_HOSTS		64
#define SBX_FLEET_DEFAULT_SAMPLE	3
#define SBX_FLEET_DEFAULT_ATTEMPTS	3
#define SBX_FLEET_DEFAULT_HEALTH_TTL_MS 2000
#define SBX_FLEET_DEFAULT_BACKOFF_MS	5000
#define SBX_SRV_SCHEME			"dns+srv://"

typedef struct sbx_fleet sbx_fleet;

struct sbx_fleet_opts {
	unsigned sample;	/* 0: SBX_FLEET_DEFAULT_SAMPLE */
	unsigned attempts;	/* 0: SBX_FLEET_DEFAULT_ATTEMPTS */
	uint32_t health_ttl_ms; /* 0: SBX_FLEET_DEFAULT_HEALTH_TTL_MS */
	uint32_t backoff_ms;	/* 0: SBX_FLEET_DEFAULT_BACKOFF_MS */
};

/* A run and the host it lives on: "RUN_ID@HOST" as text. */
struct sbx_run_ref {
	char run_id[129];
	char host[SBX_HOST_MAX]; /* "" when the handle named none */
};

/* Splits a comma list of endpoints (spaces around entries ignored) into
 * out[*n...] (malloc'd, free with sbx_endpoints_free), each checked by
 * sbx_endpoint_check; *n counts on from its value (and is left as it was
 * on failure, what this call added freed). */
int sbx_endpoints_split(const char *list, char **out, size_t max, size_t *n, struct sbx_err *err);
void sbx_endpoints_free(char **v, size_t n);
int sbx_endpoint_check(const char *endpoint, struct sbx_err *err);
/* The name a URL's host goes by ("HOST:PORT"; an ipc:// URL as itself). */
void sbx_host_name_of(const char *url, char *name, size_t size);
/* "RUN_ID" or "RUN_ID@HOST" (the first '@' splits). */
int sbx_run_ref_parse(const char *handle, struct sbx_run_ref *ref, struct sbx_err *err);

/* An SRV record of a DNS answer. */
struct sbx_srv_record {
	uint16_t priority, weight, port;
	uint32_t ttl;
	char target[254]; /* without the trailing dot */
};
/* The SRV records (class IN) of a DNS answer message; records with port 0
 * or the target "." (no service) left out. */
int sbx_srv_parse(const unsigned char *msg, size_t len, struct sbx_srv_record *out, size_t max,
		  size_t *n, struct sbx_err *err);

/* What placement knows of a host: Health's numbers, and this client's own. */
struct sbx_host_load {
	bool serving;
	uint64_t committed_cpu_millis, allowed_cpu_millis;
	uint64_t committed_memory_mb, allowed_memory_mb;
	uint32_t runs_max, run_slots_free, identity_run_slots_free;
	uint32_t pending; /* this client's creates in flight or made since that Health */
};
/* How full the host would be with one more run: the largest of committed
 * CPU and memory over allowed (when known) and used slots over runs_max;
 * lower is better. < 0: it cannot take one (draining, no slot left). */
double sbx_placement_score(const struct sbx_host_load *l);

/* endpoints: n strings, each an endpoint or a comma list of them. opts is
 * each host's client options (its endpoint ignored); fo may be NULL. */
sbx_fleet *sbx_fleet_open(const char *const *endpoints, size_t n,
			  const struct sbx_client_opts *opts, const struct sbx_fleet_opts *fo,
			  struct sbx_err *err);
void sbx_fleet_close(sbx_fleet *f);
/* Places and creates the run (see above); ref gets its id and host. */
Sbx__V1__CreateRunResponse *sbx_fleet_create_run(sbx_fleet *f, const Sbx__V1__CreateRunRequest *req,
						 struct sbx_run_ref *ref,
						 struct sbx_rpc_status *st);
/* The client of a host by name (as a sbx_run_ref's), the fleet's own
 * (valid until sbx_fleet_close); a name the fleet does not list is dialed
 * as tls+tcp://HOST (or as the URL it is). Its calls fail UNAVAILABLE
 * when the host does not answer: never another host. A host the fleet
 * knows is returned without a DNS lookup (only an unknown name waits for
 * the SRV records, when they are due). */
sbx_client *sbx_fleet_client(sbx_fleet *f, const char *host, struct sbx_rpc_status *st);
/* sbx_client_set_interrupt for every client of f, now and later; a
 * create's pauses (waiting on a host that says in_progress) end with
 * CANCELLED too once *flag is non-zero. */
void sbx_fleet_set_interrupt(sbx_fleet *f, volatile sig_atomic_t *flag);
/* Whether c is one of f's clients (which sbx_fleet_close closes). */
bool sbx_fleet_owns(sbx_fleet *f, const sbx_client *c);
/* The names of the hosts listed now (looked up again if due); returns
 * how many, at most max; names valid until sbx_fleet_close. */
size_t sbx_fleet_hosts(sbx_fleet *f, const char **names, size_t max, struct sbx_rpc_status *st);

#ifdef __cplusplus
}
#endif

#endif
