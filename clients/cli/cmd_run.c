/* SPDX-License-Identifier: Apache-2.0 */
/* sbxctl run, create, put, exec: the commands that make things happen. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "util.h"

/* A command that did not start: said as a shell says it, with sbxd's
 * reason (the errno of execve as text); exit 127 not found, 126 not
 * executable. A command that exits 127 itself carries no message. */
static bool note_not_started(const struct cli *cli, const Sbx__V1__ExecStatus *s)
{
	const char *name = s->n_argv ? s->argv[0] : cli->argv[0];

	if (s->reason != SBX__V1__EXIT_REASON__EXITED || !s->message || !*s->message ||
	    (s->exit_code != 126 && s->exit_code != 127))
		return false;
	fprintf(stderr, "sbxctl: %s: ", cli_cmd_name(cli->cmd));
	cli_put_name(stderr, name);
	if (s->exit_code == 127 && !strchr(name, '/')) {
		fputs(": command not found\n", stderr);
		return true;
	}
	fputs(s->exit_code == 126 ? ": cannot execute: " : ": ", stderr);
	cli_put_text(stderr, s->message);
	fputc('\n', stderr);
	return true;
}

/* Says why an exec ended, when that is not simply its exit. */
static void note_end(const struct cli *cli, const Sbx__V1__ExecStatus *s)
{
	const char *why = NULL;

	if (note_not_started(cli, s))
		return;
	switch (s->reason) {
	case SBX__V1__EXIT_REASON__TIMEOUT:
		why = "script_seconds ran out";
		break;
	case SBX__V1__EXIT_REASON__OOM:
		why = "out of memory (limits.memory_mb)";
		break;
	case SBX__V1__EXIT_REASON__RUN_EXPIRED:
		why = "run_seconds ran out";
		break;
	case SBX__V1__EXIT_REASON__IDLE:
		why = "idle_seconds ran out (no call on the run)";
		break;
	case SBX__V1__EXIT_REASON__TORN_DOWN:
		why = "the run was torn down";
		break;
	case SBX__V1__EXIT_REASON__SETUP_FAILED:
		why = "could not be started";
		break;
	default:
		return;
	}
	fprintf(stderr, "sbxctl: %s: ", sbx_exit_reason_name(s->reason));
	/* An oom that the run's shared bound caused says so itself, and
	 * "limits.memory_mb" would contradict it. */
	if (s->reason != SBX__V1__EXIT_REASON__OOM || !s->message || !*s->message)
		fputs(why, stderr);
	if (s->message && *s->message) {
		if (s->reason != SBX__V1__EXIT_REASON__OOM)
			fputs(": ", stderr);
		cli_put_text(stderr, s->message);
	}
	fputc('\n', stderr);
}

/* Runs argv in run_id with live output; returns the exit status for it, or
 * -1 with st. A signal meanwhile is passed on to the command (live_exec). */
static int exec_and_wait(sbx_client *c, const struct cli *cli, const char *run_id, json_t **result,
			 struct sbx_rpc_status *st)
{
	_cleanup_free_ char *exec_id = NULL;
	_cleanup_close_ int in = -1;
	Sbx__V1__WaitResponse *w = NULL;

	if (start_exec(c, cli, run_id, &exec_id, &in, st) < 0)
		return -1;
	if (live_exec(c, run_id, exec_id, cli->json ? STDERR_FILENO : STDOUT_FILENO, in, &w, st) <
	    0) {
		/* Given up on (the connection, an interrupt between calls): the
		 * command must not run on unwatched. */
		struct sbx_rpc_status ignored;
		sbx_client_set_interrupt(c, NULL);
		Sbx__V1__SignalResponse *r = sbx_signal(c, run_id, exec_id, SIGKILL, &ignored);
		if (r)
			sbx__v1__signal_response__free_unpacked(r, NULL);
		sbx_client_set_interrupt(c, &cli_interrupted);
		return -1;
	}
	int status = cli_exit_status(w->status);
	note_end(cli, w->status);
	if (cli->json && cli_first_signal)
		status = 128 + cli_first_signal;
	if (cli->json && !(*result = cli_exec_result(run_id, w->status, status, st)))
		status = -1;
	sbx__v1__wait_response__free_unpacked(w, NULL);
	return status;
}

/* Tears the run down, reporting a failure only if nothing failed before. */
static int teardown_quiet(sbx_client *c, const char *run_id, int failed)
{
	struct sbx_rpc_status st;

	sbx_client_set_interrupt(c, NULL); /* an interrupt must not skip this */
	Sbx__V1__TeardownResponse *r = sbx_teardown(c, run_id, &st);
	if (r) {
		sbx__v1__teardown_response__free_unpacked(r, NULL);
		return 0;
	}
	sbx_rpc_prefix(&st, "Teardown %s", run_id);
	cli_status_error(&st);
	return failed ? failed : -1;
}

