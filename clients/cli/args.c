/* SPDX-License-Identifier: Apache-2.0 */
/* Command line of sbxctl: global options, the command, its options. Pure
 * parsing (no environment, no files) so that unit tests can drive it;
 * cli_resolve adds the environment. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "util.h"

static const char *const names[CMD_COUNT] = {
    [CMD_RUN] = "run",	     [CMD_CREATE] = "create",	  [CMD_PUT] = "put",
    [CMD_EXEC] = "exec",     [CMD_STATUS] = "status",	  [CMD_ARTIFACTS] = "artifacts",
    [CMD_FETCH] = "fetch",   [CMD_TEARDOWN] = "teardown", [CMD_RUNS] = "runs",
    [CMD_HEALTH] = "health", [CMD_POLICY] = "policy",	  [CMD_WAIT] = "wait",
    [CMD_LOGS] = "logs",     [CMD_DRAIN] = "drain",	  [CMD_UNDRAIN] = "undrain",
};

#define GLOBAL_HELP                                                                                \
	"Global options (before or after the command):\n"                                          \
	"  --endpoint URL         sbxd's address: ipc://PATH, tls+tcp://HOST:PORT, "               \
	"tcp://HOST:PORT\n"                                                                        \
	"                         (default: $SBX_ENDPOINTS, $SBX_ENDPOINT, else\n"                 \
	"                         " SBX_DEFAULT_ENDPOINT ");\n"                                    \
	"                         several hosts: repeat it, a comma list, or\n"                    \
	"                         dns+srv://_sbx._tcp.NAME (SRV records); create and run then\n"   \
	"                         place the run and print RUN_ID@HOST:PORT, which every\n"         \
	"                         command taking RUN accepts and sends to that host only\n"        \
	"  --tls-cert FILE        client certificate for tls+tcp (default: $SBX_TLS_CERT)\n"       \
	"  --tls-key FILE         its private key (default: $SBX_TLS_KEY)\n"                       \
	"  --tls-ca FILE          CA of the server's certificate (default: $SBX_TLS_CA)\n"         \
	"  --tls-server-name NAME name the server's certificate must carry (default: the\n"        \
	"                         endpoint's host, or $SBX_TLS_SERVER_NAME)\n"                     \
	"  --token T              bearer token (default: $SBX_TOKEN; --token-file keeps it out\n"  \
	"                         of the process list)\n"                                          \
	"  --token-file FILE      read the bearer token from FILE\n"                               \
	"  --call-timeout S       seconds to wait for each answer (default 30)\n"                  \
	"  --json                 print results as JSON (the .proto's field names, as the\n"       \
	"                         policy file writes them)\n"                                      \
	"  -h, --help             help of the tool or of the command\n"

/* run's and create's policy: the document and the flags written over it. */
#define POLICY_HELP                                                                                \
	"\n"                                                                                       \
	"The policy: --policy FILE, else the documented defaults (image host, egress\n"            \
	"deny, every limit at its default); these flags write over either:\n"                      \
	"  --policy FILE        the run policy (JSON)\n"                                           \
	"  -e, --env NAME=VALUE set a variable of the command's environment (repeatable);\n"       \
	"                       -e NAME alone takes this shell's value of NAME, and leaves\n"      \
	"                       NAME out when it is not set (as docker does)\n"                    \
	"  --env-file FILE      NAME=VALUE lines (docker's format: taken as written, no\n"         \
	"                       quotes; NAME alone as -e NAME; # comments, blank lines);\n"        \
	"                       applied before -e, later ones winning\n"                           \
	"  --image REF          image: host, a rootfs directory, or name:tag@sha256:...\n"         \
	"  --memory SIZE        limits.memory_mb: bytes with a k, m or g suffix (512m, 1.5g),\n"   \
	"                       a whole number of MiB\n"                                           \
	"  --cpus N             limits.cpu (fractions allowed: 1.5)\n"                             \
	"  --timeout T          limits.script_seconds: seconds, or with an s, m or h suffix\n"     \
	"  --run-timeout T      limits.run_seconds (as --timeout)\n"                               \
	"  --idle-timeout T     limits.idle_seconds: the run ends after T without a call\n"        \
	"                       (as --timeout; unset: sbxd's default fills it in)\n"               \
	"  --pids N             limits.pids\n"                                                     \
	"  --out-mb N           limits.out_mb (the /out tmpfs)\n"                                  \
	"  --tmp-mb N           limits.tmp_mb (the /tmp and /dev/shm tmpfs)\n"                     \
	"  --allow HOST:PORT    add an egress.allow entry and set egress.policy allowlist\n"       \
	"                       (repeatable; needs sbxd's egress proxy)\n"                         \
	"  --print-policy       print the effective policy (the document, every default\n"         \
	"                       filled in, keys sorted) on stdout and 'digest sha256:HEX' on\n"    \
	"                       stderr, as 'sbxctl policy check' would, and do nothing else\n"

