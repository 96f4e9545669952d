/* SPDX-License-Identifier: Apache-2.0 */
/* The sbxctl command line: global options before or after the command, each
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

	snprintf(buf, size, "sbxctl %s", line);
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
	check(parses("--endpoint ipc:///x.sock --call-timeout 2.5 --json health") &&
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
	check(
	    parses("run -e A=1 --env B --memory 1.5g --cpus 0.5 --timeout 2m --run-timeout 1h "
		   "--pids 9 --image host --allow a.example:443 --out-mb 3 --tmp-mb 4 python3 -c x "
		   "--memory 1") &&
		cli.cmd == CMD_RUN && !cli.policy && cli.pf.any && cli.pf.n_env == 2 &&
		!strcmp(cli.pf.env[1], "B") && cli.pf.memory_mb == 1536 && cli.pf.cpus == 0.5 &&
		cli.pf.script_seconds == 120 && cli.pf.run_seconds == 3600 && cli.pf.pids == 9 &&
		!strcmp(cli.pf.image, "host") && cli.pf.n_allow == 1 && cli.pf.out_mb == 3 &&
		cli.pf.tmp_mb == 4 && argv_is(cli.argv, cli.argc, "python3 -c x --memory 1"),
	    "run: policy flags, no --policy, and options end at the command without --");
	check(parses("run --memory 512MiB --timeout 90 -- true") && cli.pf.memory_mb == 512 &&
		  cli.pf.script_seconds == 90 && argv_is(cli.argv, cli.argc, "true"),
	      "run: 512MiB, bare seconds, and -- still works");
	check(parses("exec --no-wait run-1 --stdin f ls -l") && cli.no_wait &&
		  !strcmp(cli.stdin_file, "f") && !strcmp(cli.run_id, "run-1") &&
		  argv_is(cli.argv, cli.argc, "ls -l"),
	      "exec: options before and after RUN, none after the command");
	check(parses("create --print-policy -e A=1") && cli.print_policy && cli.pf.n_env == 1,
	      "create --print-policy");
	check(parses("logs run-1 e-2 --follow --stderr") && cli.cmd == CMD_LOGS && cli.follow &&
		  cli.logs_stderr && !strcmp(cli.run_id, "run-1") && !strcmp(cli.exec_id, "e-2"),
	      "logs RUN EXEC --follow --stderr");
	check(parses("wait run-1 e-2 --json") && cli.cmd == CMD_WAIT && cli.json &&
		  !strcmp(cli.exec_id, "e-2"),
	      "wait RUN EXEC");
	refuses("wait run-1", "wait: missing operand");
	refuses("run -t true", "-t: not supported yet");
	refuses("exec --tty run-1 true", "--tty: not supported yet");
	check(parses("--help") && cli.help && cli.cmd == CMD_NONE, "--help alone");
	check(parses("run --help") && cli.help && cli.cmd == CMD_RUN, "run --help");
	check(parses("help teardown") && cli.help && cli.cmd == CMD_TEARDOWN, "help teardown");
	check(parses("--token-file tf --token t2 runs") && !cli.token_file &&
		  !strcmp(cli.token, "t2"),
	      "the last of --token and --token-file wins");

	refuses("", "missing command");
	refuses("frobnicate", "unknown command 'frobnicate'");
	refuses("run --policy p", "run: missing the command to run");
	refuses("run --memory 1000k true", "--memory 1000k: must come to a whole number of MiB");
	refuses("run --memory 5x true", "--memory 5x: unknown unit 'x'");
	refuses("run --timeout 5d true", "--timeout 5d: unknown unit 'd'");
	refuses("run --timeout 1.5 true", "--timeout 1.5: must come to a whole number of seconds");
	refuses("run --cpus -1 true", "--cpus -1: not a positive number");
	refuses("run --pids 0 true", "--pids 0: must be a whole number");
	refuses("run -e =x true", "--env =x: must be NAME=VALUE or NAME");
	refuses("exec run-1 --cwd out true", "--cwd out: must be an absolute path");
	refuses("exec run-1 --timeout 0 true", "--timeout 0");
	refuses("run --policy", "--policy needs a value");
	refuses("status", "status: missing operand");
	refuses("status a b", "status: too many operands");
	refuses("health --bogus", "unknown option --bogus");
	refuses("--call-timeout 0 health", "--call-timeout 0: must be seconds");
	refuses("--call-timeout abc health", "--call-timeout abc");
	refuses("status r --timeout 5", "unknown option --timeout");
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