/* With no endpoint chosen: the default socket's server, or a private one. */
static sbx_client *connect_for_run(struct cli *cli, struct private_sbxd *priv,
				   struct sbx_rpc_status *st)
{
	sbx_client *c = cli_connect(cli, NULL);
	struct sbx_call_opts o = {.timeout_ms = 5000};
	ProtobufCMessage *resp = NULL;
	Sbx__V1__HealthRequest req = SBX__V1__HEALTH_REQUEST__INIT;
	struct sbx_err err;

	if (!c || cli->endpoint_given)
		return c;
	if (sbx_client_call_opts(c, "/sbx.v1.Sandbox/Health", &req.base,
				 &sbx__v1__health_response__descriptor, &resp, &o, st) == 0) {
		protobuf_c_message_free_unpacked(resp, NULL);
		return c;
	}
	sbx_client_close(c);
	if (st->code != SBX__V1__CODE__UNAVAILABLE) {
		sbx_rpc_prefix(st, "sbxd at %s", cli->endpoint);
		cli_status_error(st);
		return NULL;
	}
	if (private_sbxd_start(priv, &err) < 0) {
		sbx_err_prefix(&err, "no sbxd at %s, and a private one did not start",
			       cli->endpoint);
		cli_err_error(SBX__V1__CODE__UNAVAILABLE, &err);
		return NULL;
	}
	return cli_connect(cli, priv->endpoint);
}

int cmd_run(struct cli *cli)
{
	struct private_sbxd priv = {.pid = -1};
	struct sbx_rpc_status st;
	_cleanup_free_ char *run_id = NULL;
	char image_digest[CLI_DIGEST_BUF] = "";
	int status = EXIT_SETUP;
	json_auto_t *result = NULL;

	if (cli->print_policy)
		return cli_print_policy(cli);
	/* Refused now, not after the run's work is lost; opened once, so the
	 * directory fetched into is the one checked. */
	_cleanup_close_ int out_fd = cli->out ? check_out_dir(cli->out, &st.err) : -1;
	if (cli->out && out_fd < 0)
		return cli_err_error(SBX__V1__CODE__INVALID_ARGUMENT, &st.err), EXIT_SETUP;
	/* Said before the run, once: its work would otherwise go unnoticed
	 * (the Python CLI says the same words). */
	if (!cli->out)
		fputs("sbxctl: warning: no --out given: the run's /out is dropped at teardown "
		      "(give --out DIR to keep it)\n",
		      stderr);
	cli_install_signals();
	char host[SBX_HOST_MAX];
	/* Several hosts: create_with_inputs places the run and gives its client. */
	_cleanup_client_ sbx_client *c = cli->fleet ? NULL : connect_for_run(cli, &priv, &st);
	if (!c && !cli->fleet) {
		private_sbxd_stop(&priv);
		return EXIT_SETUP;
	}
	if (create_with_inputs(&c, cli, true, &run_id, image_digest, host, &st) < 0) {
		cli_status_error(&st);
	} else if ((status = exec_and_wait(c, cli, run_id, &result, &st)) < 0) {
		cli_status_error(&st);
		status = EXIT_SETUP;
	} else if (cli->out && !cli_interrupted) {
		/* An interrupted command's partial work is still worth having. */
		if (cli_first_signal) {
			fputs("sbxctl: interrupted: fetching what is in /out into ", stderr);
			cli_put_name(stderr, cli->out);
			fputs(" before the teardown\n", stderr);
		}
		if (fetch_all(c, run_id, out_fd, cli->out, !cli->no_export, &st) < 0) {
			cli_status_error(&st);
			status = EXIT_SETUP;
		}
	}
	/* What the run left, listed before it is gone, and the image it ran
	 * in (the digest a pin resolved to). */
	if (result && status != EXIT_SETUP) {
		if ((json_object_set_new(result, "image_digest", json_string(image_digest)) < 0 &&
		     sbx_rpc_fail(&st, SBX__V1__CODE__RESOURCE_EXHAUSTED, "out of memory") < 0) ||
		    cli_result_add_artifacts(result, c, run_id, &st) < 0) {
			cli_status_error(&st);
			status = EXIT_SETUP;
		} else if (cli_print_json_value(json_incref(result)) < 0) {
			status = EXIT_SETUP;
		}
	}
	if (run_id && teardown_quiet(c, run_id, 0) < 0)
		status = EXIT_SETUP;
	cli_client_closep(&c);
	c = NULL;
	private_sbxd_stop(&priv);
	/* As a shell reports an interrupted script, whatever the command did
	 * with the signal. */
	return cli_first_signal ? 128 + cli_first_signal : status;
}