static const char tool_help[] =
    "usage: sbxctl [OPTIONS] COMMAND [ARGS...]\n"
    "\n"
    "Runs untrusted programs in sandboxes of sbxd, on this host or another.\n"
    "\n"
    "Commands:\n"
    "  run [OPTIONS] CMD...   create, upload, run CMD with live output, fetch /out into\n"
    "                         --out DIR, tear down; exits with CMD's status\n"
    "  create [OPTIONS]       create a run; prints its id\n"
    "  put RUN LOCAL REMOTE   upload an input file declared at create\n"
    "  exec RUN [--no-wait] -- CMD...   run CMD in the run; exits with its status\n"
    "  wait RUN EXEC          wait for an exec's end; exits with its status\n"
    "  logs RUN EXEC          an exec's stdout (--stderr: its stderr); --follow to its end\n"
    "  status RUN             the run's state, digests, execs and egress\n"
    "  artifacts RUN          files under /out with size and sha256\n"
    "  fetch RUN PATH [DEST]  download (and verify) one artifact ('-': to stdout); --all DIR\n"
    "                         for every one\n"
    "  teardown RUN           destroy the run; prints its manifest (JSON)\n"
    "  runs [--all]           this caller's runs (--all: every identity's; operators)\n"
    "  health                 the server's version, capacity and what it can enforce\n"
    "  policy check FILE      validate a policy here; print the effective policy and digest\n"
    "  drain, undrain         operators: stop taking new runs, or take them again\n"
    "\n" GLOBAL_HELP "\n"
    "Exit status: 0 on success; 1 when a call fails (\"sbxctl: CODE: message\" on stderr);\n"
    "2 for usage errors; run and exec exit with the command's status (128+N for signal N,\n"
    "124 when script_seconds ran out, 137 for oom, 125 when sbxctl itself failed).\n"
    "'sbxctl COMMAND --help' describes each command.\n";

