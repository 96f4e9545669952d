/* SPDX-License-Identifier: Apache-2.0 */
/* sbxctl wait and sbxctl logs: an exec started elsewhere (exec --no-wait, another
 * shell), watched from here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "util.h"

/* Long polls of a followed stream: short enough to notice an interrupt. */
#define FOLLOW_POLL_MS 5000

/* A call cut short by ^C is the user's choice, not a failure to report. */
static int failed(const struct sbx_rpc_status *st)
{
	if (st->code == SBX__V1__CODE__CANCELLED && cli_interrupted)
		return 128 + cli_interrupted;
	cli_status_error(st);
	return EXIT_FAILURE_RPC;
}

int cmd_wait(struct cli *cli)
{
	_cleanup_client_ sbx_client *c = cli_connect(cli, NULL);
	struct sbx_rpc_status st;

	if (!c)
		return EXIT_FAILURE_RPC;
	cli_install_signals();
	Sbx__V1__WaitResponse *w = sbx_wait_end(c, cli->run_id, cli->exec_id, &st);
	if (!w)
		return failed(&st);
	int status = cli_exit_status(w->status);
	if (cli->json) {
		json_t *r = cli_exec_result(cli->run_id, w->status, status, &st);
		sbx__v1__wait_response__free_unpacked(w, NULL);
		if (!r)
			return failed(&st);
		return cli_print_json_value(r) < 0 ? EXIT_FAILURE_RPC : status;
	}
	/* The exit status says it all, but for an end that is not an exit. */
	if (w->status->reason != SBX__V1__EXIT_REASON__EXITED) {
		fprintf(stderr, "sbxctl: exec %s: %s", cli->exec_id,
			sbx_exit_reason_name(w->status->reason));
		if (w->status->message && *w->status->message) {
			fputs(": ", stderr);
			cli_put_text(stderr, w->status->message);
		}
		fputc('\n', stderr);
	}
	sbx__v1__wait_response__free_unpacked(w, NULL);
	return status;
}

int cmd_logs(struct cli *cli)
{
	_cleanup_client_ sbx_client *c = cli_connect(cli, NULL);
	struct sbx_rpc_status st;
	const char *name = cli->logs_stderr ? "stderr" : "stdout";
	uint64_t offset = 0, kept = 0, dropped = 0, dropped_at = 0;
	bool truncated = false, eof = false;
	struct cli_out_tail tail = {.fd = STDOUT_FILENO};
	_cleanup_free_ char *cut = NULL;
	_cleanup_free_ uint8_t *all = NULL; /* --json: the bytes, for one object */
	size_t all_len = 0;

	if (!c)
		return EXIT_FAILURE_RPC;
	cli_install_signals();
	/* Without --follow: what is kept now (polls that do not wait); with
	 * it: until the exec has ended and everything kept was read. */
	for (;;) {
		Sbx__V1__ReadOutputRequest req = SBX__V1__READ_OUTPUT_REQUEST__INIT;
		req.run_id = (char *)cli->run_id;
		req.exec_id = (char *)cli->exec_id;
		req.stream = cli->logs_stderr ? SBX__V1__STREAM__STDERR : SBX__V1__STREAM__STDOUT;
		req.offset = offset;
		req.max_bytes = SBX_CHUNK_BYTES;
		req.timeout_ms = cli->follow ? FOLLOW_POLL_MS : 0;
		Sbx__V1__ReadOutputResponse *r = sbx_read_output(c, &req, &st);
		if (!r)
			return failed(&st);
		int wrc = 0;
		if (r->dropped && !cli->json)
			cli_note_gap(name, r->dropped, &tail);
		if (r->dropped && !dropped)
			dropped_at = all_len;
		dropped += r->dropped;
		if (r->data.len && !cli->json) {
			wrc = cli_write_all(STDOUT_FILENO, r->data.data, r->data.len);
			cli_out_wrote(&tail, r->data.data, r->data.len);
		} else if (r->data.len) {
			uint8_t *grown = realloc(all, all_len + r->data.len);
			if (grown) {
				memcpy(grown + all_len, r->data.data, r->data.len);
				all = grown;
				all_len += r->data.len;
			}
			wrc = grown ? 0 : -1;
		}
		truncated |= r->truncated;
		if (r->cut && *r->cut) {
			free(cut);
			cut = strdup(r->cut);
			kept = r->kept_bytes;
		}
		size_t got = r->data.len;
		offset = r->next_offset > offset ? r->next_offset : offset + got;
		eof = r->eof;
		sbx__v1__read_output_response__free_unpacked(r, NULL);
		if (wrc < 0)
			return cli_error(SBX__V1__CODE__INTERNAL, "writing the %s: failed", name),
			       EXIT_FAILURE_RPC;
		if (eof || (!cli->follow && got == 0))
			break;
	}
	if (cli->json) {
		/* The bytes are the command's, not text: base64, as pbjson writes
		 * bytes fields. */
		Sbx__V1__ReadOutputResponse one = SBX__V1__READ_OUTPUT_RESPONSE__INIT;
		one.data.data = all;
		one.data.len = all_len;
		one.next_offset = offset;
		one.eof = eof;
		one.truncated = truncated;
		one.cut = cut ? cut : "";
		one.kept_bytes = kept;
		one.dropped = dropped;
		json_t *j = cli_json_of(&one.base);
		/* dropped_at: where in data the gap is. */
		if (j &&
		    (json_object_set_new(j, "stream", json_string(name)) < 0 ||
		     (dropped && json_object_set_new(j, "dropped_at",
						     json_integer((json_int_t)dropped_at)) < 0))) {
			json_decref(j);
			j = NULL;
		}
		return cli_print_json_value(j) < 0 ? EXIT_FAILURE_RPC : 0;
	}
	cli_note_cut(name, cut, kept, truncated, dropped == 0, &tail);
	return 0;
}
