/* SPDX-License-Identifier: Apache-2.0 */
/* The sbx command line: global options before or after the command, each
 * command's options and operands, usage errors, the environment. Drives
 * clients/cli/args.c directly (cli_parse, cli_resolve). */
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "cli.h"

/* Splits a command line on spaces into a fresh argv (getopt permutes it). */
static int split(const char *line, char **argv, char *buf, size_t size)
{
	int argc = 0;

	snprintf(buf, size, "sbx %s", line);
	for (char *s = strtok(buf, " "); s && argc < 63; s = strtok(NULL, " "))
		argv[argc++] = s;
	argv[argc] = NULL;
	return argc;
}

static struct cli cli;
static char line_buf[1024];
static char *args[64];

static bool parses(const char *line)
{
	struct sbx_err err = {0};
	int argc = split(line, args, line_buf, sizeof(line_buf));
	bool ok = cli_parse(argc, args, &cli, &err) == 0;

	if (!ok)
		printf("#   %s: %s\n", line, err.msg);
	return ok;
}

static void refuses(const char *line, const char *want)
{
	struct sbx_err err = {0};
	int argc = split(line, args, line_buf, sizeof(line_buf));
	int rc = cli_parse(argc, args, &cli, &err);

	if (!check(rc < 0 && strstr(err.msg, want), "refuses '%s'", line))
		printf("#   want: %s\n#    got: %s\n", want, rc < 0 ? err.msg : "(parsed)");
}

static bool argv_is(char **argv, int argc, const char *want)
{
	char joined[512] = "";

	for (int i = 0; i < argc; i++) {
		strcat(joined, i ? " " : "");
		strcat(joined, argv[i]);
	}
	return argv[argc] == NULL && !strcmp(joined, want);
}