static const char *const cmd_help[CMD_COUNT] = {
    [CMD_RUN] =
	"usage: sbxctl run [OPTIONS] CMD [ARG...]\n"
	"\n"
	"Creates a run from the policy, uploads every regular file under --data (to\n"
	"/data, with its sha256 in the run's manifest), runs CMD with its stdout and\n"
	"stderr streamed here as they come, fetches and verifies every file of /out into\n"
	"the --out DIR (nothing is fetched without --out), and tears the run down: always,\n"
	"also after an error or an interrupt. Options end at CMD (its own flags stay its\n"
	"own); '--' before CMD works too.\n"
	"\n"
	"Without --endpoint and $SBX_ENDPOINT, and with no sbxd answering at the default\n"
	"socket, a private sbxd is started for the command ($SBX_SBXD, else next to sbxctl,\n"
	"else on PATH) and stopped at the end.\n"
	"\n"
	"  --data DIR      files for /data (read-only inside)\n"
	"  --out DIR       where /out is copied at the end (made 0700 if missing); refused\n"
	"                  before the run is created when it is a link, is not yours, or\n"
	"                  its group or others can write it (they could plant links in\n"
	"                  it), or cannot be written; a link or other non-file in the\n"
	"                  way beneath it is refused, never followed\n"
	"  --label K=V     a label of the run (repeatable)\n"
	"  --stdin FILE    CMD's standard input, streamed ('-': ours); default: ours\n"
	"                  streamed when it is not a terminal, else empty\n"
	"  --cwd DIR       CMD's working directory (default /out); a missing one ends\n"
	"                  the exec setup_failed, naming it\n"
	"  --no-export     with --out on an ipc:// endpoint: fetch /out in chunks over the\n"
	"                  RPC instead of copying descriptors sbxd passes (the "
	"default)\n"
	"  --no-import     upload --data's files in chunks over the RPC even on an ipc://\n"
	"                  endpoint, instead of over a unix socket of ours (the "
	"default)\n" POLICY_HELP "\n"
	"Interrupts: the first SIGINT or SIGTERM is passed to CMD's process group in the\n"
	"sandbox; a second SIGINT kills it. What it left in /out is still fetched (said on\n"
	"stderr), the run is torn down, and sbxctl exits 128+N (130 for SIGINT, 143 for\n"
	"SIGTERM), as a shell does.\n"
	"\n"
	"Exit status: CMD's own; 128+N if a signal N killed it or interrupted sbxctl; 124 if\n"
	"script_seconds or run_seconds ran out; 137 out of memory; 127 if CMD was not\n"
	"found, 126 if it could not be executed; 125 if sbxctl failed (the reason on stderr).\n",
    [CMD_CREATE] =
	"usage: sbxctl create [OPTIONS]\n"
	"\n"
	"Creates a run and prints its id alone on stdout. With --data, every regular\n"
	"file under DIR is declared in the run's manifest (size, sha256) and uploaded;\n"
	"--no-upload only declares them, for 'sbxctl put' later.\n"
	"\n"
	"  --data DIR      files for /data\n"
	"  --no-upload     declare --data's files, do not upload them\n"
	"  --no-import     upload --data's files in chunks even on an ipc:// endpoint\n"
	"  --label K=V     a label of the run (repeatable)\n"
	"  --idempotency-key KEY\n"
	"                  the create's key (1..128 of [A-Za-z0-9._:-]; default: a\n"
	"                  new one): sent again with the same request and KEY,\n"
	"                  the create gets the run KEY made, never a second one\n" POLICY_HELP,
    [CMD_PUT] = "usage: sbxctl put [--no-import] RUN LOCAL REMOTE\n"
		"\n"
		"Uploads the local file as /data/REMOTE, declared with its size, sha256 and mode\n"
		"bits; a REMOTE the run's manifest (sbxctl create --data DIR --no-upload)\n"
		"declares must match them. On an ipc:// endpoint (sbxd on this host) the bytes\n"
		"go over a unix socket of ours (ImportInputs); where sbxd cannot take them\n"
		"that way (turned off, a kernel before Linux 6.16), in chunks.\n"
		"  --no-import     upload in chunks over the RPC (PutInput) instead\n",
    [CMD_EXEC] =
	"usage: sbxctl exec [OPTIONS] RUN CMD [ARG...]\n"
	"\n"
	"Runs CMD in the run's sandbox with live output, and exits with its status\n"
	"(as sbxctl run). Options may come before or after RUN and end at CMD ('--'\n"
	"before CMD works too). --no-wait prints the exec id and returns at once\n"
	"('sbxctl wait' and 'sbxctl logs' follow it). The first SIGINT or SIGTERM goes to\n"
	"CMD's process group, a second SIGINT kills CMD; sbxctl then exits 128+N.\n"
	"\n"
	"  -e, --env NAME=VALUE  set over the policy's env for this exec (repeatable;\n"
	"                  NAME alone: this shell's value, left out when unset)\n"
	"  --cwd DIR       CMD's working directory (default /out)\n"
	"  --timeout T     this exec's wall clock (seconds, or with s, m, h), at most\n"
	"                  the policy's script_seconds (its default)\n"
	"  --stdin FILE    CMD's standard input, streamed ('-': ours); default: ours\n"
	"                  streamed when it is not a terminal, else empty; with\n"
	"                  --no-wait FILE is sent whole (at most 1 MiB)\n"
	"  --no-wait       print the exec id and return\n"
	"With --json the result is one object on stdout (as sbxctl run --json) and\n"
	"CMD's stdout is written to stderr. --tty is refused: sbxctl(1) says why.\n",
    [CMD_WAIT] = "usage: sbxctl wait RUN EXEC [--json]\n"
		 "\n"
		 "Waits until the exec has ended and exits with its status, as sbxctl exec would\n"
		 "(128+N for a signal, 124 for a timeout, 137 out of memory); --json prints\n"
		 "its status as one object. An interrupt stops the waiting, not the exec.\n",
    [CMD_LOGS] = "usage: sbxctl logs RUN EXEC [--follow] [--stderr] [--json]\n"
		 "\n"
		 "Writes what sbxd kept of the exec's stdout (--stderr: its stderr) to stdout,\n"
		 "from the start: what is there now, or with --follow everything until the\n"
		 "exec has ended. Says on stderr when the stream was truncated or cut. --json:\n"
		 "one object with the bytes in base64 (data), next_offset, eof, truncated.\n",
    [CMD_STATUS] = "usage: sbxctl status RUN [--json]\n"
		   "\n"
		   "The run's state, policy and image digests, deadline, labels, and every exec\n"
		   "with its exit reason, times and usage; with an egress allowlist, the newest\n"
		   "connections through the proxy (decision, host:port, address, reason, bytes\n"
		   "out and in) and every destination's totals.\n",
    [CMD_ARTIFACTS] = "usage: sbxctl artifacts RUN [--json]\n"
		      "\n"
		      "The regular files under the run's /out: size, mode, sha256, path.\n",
    [CMD_FETCH] = "usage: sbxctl fetch RUN PATH [DEST]\n"
		  "       sbxctl fetch RUN --all DIR\n"
		  "\n"
		  "Downloads the artifact PATH (relative to /out) to DEST (default: its name,\n"
		  "here; into DEST if that is a directory; '-': to stdout), or every artifact\n"
		  "into DIR. Each file is checked against the sha256 sbxd reports before it is\n"
		  "put in place; to stdout the bytes go out as they come, and a failed check\n"
		  "says that what was written is not the artifact (exit 1). DIR is held to run\n"
		  "--out's rules: yours, not writable by group or others, never through a link.\n"
		  "\n"
		  "--all on an ipc:// endpoint (sbxd on this host) exports: sbxd passes each\n"
		  "file's descriptor and sbxctl copies it in the kernel, hashing its copy\n"
		  "(ExportArtifacts); a copy whose sha256 is not the listing's is not kept.\n"
		  "  --no-export     fetch in chunks over the RPC instead\n",
    [CMD_TEARDOWN] = "usage: sbxctl teardown RUN\n"
		     "\n"
		     "Kills everything in the run, destroys its sandbox, and prints the run's\n"
		     "manifest as JSON (inputs, execs, artifacts with sha256, digests, times).\n",
    [CMD_RUNS] = "usage: sbxctl runs [--all] [--json]\n"
		 "\n"
		 "The runs of this caller: id, state, creation time, execs, labels. --all\n"
		 "(operators, sbxd's config `operators`): every identity's runs, with columns\n"
		 "RUN, OWNER, STATE, AGE, CPU (seconds of the ended execs), MEM (the highest\n"
		 "peak of one), EXECS (running/all); the listing is in sbxd's audit log.\n",
    [CMD_HEALTH] = "usage: sbxctl health [--json]\n"
		   "\n"
		   "sbxd's version, state (SERVING or DRAINING), run slots, what this host can\n"
		   "enforce, the images it holds, and the identity it sees for this caller; for\n"
		   "an operator also the drains in force and the capacity: CPUs and memory, what\n"
		   "runs commit of them, and what they may commit (config capacity).\n",
    [CMD_DRAIN] = "usage: sbxctl drain [--json]\n"
		  "\n"
		  "Operators only: sbxd stops taking new runs (CreateRun answers UNAVAILABLE);\n"
		  "runs already there go on. 'sbxctl undrain' lifts it. Audited.\n",
    [CMD_UNDRAIN] = "usage: sbxctl undrain [--json]\n"
		    "\n"
		    "Operators only: lifts an operator's drain (not the drain of a SIGTERM, which\n"
		    "ends in sbxd's exit). Audited.\n",
    [CMD_POLICY] = "usage: sbxctl policy check FILE\n"
		   "\n"
		   "Validates a policy here, without a server: prints the effective policy\n"
		   "(every default filled in) and its digest and exits 0, or names what is\n"
		   "wrong by its JSON path and exits 1.\n",
};