int cmd_create(struct cli *cli)
{
	struct sbx_rpc_status st;
	_cleanup_free_ char *run_id = NULL;
	char image_digest[CLI_DIGEST_BUF] = "";
	if (cli->print_policy)
		return cli_print_policy(cli);
	/* Several hosts: create_with_inputs places the run and gives its client. */
	_cleanup_client_ sbx_client *c = cli->fleet ? NULL : cli_connect(cli, NULL);
	char host[SBX_HOST_MAX];

	if (!c && !cli->fleet)
		return EXIT_FAILURE_RPC;
	cli_install_signals();
	int rc = create_with_inputs(&c, cli, !cli->no_upload, &run_id, image_digest, host, &st);
	if (rc < 0) {
		cli_status_error(&st);
		/* A run whose inputs did not arrive is of no use: do not leave it.
		 * With a key it may be an earlier create's, still uploading:
		 * kept for a retry with the key, and said so. */
		if (run_id && c && !cli->idempotency_key)
			teardown_quiet(c, run_id, -1);
		else if (run_id && c)
			fprintf(
			    stderr,
			    "sbxctl: run %s%s%s is kept, as it may be an earlier create's with "
			    "idempotency key %s: the same command on that host uploads them anew, "
			    "or tear it down\n",
			    run_id, host[0] ? "@" : "", host, cli->idempotency_key);
	} else if (!cli->json && host[0]) {
		printf("%s@%s\n", run_id, host); /* the handle every later command takes */
	} else if (!cli->json) {
		puts(run_id);
	} else if (cli_print_json_value(host[0]
					    ? json_pack("{s:s, s:s, s:s, s:s++}", "run_id", run_id,
							"image_digest", image_digest, "host", host,
							"handle", run_id, "@", host)
					    : json_pack("{s:s, s:s}", "run_id", run_id,
							"image_digest", image_digest)) < 0) {
		rc = -1;
	}
	return rc < 0 ? EXIT_FAILURE_RPC : 0;
}

int cmd_put(struct cli *cli)
{
	struct sbx_rpc_status st;
	_cleanup_client_ sbx_client *c = cli_connect(cli, NULL);

	if (!c)
		return EXIT_FAILURE_RPC;
	cli_install_signals();
	const char *local = cli->local, *remote = cli->remote;
	int rc = put_files(c, cli->run_id, 1, &local, &remote, NULL, cli->no_import, &st);
	if (rc < 0)
		return cli_status_error(&st), EXIT_FAILURE_RPC;
	if (!cli->json)
		return 0;
	/* What was sent, as sbxd checked it against the manifest. */
	char hex[65];
	uint64_t size;
	if (sbx_file_sha256(cli->local, hex, &size, &st.err) < 0)
		return cli_err_error(SBX__V1__CODE__INVALID_ARGUMENT, &st.err), EXIT_FAILURE_RPC;
	return cli_print_json_value(json_pack("{s:s, s:s, s:I, s:s}", "run_id", cli->run_id, "path",
					      cli->remote, "size", (json_int_t)size, "sha256",
					      hex)) < 0
		   ? EXIT_FAILURE_RPC
		   : 0;
}

int cmd_exec(struct cli *cli)
{
	struct sbx_rpc_status st = {0};
	int status;
	json_auto_t *result = NULL;
	_cleanup_client_ sbx_client *c = cli_connect(cli, NULL);

	if (!c)
		return EXIT_SETUP;
	cli_install_signals();
	if (cli->no_wait) {
		_cleanup_free_ char *exec_id = NULL;
		status =
		    start_exec(c, cli, cli->run_id, &exec_id, NULL, &st) < 0 ? EXIT_FAILURE_RPC : 0;
		if (status)
			cli_status_error(&st);
		else if (!cli->json)
			puts(exec_id);
		else if (cli_print_json_value(json_pack("{s:s, s:s}", "run_id", cli->run_id,
							"exec_id", exec_id)) < 0)
			status = EXIT_FAILURE_RPC;
	} else if ((status = exec_and_wait(c, cli, cli->run_id, &result, &st)) < 0) {
		cli_status_error(&st);
		status = EXIT_SETUP;
	} else if (result && (cli_result_add_artifacts(result, c, cli->run_id, &st) < 0 ||
			      cli_print_json_value(json_incref(result)) < 0)) {
		if (st.err.msg[0])
			cli_status_error(&st);
		status = EXIT_SETUP;
	}
	return cli_first_signal ? 128 + cli_first_signal : status;
}
