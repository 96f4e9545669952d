/* SPDX-License-Identifier: Apache-2.0 */
/* sbxctl: the command-line client of sbxd. */
#include "chunk_malloc.h"
#include <stdio.h>
#include <string.h>

#include "cli.h"

static int (*const commands[CMD_COUNT])(struct cli *) = {
    [CMD_RUN] = cmd_run,       [CMD_CREATE] = cmd_create,     [CMD_PUT] = cmd_put,
    [CMD_EXEC] = cmd_exec,     [CMD_STATUS] = cmd_status,     [CMD_ARTIFACTS] = cmd_artifacts,
    [CMD_FETCH] = cmd_fetch,   [CMD_TEARDOWN] = cmd_teardown, [CMD_RUNS] = cmd_runs,
    [CMD_HEALTH] = cmd_health, [CMD_POLICY] = cmd_policy,     [CMD_WAIT] = cmd_wait,
    [CMD_LOGS] = cmd_logs,     [CMD_DRAIN] = cmd_drain,	      [CMD_UNDRAIN] = cmd_drain,
};

int main(int argc, char **argv)
{
	struct sbx_err err;
	struct cli cli;

	sbx_malloc_reuse_chunks();
	if (cli_parse(argc, argv, &cli, &err) < 0) {
		fprintf(stderr, "sbxctl: %s\nTry 'sbxctl %s%s--help'.\n", err.msg,
			cli.cmd ? cli_cmd_name(cli.cmd) : "", cli.cmd ? " " : "");
		return EXIT_USAGE;
	}
	if (cli.version) {
		puts("sbxctl " SBX_CLIENT_VERSION);
		return 0;
	}
	if (cli.help) {
		fputs(cli_help(cli.cmd), stdout);
		return 0;
	}
	if (cli_resolve(&cli, &err) < 0) {
		cli_err_error(SBX__V1__CODE__INVALID_ARGUMENT, &err);
		return EXIT_USAGE;
	}
	return commands[cli.cmd](&cli);
}