const char *cli_cmd_name(enum cli_cmd cmd)
{
	return cmd > CMD_NONE && cmd < CMD_COUNT ? names[cmd] : "sbxctl";
}

const char *cli_help(enum cli_cmd cmd)
{
	return cmd > CMD_NONE && cmd < CMD_COUNT ? cmd_help[cmd] : tool_help;
}

enum {
	OPT_ENDPOINT = 256,
	OPT_TLS_CERT,
	OPT_TLS_KEY,
	OPT_TLS_CA,
	OPT_TLS_SERVER_NAME,
	OPT_TOKEN,
	OPT_TOKEN_FILE,
	OPT_TIMEOUT,
	OPT_JSON,
	OPT_VERSION,
	OPT_POLICY,
	OPT_DATA,
	OPT_OUT,
	OPT_LABEL,
	OPT_STDIN,
	OPT_NO_WAIT,
	OPT_NO_UPLOAD,
	OPT_ALL,
	OPT_NO_EXPORT,
	OPT_NO_IMPORT,
	OPT_PRINT_POLICY,
	OPT_FOLLOW,
	OPT_RUNS_ALL,
	OPT_STDERR,
	OPT_TTY,
	OPT_CWD,
	OPT_IDEMPOTENCY_KEY,
};

#define GLOBAL_OPTS                                                                                \
	{"endpoint", required_argument, NULL, OPT_ENDPOINT},                                       \
	    {"tls-cert", required_argument, NULL, OPT_TLS_CERT},                                   \
	    {"tls-key", required_argument, NULL, OPT_TLS_KEY},                                     \
	    {"tls-ca", required_argument, NULL, OPT_TLS_CA},                                       \
	    {"tls-server-name", required_argument, NULL, OPT_TLS_SERVER_NAME},                     \
	    {"token", required_argument, NULL, OPT_TOKEN},                                         \
	    {"token-file", required_argument, NULL, OPT_TOKEN_FILE},                               \
	    {"call-timeout", required_argument, NULL, OPT_TIMEOUT},                                \
	    {"json", no_argument, NULL, OPT_JSON}, {"help", no_argument, NULL, 'h'},               \
	{                                                                                          \
		"version", no_argument, NULL, OPT_VERSION                                          \
	}

