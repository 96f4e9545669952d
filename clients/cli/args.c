/* SPDX-License-Identifier: Apache-2.0 */
/* Command line of sbx: global options, the command, its options. Pure
 * parsing (no environment, no files) so that unit tests can drive it;
 * cli_resolve adds the environment. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
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
    [CMD_HEALTH] = "health", [CMD_POLICY] = "policy",
};

#define GLOBAL_HELP                                                                                \
	"Global options (before or after the command):\n"                                          \
	"  --endpoint URL         sbxd's address: ipc://PATH, tls+tcp://HOST:PORT, "               \
	"tcp://HOST:PORT\n"                                                                        \
	"                         (default: $SBX_ENDPOINT, else " SBX_DEFAULT_ENDPOINT ")\n"       \
	"  --tls-cert FILE        client certificate for tls+tcp (default: $SBX_TLS_CERT)\n"       \
	"  --tls-key FILE         its private key (default: $SBX_TLS_KEY)\n"                       \
	"  --tls-ca FILE          CA of the server's certificate (default: $SBX_TLS_CA)\n"         \
	"  --tls-server-name NAME name the server's certificate must carry (default: the\n"        \
	"                         endpoint's host, or $SBX_TLS_SERVER_NAME)\n"                     \
	"  --token T              bearer token (default: $SBX_TOKEN; --token-file keeps it out\n"  \
	"                         of the process list)\n"                                          \
	"  --token-file FILE      read the bearer token from FILE\n"                               \
	"  --timeout S            seconds to wait for each answer (default 30)\n"                  \
	"  --json                 print results as JSON (protobuf's JSON field names)\n"           \
	"  -h, --help             help of the tool or of the command\n"

static const char tool_help[] =
    "usage: sbx [OPTIONS] COMMAND [ARGS...]\n"
    "\n"
    "Runs untrusted programs in sandboxes of sbxd, on this host or another.\n"
    "\n"
    "Commands:\n"
    "  run --policy P [--data DIR] [--out DIR] -- CMD...  create, upload, run CMD with live\n"
    "                         output, fetch /out into DIR, tear down; exits with CMD's status\n"
    "  create --policy P [--data DIR]   create a run; prints its id\n"
    "  put RUN LOCAL REMOTE   upload an input file declared at create\n"
    "  exec RUN [--no-wait] -- CMD...   run CMD in the run; exits with its status\n"
    "  status RUN             the run's state, digests, execs and egress\n"
    "  artifacts RUN          files under /out with size and sha256\n"
    "  fetch RUN PATH [DEST]  download (and verify) one artifact; --all DIR for every one\n"
    "  teardown RUN           destroy the run; prints its manifest (JSON)\n"
    "  runs                   this caller's runs\n"
    "  health                 the server's version, capacity and what it can enforce\n"
    "  policy check FILE      validate a policy here; print the effective policy and digest\n"
    "\n" GLOBAL_HELP "\n"
    "Exit status: 0 on success; 1 when a call fails (\"sbx: CODE: message\" on stderr);\n"
    "2 for usage errors; run and exec exit with the command's status (128+N for signal N,\n"
    "124 when script_seconds ran out, 137 for oom, 125 when sbx itself failed).\n"
    "'sbx COMMAND --help' describes each command.\n";

static const char *const cmd_help[CMD_COUNT] = {
    [CMD_RUN] =
	"usage: sbx run --policy FILE [--data DIR] [--out DIR] [--label K=V]... [--stdin FILE]\n"
	"               -- CMD [ARG...]\n"
	"\n"
	"Creates a run from the policy, uploads every regular file under DIR (to /data,\n"
	"with its sha256 in the run's manifest), runs CMD with its stdout and stderr\n"
	"streamed here as they come, fetches and verifies every file of /out into the\n"
	"--out DIR (nothing is fetched without --out), and tears the run down: always,\n"
	"also after an error or an interrupt.\n"
	"\n"
	"Without --endpoint and $SBX_ENDPOINT, and with no sbxd answering at the default\n"
	"socket, a private sbxd is started for the command ($SBX_SBXD, else next to sbx,\n"
	"else on PATH) and stopped at the end.\n"
	"\n"
	"  --policy FILE   the run policy (JSON)\n"
	"  --data DIR      files for /data (read-only inside)\n"
	"  --out DIR       where /out is copied at the end (created if missing)\n"
	"  --label K=V     a label of the run (repeatable)\n"
	"  --stdin FILE    CMD's standard input ('-': ours; at most 1 MiB); default empty\n"
	"\n"
	"Exit status: CMD's own; 128+N if a signal N killed it; 124 if script_seconds or\n"
	"run_seconds ran out; 137 out of memory; 125 if sbx failed (the reason on stderr).\n",
    [CMD_CREATE] = "usage: sbx create --policy FILE [--data DIR [--no-upload]] [--label K=V]...\n"
		   "\n"
		   "Creates a run and prints its id alone on stdout. With --data, every regular\n"
		   "file under DIR is declared in the run's manifest (size, sha256) and uploaded;\n"
		   "--no-upload only declares them, for 'sbx put' later.\n",
    [CMD_PUT] = "usage: sbx put RUN LOCAL REMOTE\n"
		"\n"
		"Uploads the local file as /data/REMOTE. The run's manifest (sbx create --data\n"
		"DIR --no-upload) must declare REMOTE with this file's size and sha256.\n",
    [CMD_EXEC] = "usage: sbx exec RUN [--no-wait] [--stdin FILE] -- CMD [ARG...]\n"
		 "\n"
		 "Runs CMD in the run's sandbox with live output, and exits with its status\n"
		 "(as sbx run). --no-wait prints the exec id and returns at once. An interrupt\n"
		 "kills CMD.\n",
    [CMD_STATUS] = "usage: sbx status RUN [--json]\n"
		   "\n"
		   "The run's state, policy and image digests, deadline, labels, and every exec\n"
		   "with its exit reason, times and usage; with an egress allowlist, the newest\n"
		   "connections through the proxy (decision, host:port, address, reason, bytes\n"
		   "out and in) and every destination's totals.\n",
    [CMD_ARTIFACTS] = "usage: sbx artifacts RUN [--json]\n"
		      "\n"
		      "The regular files under the run's /out: size, mode, sha256, path.\n",
    [CMD_FETCH] = "usage: sbx fetch RUN PATH [DEST]\n"
		  "       sbx fetch RUN --all DIR\n"
		  "\n"
		  "Downloads the artifact PATH (relative to /out) to DEST (default: its name,\n"
		  "here; into DEST if that is a directory), or every artifact into DIR. Each\n"
		  "file is checked against the sha256 sbxd reports before it is put in place.\n",
    [CMD_TEARDOWN] = "usage: sbx teardown RUN\n"
		     "\n"
		     "Kills everything in the run, destroys its sandbox, and prints the run's\n"
		     "manifest as JSON (inputs, execs, artifacts with sha256, digests, times).\n",
    [CMD_RUNS] = "usage: sbx runs [--json]\n\nThe runs of this caller.\n",
    [CMD_HEALTH] = "usage: sbx health [--json]\n"
		   "\n"
		   "sbxd's version, capacity, what this host can enforce, the images it holds,\n"
		   "and the identity it sees for this caller.\n",
    [CMD_POLICY] = "usage: sbx policy check FILE\n"
		   "\n"
		   "Validates a policy here, without a server: prints the effective policy\n"
		   "(every default filled in) and its digest and exits 0, or names what is\n"
		   "wrong by its JSON path and exits 1.\n",
};

const char *cli_cmd_name(enum cli_cmd cmd)
{
	return cmd > CMD_NONE && cmd < CMD_COUNT ? names[cmd] : "sbx";
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
};

#define GLOBAL_OPTS                                                                                \
	{"endpoint", required_argument, NULL, OPT_ENDPOINT},                                       \
	    {"tls-cert", required_argument, NULL, OPT_TLS_CERT},                                   \
	    {"tls-key", required_argument, NULL, OPT_TLS_KEY},                                     \
	    {"tls-ca", required_argument, NULL, OPT_TLS_CA},                                       \
	    {"tls-server-name", required_argument, NULL, OPT_TLS_SERVER_NAME},                     \
	    {"token", required_argument, NULL, OPT_TOKEN},                                         \
	    {"token-file", required_argument, NULL, OPT_TOKEN_FILE},                               \
	    {"timeout", required_argument, NULL, OPT_TIMEOUT},                                     \
	    {"json", no_argument, NULL, OPT_JSON}, {"help", no_argument, NULL, 'h'},               \
	{                                                                                          \
		"version", no_argument, NULL, OPT_VERSION                                          \
	}

static const struct option global_opts[] = {GLOBAL_OPTS, {0}};
static const struct option run_opts[] = {
    GLOBAL_OPTS,
    {"policy", required_argument, NULL, OPT_POLICY},
    {"data", required_argument, NULL, OPT_DATA},
    {"out", required_argument, NULL, OPT_OUT},
    {"label", required_argument, NULL, OPT_LABEL},
    {"stdin", required_argument, NULL, OPT_STDIN},
    {0},
};
static const struct option create_opts[] = {
    GLOBAL_OPTS,
    {"policy", required_argument, NULL, OPT_POLICY},
    {"data", required_argument, NULL, OPT_DATA},
    {"label", required_argument, NULL, OPT_LABEL},
    {"no-upload", no_argument, NULL, OPT_NO_UPLOAD},
    {0},
};
static const struct option exec_opts[] = {
    GLOBAL_OPTS,
    {"no-wait", no_argument, NULL, OPT_NO_WAIT},
    {"stdin", required_argument, NULL, OPT_STDIN},
    {0},
};
static const struct option fetch_opts[] = {
    GLOBAL_OPTS,
    {"all", required_argument, NULL, OPT_ALL},
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
		return sbx_fail(err, "--timeout %s: must be seconds, more than 0 and at most 86400",
				s);
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
	case OPT_ALL:
		cli->all_dir = arg;
		return 0;
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
				 optopt > 0 && optopt < 128 ? optopt : '?');
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
		if (!cli->policy)
			return sbx_fail(err, "run: missing --policy FILE");
		if (n < 1)
			return sbx_fail(err, "run: missing the command to run (after --)");
		cli->argv = op;
		cli->argc = n;
		return 0;
	case CMD_CREATE:
		if (!cli->policy)
			return sbx_fail(err, "create: missing --policy FILE");
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
			return sbx_fail(err, "exec: missing the command to run (after --)");
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
		return need_operands(cli, n, 0, 0, err);
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
	/* The command's own options; global ones are welcome here too. After
	 * "--" nothing is an option, so CMD's own flags stay CMD's. */
	int sub_argc = argc - i;
	char **sub_argv = argv + i;
	int j = parse_opts(sub_argc, sub_argv, ":h", cmd_opts(cli->cmd), cli, err);
	if (j < 0)
		return -1;
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
	if (!cli->endpoint && (cli->endpoint = env("SBX_ENDPOINT")))
		cli->endpoint_given = true;
	if (!cli->endpoint)
		cli->endpoint = SBX_DEFAULT_ENDPOINT;
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