int main(void)
{
	check(parses("run --policy p.json --data in --out out --label a=1 --label b=x=y -- python3 "
		     "-c print(1) --json") &&
		  cli.cmd == CMD_RUN && !strcmp(cli.policy, "p.json") && !strcmp(cli.data, "in") &&
		  !strcmp(cli.out, "out") && cli.n_labels == 2 && !strcmp(cli.labels[1], "b=x=y") &&
		  argv_is(cli.argv, cli.argc, "python3 -c print(1) --json") && !cli.json,
	      "run: options, labels, and CMD's own flags after -- stay CMD's");
	check(parses("--endpoint ipc:///x.sock --timeout 2.5 --json health") &&
		  cli.cmd == CMD_HEALTH && cli.endpoint_given &&
		  !strcmp(cli.endpoint, "ipc:///x.sock") && cli.timeout_ms == 2500 && cli.json,
	      "global options before the command");
	check(parses("status run-1 --json --endpoint tcp://h:1 --token t") &&
		  cli.cmd == CMD_STATUS && !strcmp(cli.run_id, "run-1") && cli.json &&
		  !strcmp(cli.endpoint, "tcp://h:1") && !strcmp(cli.token, "t"),
	      "global options after the command and its operand");
	check(parses("exec run-1 --no-wait -- ls -l /out") && cli.cmd == CMD_EXEC && cli.no_wait &&
		  !strcmp(cli.run_id, "run-1") && argv_is(cli.argv, cli.argc, "ls -l /out"),
	      "exec RUN --no-wait -- CMD");
	check(parses("fetch run-1 out/report.txt /tmp/r.txt") && cli.cmd == CMD_FETCH &&
		  !strcmp(cli.path, "out/report.txt") && !strcmp(cli.dest, "/tmp/r.txt"),
	      "fetch RUN PATH DEST");
	check(parses("fetch run-1 --all dir") && !strcmp(cli.all_dir, "dir") && !cli.path,
	      "fetch RUN --all DIR");
	check(parses("create --policy p --data d --no-upload") && cli.cmd == CMD_CREATE &&
		  cli.no_upload,
	      "create --no-upload");
	check(parses("put run-1 a.csv data/a.csv") && !strcmp(cli.local, "a.csv") &&
		  !strcmp(cli.remote, "data/a.csv"),
	      "put RUN LOCAL REMOTE");
	check(parses("policy check p.json") && cli.cmd == CMD_POLICY && !strcmp(cli.path, "p.json"),
	      "policy check FILE");
	check(parses("--help") && cli.help && cli.cmd == CMD_NONE, "--help alone");
	check(parses("run --help") && cli.help && cli.cmd == CMD_RUN, "run --help");
	check(parses("help teardown") && cli.help && cli.cmd == CMD_TEARDOWN, "help teardown");
	check(parses("--token-file tf --token t2 runs") && !cli.token_file &&
		  !strcmp(cli.token, "t2"),
	      "the last of --token and --token-file wins");

	refuses("", "missing command");
	refuses("frobnicate", "unknown command 'frobnicate'");
	refuses("run -- true", "run: missing --policy FILE");
	refuses("run --policy p", "run: missing the command to run");
	refuses("run --policy p python3 -c x", "unknown option -c");
	refuses("run --policy", "--policy needs a value");
	refuses("status", "status: missing operand");
	refuses("status a b", "status: too many operands");
	refuses("health --bogus", "unknown option --bogus");
	refuses("--timeout 0 health", "--timeout 0: must be seconds");
	refuses("--timeout abc health", "--timeout abc");
	refuses("create --policy p --label novalue", "--label novalue: must be KEY=VALUE");
	refuses("create --policy p --label =v", "must be KEY=VALUE");
	refuses("create --policy p --no-upload", "--no-upload needs --data");
	refuses("exec run-1", "exec: missing the command");
	refuses("fetch run-1", "fetch: missing operand");
	refuses("policy lint p.json", "policy: the subcommand is 'check FILE'");

	/* The environment fills what flags leave open, and never overrides them. */
	struct sbx_err err;
	setenv("SBX_ENDPOINT", "ipc:///env.sock", 1);
	setenv("SBX_TOKEN", "from-env", 1);
	setenv("SBX_TLS_CA", "/ca.pem", 1);
	check(parses("health") && cli_resolve(&cli, &err) == 0 &&
		  !strcmp(cli.endpoint, "ipc:///env.sock") && cli.endpoint_given &&
		  !strcmp(cli.token, "from-env") && !strcmp(cli.tls_ca, "/ca.pem"),
	      "SBX_ENDPOINT, SBX_TOKEN, SBX_TLS_CA");
	check(parses("--endpoint ipc:///flag.sock --token flag --tls-ca /f.pem health") &&
		  cli_resolve(&cli, &err) == 0 && !strcmp(cli.endpoint, "ipc:///flag.sock") &&
		  !strcmp(cli.token, "flag") && !strcmp(cli.tls_ca, "/f.pem"),
	      "flags win over the environment");
	unsetenv("SBX_ENDPOINT");
	check(parses("health") && cli_resolve(&cli, &err) == 0 &&
		  !strcmp(cli.endpoint, SBX_DEFAULT_ENDPOINT) && !cli.endpoint_given,
	      "no endpoint anywhere: the default socket, marked as not chosen");

	char tf[] = "/tmp/sbx-test-token-XXXXXX";
	int fd = mkstemp(tf);
	check(fd >= 0 && write(fd, "s3cret\n", 7) == 7, "token file written");
	close(fd);
	char line[128];
	snprintf(line, sizeof(line), "--token-file %s runs", tf);
	check(parses(line) && cli_resolve(&cli, &err) == 0 && !strcmp(cli.token, "s3cret"),
	      "--token-file: read, trailing newline dropped, wins over SBX_TOKEN");
	fd = open(tf, O_WRONLY | O_TRUNC);
	close(fd);
	check(parses(line) && cli_resolve(&cli, &err) < 0 && strstr(err.msg, "empty"),
	      "an empty token file is an error");
	unlink(tf);
	check(parses(line) && cli_resolve(&cli, &err) < 0 && strstr(err.msg, "No such file"),
	      "a missing token file is an error: %s", err.msg);

	return check_done();
}