/* The flags of run and create that write over the policy. */
#define POLICY_OPTS                                                                                \
	{"policy", required_argument, NULL, OPT_POLICY},                                           \
	    {"print-policy", no_argument, NULL, OPT_PRINT_POLICY},                                 \
	    {"env", required_argument, NULL, CLI_OPT_ENV},                                         \
	    {"env-file", required_argument, NULL, CLI_OPT_ENV_FILE},                               \
	    {"memory", required_argument, NULL, CLI_OPT_MEMORY},                                   \
	    {"cpus", required_argument, NULL, CLI_OPT_CPUS},                                       \
	    {"timeout", required_argument, NULL, CLI_OPT_SCRIPT_TIMEOUT},                          \
	    {"run-timeout", required_argument, NULL, CLI_OPT_RUN_TIMEOUT},                         \
	    {"idle-timeout", required_argument, NULL, CLI_OPT_IDLE_TIMEOUT},                       \
	    {"pids", required_argument, NULL, CLI_OPT_PIDS},                                       \
	    {"image", required_argument, NULL, CLI_OPT_IMAGE},                                     \
	    {"allow", required_argument, NULL, CLI_OPT_ALLOW},                                     \
	    {"out-mb", required_argument, NULL, CLI_OPT_OUT_MB},                                   \
	{                                                                                          \
		"tmp-mb", required_argument, NULL, CLI_OPT_TMP_MB                                  \
	}

static const struct option global_opts[] = {GLOBAL_OPTS, {0}};
static const struct option run_opts[] = {
    GLOBAL_OPTS,
    POLICY_OPTS,
    {"data", required_argument, NULL, OPT_DATA},
    {"out", required_argument, NULL, OPT_OUT},
    {"label", required_argument, NULL, OPT_LABEL},
    {"stdin", required_argument, NULL, OPT_STDIN},
    {"tty", no_argument, NULL, OPT_TTY},
    {"cwd", required_argument, NULL, OPT_CWD},
    {"no-export", no_argument, NULL, OPT_NO_EXPORT},
    {"no-import", no_argument, NULL, OPT_NO_IMPORT},
    {0},
};
static const struct option create_opts[] = {
    GLOBAL_OPTS,
    POLICY_OPTS,
    {"data", required_argument, NULL, OPT_DATA},
    {"label", required_argument, NULL, OPT_LABEL},
    {"no-upload", no_argument, NULL, OPT_NO_UPLOAD},
    {"no-import", no_argument, NULL, OPT_NO_IMPORT},
    {"idempotency-key", required_argument, NULL, OPT_IDEMPOTENCY_KEY},
    {0},
};
static const struct option put_opts[] = {
    GLOBAL_OPTS,
    {"no-import", no_argument, NULL, OPT_NO_IMPORT},
    {0},
};
static const struct option exec_opts[] = {
    GLOBAL_OPTS,
    {"no-wait", no_argument, NULL, OPT_NO_WAIT},
    {"stdin", required_argument, NULL, OPT_STDIN},
    {"tty", no_argument, NULL, OPT_TTY},
    {"env", required_argument, NULL, CLI_OPT_ENV},
    {"cwd", required_argument, NULL, OPT_CWD},
    {"timeout", required_argument, NULL, CLI_OPT_SCRIPT_TIMEOUT},
    {0},
};
static const struct option logs_opts[] = {
    GLOBAL_OPTS,
    {"follow", no_argument, NULL, OPT_FOLLOW},
    {"stderr", no_argument, NULL, OPT_STDERR},
    {0},
};
static const struct option runs_opts[] = {
    GLOBAL_OPTS,
    {"all", no_argument, NULL, OPT_RUNS_ALL},
    {0},
};
static const struct option fetch_opts[] = {
    GLOBAL_OPTS,
    {"all", required_argument, NULL, OPT_ALL},
    {"no-export", no_argument, NULL, OPT_NO_EXPORT},
    {0},
};

static const struct option *cmd_opts(enum cli_cmd cmd)
{
	switch (cmd) {
	case CMD_RUN:
		return run_opts;
	case CMD_CREATE:
		return create_opts;
	case CMD_EXEC:
		return exec_opts;
	case CMD_FETCH:
		return fetch_opts;
	case CMD_PUT:
		return put_opts;
	case CMD_LOGS:
		return logs_opts;
	case CMD_RUNS:
		return runs_opts;
	default:
		return global_opts;
	}
}

static int parse_timeout(const char *s, uint32_t *ms, struct sbx_err *err)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);

	if (!*s || *end || errno || !isfinite(v) || v <= 0 || v > 86400)
		return sbx_fail(
		    err, "--call-timeout %s: must be seconds, more than 0 and at most 86400", s);
	*ms = (uint32_t)ceil(v * 1000);
	return 0;
}

static int check_label(const char *s, struct sbx_err *err)
{
	const char *eq = strchr(s, '=');

	if (!eq || eq == s)
		return sbx_fail(err, "--label %s: must be KEY=VALUE with a non-empty KEY", s);
	if (strlen(s) > 512 + 1)
		return sbx_fail(err, "--label %s: key and value must be at most 256 bytes each", s);
	return 0;
}

