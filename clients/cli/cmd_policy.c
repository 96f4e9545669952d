/* SPDX-License-Identifier: Apache-2.0 */
/* sbxctl policy check FILE: the same strict parser sbxd and sbx-helper use
 * (common/policy.h), here, without a server. */
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "policy.h"
#include "util.h"

int cmd_policy(struct cli *cli)
{
	struct sbx_err err;
	char digest[65];
	SbxPolicy *p = sbx_policy_load(cli->path, &err);

	if (!p) {
		cli_err_error(SBX__V1__CODE__INVALID_ARGUMENT, &err);
		return EXIT_FAILURE_RPC;
	}
	_cleanup_free_ char *json = sbx_policy_to_json(p);
	int rc = sbx_policy_digest(p, digest, &err);
	sbx_policy_free(p);
	if (!json)
		return cli_error(SBX__V1__CODE__INTERNAL, "out of memory"), EXIT_FAILURE_RPC;
	if (rc < 0)
		return cli_err_error(SBX__V1__CODE__INTERNAL, &err), EXIT_FAILURE_RPC;
	if (cli->json) {
		char tagged[80];
		snprintf(tagged, sizeof(tagged), "sha256:%s", digest);
		return cli_print_json_value(json_pack("{s:o?, s:s}", "policy",
						      json_loads(json, 0, NULL), "digest",
						      tagged)) < 0
			   ? EXIT_FAILURE_RPC
			   : 0;
	}
	/* The digest as sbxd reports it (CreateRun's policy_digest). */
	printf("%s\ndigest sha256:%s\n", json, digest);
	return 0;
}