/* One option, global or the command's. */
static int take_opt(int c, const char *arg, const char *optname, struct cli *cli,
		    struct sbx_err *err)
{
	switch (c) {
	case OPT_ENDPOINT:
		if (cli->n_endpoints >= CLI_MAX_ENDPOINTS)
			return sbx_fail(err, "--endpoint: at most %d", CLI_MAX_ENDPOINTS);
		cli->endpoints[cli->n_endpoints++] = arg;
		if (!cli->endpoint)
			cli->endpoint = arg;
		cli->endpoint_given = true;
		return 0;
	case OPT_TLS_CERT:
		cli->tls_cert = arg;
		return 0;
	case OPT_TLS_KEY:
		cli->tls_key = arg;
		return 0;
	case OPT_TLS_CA:
		cli->tls_ca = arg;
		return 0;
	case OPT_TLS_SERVER_NAME:
		cli->tls_server_name = arg;
		return 0;
	case OPT_TOKEN:
		cli->token = arg;
		cli->token_file = NULL;
		return 0;
	case OPT_TOKEN_FILE:
		cli->token_file = arg;
		cli->token = NULL;
		return 0;
	case OPT_TIMEOUT:
		return parse_timeout(arg, &cli->timeout_ms, err);
	case OPT_JSON:
		cli->json = true;
		return 0;
	case 'h':
		cli->help = true;
		return 0;
	case 't':
		return take_opt(OPT_TTY, arg, optname, cli, err);
	case OPT_VERSION:
		cli->version = true;
		return 0;
	case OPT_POLICY:
		cli->policy = arg;
		return 0;
	case OPT_DATA:
		cli->data = arg;
		return 0;
	case OPT_OUT:
		cli->out = arg;
		return 0;
	case OPT_STDIN:
		cli->stdin_file = arg;
		return 0;
	case OPT_CWD:
		if (arg[0] != '/')
			return sbx_fail(err, "--cwd %s: must be an absolute path", arg);
		cli->cwd = arg;
		return 0;
	case OPT_LABEL:
		if (cli->n_labels >= CLI_MAX_LABELS)
			return sbx_fail(err, "at most %d labels", CLI_MAX_LABELS);
		if (check_label(arg, err) < 0)
			return -1;
		cli->labels[cli->n_labels++] = arg;
		return 0;
	case OPT_NO_WAIT:
		cli->no_wait = true;
		return 0;
	case OPT_NO_UPLOAD:
		cli->no_upload = true;
		return 0;
	case OPT_IDEMPOTENCY_KEY:
		/* Its form is sbxd's to check (one rule, named in its answer);
		 * but an empty one would be no key at all, and a fresh one
		 * over several hosts: neither is what was asked for. */
		if (!*arg)
			return sbx_fail(err, "--idempotency-key: must not be empty");
		cli->idempotency_key = arg;
		return 0;
	case OPT_ALL:
		cli->all_dir = arg;
		return 0;
	case OPT_NO_IMPORT:
		cli->no_import = true;
		return 0;
	case OPT_NO_EXPORT:
		cli->no_export = true;
		return 0;
	case OPT_PRINT_POLICY:
		cli->print_policy = true;
		return 0;
	case OPT_FOLLOW:
		cli->follow = true;
		return 0;
	case OPT_RUNS_ALL:
		cli->runs_all = true;
		return 0;
	case OPT_STDERR:
		cli->logs_stderr = true;
		return 0;
	case OPT_TTY:
		/* docs/user/cli.md ("Not yet") says why, and what to do meanwhile. */
		return sbx_fail(err,
				"%s: not supported yet: sbxd keeps an exec's stdout and stderr "
				"as two pipes (no pseudo-terminal inside the sandbox); for "
				"line-buffered output use -e PYTHONUNBUFFERED=1 or stdbuf -oL",
				optname);
	case CLI_OPT_ENV:
	case CLI_OPT_ENV_FILE:
	case CLI_OPT_MEMORY:
	case CLI_OPT_CPUS:
	case CLI_OPT_SCRIPT_TIMEOUT:
	case CLI_OPT_RUN_TIMEOUT:
	case CLI_OPT_IDLE_TIMEOUT:
	case CLI_OPT_PIDS:
	case CLI_OPT_IMAGE:
	case CLI_OPT_ALLOW:
	case CLI_OPT_OUT_MB:
	case CLI_OPT_TMP_MB:
		return cli_policy_flag(c, arg, cli, err);
	case ':':
		return sbx_fail(err, "%s needs a value", optname);
	default:
		return sbx_fail(err, "unknown option %s", optname);
	}
}

/* getopt_long over argv from index 1 ("+": stop at the first operand). */
static int parse_opts(int argc, char **argv, const char *shortopts, const struct option *longopts,
		      struct cli *cli, struct sbx_err *err)
{
	int c;

	optind = 0; /* full re-initialisation (glibc), so parsing can run again */
	opterr = 0;
	while ((c = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
		/* For messages: "--name" as written, or "-x". */
		char name[64];
		const char *word = argv[optind - 1 < argc ? optind - 1 : argc - 1];
		if (!strncmp(word, "--", 2))
			snprintf(name, sizeof(name), "%.*s", (int)strcspn(word, "="), word);
		else
			snprintf(name, sizeof(name), "-%c",
				 c > 0 && c < 128 && c != '?' && c != ':' ? c
				 : optopt > 0 && optopt < 128		  ? optopt
									  : '?');
		if (take_opt(c, optarg, name, cli, err) < 0)
			return -1;
	}
	return optind;
}

static int need_operands(const struct cli *cli, int have, int min, int max, struct sbx_err *err)
{
	if (have < min)
		return sbx_fail(err, "%s: missing operand", cli_cmd_name(cli->cmd));
	if (have > max)
		return sbx_fail(err, "%s: too many operands", cli_cmd_name(cli->cmd));
	return 0;
}

static int operands(struct cli *cli, char **op, int n, struct sbx_err *err)
{
	switch (cli->cmd) {
	case CMD_RUN:
		if (cli->print_policy)
			return need_operands(cli, n, 0, INT_MAX, err);
		if (n < 1)
			return sbx_fail(err, "run: missing the command to run");
		cli->argv = op;
		cli->argc = n;
		return 0;
	case CMD_CREATE:
		if (cli->no_upload && !cli->data)
			return sbx_fail(err, "create: --no-upload needs --data DIR");
		return need_operands(cli, n, 0, 0, err);
	case CMD_PUT:
		if (need_operands(cli, n, 3, 3, err) < 0)
			return -1;
		cli->run_id = op[0];
		cli->local = op[1];
		cli->remote = op[2];
		return 0;
	case CMD_EXEC:
		if (n < 1)
			return sbx_fail(err, "exec: missing RUN");
		if (n < 2)
			return sbx_fail(err, "exec: missing the command to run");
		cli->run_id = op[0];
		cli->argv = op + 1;
		cli->argc = n - 1;
		return 0;
	case CMD_STATUS:
	case CMD_ARTIFACTS:
	case CMD_TEARDOWN:
		if (need_operands(cli, n, 1, 1, err) < 0)
			return -1;
		cli->run_id = op[0];
		return 0;
	case CMD_FETCH:
		if (cli->all_dir) {
			if (need_operands(cli, n, 1, 1, err) < 0)
				return -1;
		} else if (need_operands(cli, n, 2, 3, err) < 0) {
			return -1;
		}
		cli->run_id = op[0];
		cli->path = n > 1 ? op[1] : NULL;
		cli->dest = n > 2 ? op[2] : NULL;
		return 0;
	case CMD_RUNS:
	case CMD_HEALTH:
	case CMD_DRAIN:
	case CMD_UNDRAIN:
		return need_operands(cli, n, 0, 0, err);
	case CMD_WAIT:
	case CMD_LOGS:
		if (need_operands(cli, n, 2, 2, err) < 0)
			return -1;
		cli->run_id = op[0];
		cli->exec_id = op[1];
		return 0;
	case CMD_POLICY:
		if (n < 1 || strcmp(op[0], "check"))
			return sbx_fail(err, "policy: the subcommand is 'check FILE'");
		if (need_operands(cli, n, 2, 2, err) < 0)
			return -1;
		cli->path = op[1];
		return 0;
	default:
		return sbx_fail(err, "no command");
	}
}

int cli_parse(int argc, char **argv, struct cli *cli, struct sbx_err *err)
{
	memset(cli, 0, sizeof(*cli));
	int i = parse_opts(argc, argv, "+:h", global_opts, cli, err);
	if (i < 0)
		return -1;
	if (i >= argc) {
		if (cli->help || cli->version)
			return 0;
		return sbx_fail(err, "missing command");
	}
	const char *name = argv[i];
	if (!strcmp(name, "help")) {
		cli->help = true;
		if (i + 1 < argc)
			for (int k = 1; k < CMD_COUNT; k++)
				if (!strcmp(argv[i + 1], names[k]))
					cli->cmd = (enum cli_cmd)k;
		return 0;
	}
	for (int k = 1; k < CMD_COUNT; k++)
		if (!strcmp(name, names[k]))
			cli->cmd = (enum cli_cmd)k;
	if (cli->cmd == CMD_NONE)
		return sbx_fail(err, "unknown command '%s'", name);
	/* The command's own options; global ones are welcome here too. For
	 * run and exec, options end at the command to run (as docker's): its
	 * own flags stay its own, with or without "--". exec takes RUN first,
	 * with options before and after it. */
	int sub_argc = argc - i;
	char **sub_argv = argv + i;
	const char *shortopts = cli->cmd == CMD_RUN	 ? "+:he:t"
				: cli->cmd == CMD_EXEC	 ? "+:he:t"
				: cli->cmd == CMD_CREATE ? ":he:"
							 : ":h";
	int j = parse_opts(sub_argc, sub_argv, shortopts, cmd_opts(cli->cmd), cli, err);
	if (j < 0)
		return -1;
	if (cli->cmd == CMD_EXEC && j < sub_argc && strcmp(sub_argv[j - 1], "--")) {
		/* RUN stands as argv[0] of the second pass. */
		int k =
		    parse_opts(sub_argc - j, sub_argv + j, shortopts, cmd_opts(cli->cmd), cli, err);
		if (k < 0)
			return -1;
		/* The operands stay in place: RUN, then the command. */
		if (k > 1) {
			char *run = sub_argv[j];
			sub_argv[j + k - 1] = run;
			j += k - 1;
		}
	}
	if (cli->help)
		return 0;
	return operands(cli, sub_argv + j, sub_argc - j, err);
}

static int read_token_file(struct cli *cli, struct sbx_err *err)
{
	_cleanup_close_ int fd = open(cli->token_file, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return sbx_fail_errno(err, "--token-file %s", cli->token_file);
	n = read(fd, cli->token_buf, sizeof(cli->token_buf) - 1);
	if (n < 0)
		return sbx_fail_errno(err, "--token-file %s", cli->token_file);
	cli->token_buf[n] = '\0';
	/* A trailing newline (echo > file) is not part of the token. */
	while (n > 0 && (cli->token_buf[n - 1] == '\n' || cli->token_buf[n - 1] == '\r' ||
			 cli->token_buf[n - 1] == ' ' || cli->token_buf[n - 1] == '\t'))
		cli->token_buf[--n] = '\0';
	if (n == 0)
		return sbx_fail(err, "--token-file %s: empty", cli->token_file);
	if (n > CLI_TOKEN_MAX || strlen(cli->token_buf) != (size_t)n)
		return sbx_fail(err, "--token-file %s: a token is 1..%d bytes without NUL",
				cli->token_file, CLI_TOKEN_MAX);
	cli->token = cli->token_buf;
	return 0;
}

static const char *env(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? v : NULL;
}

int cli_resolve(struct cli *cli, struct sbx_err *err)
{
	if (!cli->endpoint && (cli->endpoint = env("SBX_ENDPOINTS")))
		cli->endpoint_given = true;
	if (!cli->endpoint && (cli->endpoint = env("SBX_ENDPOINT")))
		cli->endpoint_given = true;
	if (!cli->endpoint)
		cli->endpoint = SBX_DEFAULT_ENDPOINT;
	if (!cli->n_endpoints)
		cli->endpoints[cli->n_endpoints++] = cli->endpoint;
	/* Several hosts: a list, or discovery. One plain endpoint stays as it was. */
	cli->fleet = cli->n_endpoints > 1;
	for (unsigned i = 0; i < cli->n_endpoints; i++)
		if (strchr(cli->endpoints[i], ',') ||
		    !strncmp(cli->endpoints[i], SBX_SRV_SCHEME, strlen(SBX_SRV_SCHEME)))
			cli->fleet = true;
	if (cli->fleet)
		for (unsigned i = 0; i < cli->n_endpoints; i++) {
			char *v[SBX_FLEET_MAX_HOSTS];
			size_t n = 0;
			if (sbx_endpoints_split(cli->endpoints[i], v, SBX_ARRAY_SIZE(v), &n, err) <
			    0)
				return sbx_err_prefix(err, "--endpoint");
			sbx_endpoints_free(v, n);
		}
	/* RUN_ID@HOST:PORT: the id for sbxd, the host to ask. */
	if (cli->run_id) {
		if (sbx_run_ref_parse(cli->run_id, &cli->run_ref, err) < 0)
			return -1;
		cli->run_id = cli->run_ref.run_id;
		cli->run_host = cli->run_ref.host[0] ? cli->run_ref.host : NULL;
	}
	if (!cli->tls_cert)
		cli->tls_cert = env("SBX_TLS_CERT");
	if (!cli->tls_key)
		cli->tls_key = env("SBX_TLS_KEY");
	if (!cli->tls_ca)
		cli->tls_ca = env("SBX_TLS_CA");
	if (!cli->tls_server_name)
		cli->tls_server_name = env("SBX_TLS_SERVER_NAME");
	if (cli->token_file)
		return read_token_file(cli, err);
	if (!cli->token)
		cli->token = env("SBX_TOKEN");
	if (cli->token && strlen(cli->token) > CLI_TOKEN_MAX)
		return sbx_fail(err, "token: at most %d bytes", CLI_TOKEN_MAX);
	return 0;
}
