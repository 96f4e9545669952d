/* SPDX-License-Identifier: Apache-2.0 */
/* What every command of sbxctl needs: errors, JSON, the connection, progress,
 * signals and the exit status of an exec. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "export_wire.h"
#include "pbjson.h"
#include "policy.h"

volatile sig_atomic_t cli_interrupted;
volatile sig_atomic_t cli_forwarding, cli_signals, cli_first_signal;

int cli_error(Sbx__V1__Code code, const char *fmt, ...)
{
	char msg[2 * SBX_ERR_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	/* It may quote sbxd, which may quote a sandbox: shown as is, escaped,
	 * its lines (a policy's problems, one per line) each indented below
	 * the first, so that no line of it can pass for one of sbxctl's. */
	fprintf(stderr, "sbxctl: %s: ", sbx_code_name(code));
	for (char *line = msg, *nl; line; line = nl ? nl + 1 : NULL) {
		nl = strchr(line, '\n');
		if (nl)
			*nl = '\0';
		if (line != msg)
			fputs("  ", stderr);
		cli_put_text(stderr, line);
		fputc('\n', stderr);
	}
	return -1;
}

int cli_err_error(Sbx__V1__Code code, const struct sbx_err *err)
{
	return cli_error(code, "%s", err->msg);
}

/* The endpoint of the last connection made, for the hint below. */
static const char *connected_to;
/* The host a run handle named, for errors ("host H: ..."). */
static const char *asked_host;

int cli_status_error(const struct sbx_rpc_status *st)
{
	/* A run's host that does not answer is named: the call went there only. */
	if (asked_host && (st->code == SBX__V1__CODE__UNAVAILABLE ||
			   st->code == SBX__V1__CODE__DEADLINE_EXCEEDED))
		cli_error(st->code, "host %s: %s", asked_host, st->err.msg);
	else
		cli_err_error(st->code, &st->err);
	/* Nobody listens: say how to get somebody to. */
	if (st->code == SBX__V1__CODE__UNAVAILABLE && connected_to &&
	    strstr(st->err.msg, "cannot connect to ")) {
		fprintf(stderr,
			"sbxctl: no sbxd at %s: start one with 'sbxd --listen %s' (see 'sbxd "
			"--help'), point --endpoint or SBX_ENDPOINT at a running one",
			connected_to, connected_to);
		if (!strcmp(connected_to, SBX_DEFAULT_ENDPOINT))
			fputs(", or use 'sbxctl run', which starts a private sbxd for its command "
			      "when "
			      "none answers here",
			      stderr);
		fputs("\n", stderr);
	}
	return -1;
}

json_t *cli_json_of(const ProtobufCMessage *m)
{
	/* Defaults included: a script reading .exit_code finds 0, not null. */
	json_t *j = sbx_pbjson_from_message(m, SBX_PBJSON_EMIT_DEFAULTS | SBX_PBJSON_POLICY_STYLE);
	const ProtobufCFieldDescriptor *f =
	    protobuf_c_message_descriptor_get_field_by_name(m->descriptor, "policy");

	if (!j || !f || f->type != PROTOBUF_C_TYPE_MESSAGE ||
	    f->descriptor != &sbx__v1__policy__descriptor)
		return j;
	/* A policy (Status, the manifest) as the policy document itself, so
	 * that it can be given to `policy check` or --policy as it is. */
	const SbxPolicy *p = *(SbxPolicy *const *)((const char *)m + f->offset);
	char *doc = p ? sbx_policy_to_json(p) : NULL;
	json_t *pj = doc ? json_loads(doc, 0, NULL) : NULL;
	free(doc);
	if (pj && json_object_set_new(j, "policy", pj) == 0)
		return j;
	json_decref(j);
	return NULL;
}

int cli_print_json_value(json_t *j)
{
	/* Keys in the order they were set: the .proto's, as the human output. */
	char *raw = j ? json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
	char *s = raw ? cli_json_safe(raw) : NULL;

	json_decref(j);
	free(raw);
	if (!s)
		return cli_error(SBX__V1__CODE__RESOURCE_EXHAUSTED, "out of memory");
	puts(s);
	free(s);
	return fflush(stdout) == 0 ? 0
				   : cli_error(SBX__V1__CODE__INTERNAL, "writing stdout failed");
}

int cli_print_json(const ProtobufCMessage *m)
{
	return cli_print_json_value(cli_json_of(m));
}

static struct sbx_client_opts client_opts(const struct cli *cli, const char *endpoint)
{
	return (struct sbx_client_opts){
	    .endpoint = endpoint ? endpoint : cli->endpoint,
	    .tls_cert = cli->tls_cert,
	    .tls_key = cli->tls_key,
	    .tls_ca = cli->tls_ca,
	    .tls_server_name = cli->tls_server_name,
	    .token = cli->token,
	    .timeout_ms = cli->timeout_ms,
	};
}

static sbx_fleet *fleet;

static void fleet_close(void)
{
	sbx_fleet_close(fleet);
	fleet = NULL;
}

sbx_fleet *cli_fleet(const struct cli *cli)
{
	struct sbx_client_opts o = client_opts(cli, NULL);
	struct sbx_err err;

	if (fleet)
		return fleet;
	if (!(fleet = sbx_fleet_open(cli->endpoints, cli->n_endpoints, &o, NULL, &err))) {
		cli_err_error(SBX__V1__CODE__INVALID_ARGUMENT, &err);
		return NULL;
	}
	atexit(fleet_close);
	sbx_fleet_set_interrupt(fleet, &cli_interrupted);
	return fleet;
}

/* A fleet's clients are its own. */
static bool fleet_owns(const sbx_client *c)
{
	return fleet && c && sbx_fleet_owns(fleet, c);
}

sbx_client *cli_connect_host(const struct cli *cli, const char *host)
{
	struct sbx_rpc_status st;
	sbx_fleet *f = cli_fleet(cli);
	sbx_client *c = f ? sbx_fleet_client(f, host, &st) : NULL;

	if (!f)
		return NULL;
	if (!c) {
		cli_status_error(&st);
		return NULL;
	}
	asked_host = host;
	connected_to = NULL; /* no "start an sbxd here" hint for a remote host */
	sbx_client_set_interrupt(c, &cli_interrupted);
	return c;
}

sbx_client *cli_connect(const struct cli *cli, const char *endpoint)
{
	if (!endpoint && cli->run_host)
		return cli_connect_host(cli, cli->run_host);
	if (!endpoint && cli->fleet) {
		cli_error(SBX__V1__CODE__INVALID_ARGUMENT,
			  "%s: several endpoints: give RUN as RUN_ID@HOST:PORT (as create "
			  "printed it), or one --endpoint",
			  cli_cmd_name(cli->cmd));
		return NULL;
	}
	struct sbx_client_opts o = client_opts(cli, endpoint);
	struct sbx_err err;
	sbx_client *c = sbx_client_open(&o, &err);

	connected_to = o.endpoint;
	if (!c) {
		cli_err_error(SBX__V1__CODE__INVALID_ARGUMENT, &err);
		return NULL;
	}
	sbx_client_set_interrupt(c, &cli_interrupted);
	return c;
}

void cli_client_closep(sbx_client **c)
{
	if (!fleet_owns(*c))
		sbx_client_close(*c);
}

/* Big transfers show a progress line on a terminal; anything else (a log,
 * a test) only ever sees what the sandboxed command wrote. */
#define PROGRESS_MIN_BYTES (4u << 20)

bool cli_same_host_unreached(const struct sbx_rpc_status *st)
{
	/* At the start only: the libraries' export and import keep it there
	 * for sbxd's refusal alone (side_unreached_only_if). */
	return st->code == SBX__V1__CODE__FAILED_PRECONDITION &&
	       !strncmp(st->err.msg, SBX_SIDE_UNREACHED, strlen(SBX_SIDE_UNREACHED));
}

void cli_progress(const char *path, uint64_t done, uint64_t total, void *arg)
{
	static int tty = -1;

	(void)arg;
	if (tty < 0)
		tty = isatty(STDERR_FILENO);
	if (!tty || total < PROGRESS_MIN_BYTES)
		return;
	fputc('\r', stderr);
	cli_put_name(stderr, path);
	fprintf(stderr, ": %llu/%llu MiB (%u%%)%s", (unsigned long long)(done >> 20),
		(unsigned long long)(total >> 20), (unsigned)(total ? done * 100 / total : 100),
		done >= total ? "\n" : "");
	fflush(stderr);
}

static void on_signal(int sig)
{
	/* 128 + the first is the exit status after teardown. */
	if (!cli_first_signal)
		cli_first_signal = sig;
	/* While an exec runs, a signal is the command's to handle (live_exec
	 * passes it on); otherwise it cancels the calls in progress. */
	if (cli_forwarding)
		cli_signals++;
	else /* atomic: a fetch's worker threads read it (libsbxclient) */
		__atomic_store_n(&cli_interrupted, sig, __ATOMIC_RELAXED);
}

void cli_install_signals(void)
{
	struct sigaction sa = {.sa_handler = on_signal};

	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	/* A closed stdout (sbxctl run ... | head) must not kill sbxctl before the
	 * run is torn down: writes fail with EPIPE instead. */
	signal(SIGPIPE, SIG_IGN);
}

/* The same numbers as sbx-helper run. */
int cli_exit_status(const Sbx__V1__ExecStatus *s)
{
	switch (s->reason) {
	case SBX__V1__EXIT_REASON__EXITED:
		return s->exit_code & 0xff;
	case SBX__V1__EXIT_REASON__SIGNALED:
		return 128 + (s->signal & 0x7f);
	case SBX__V1__EXIT_REASON__TIMEOUT:
	case SBX__V1__EXIT_REASON__RUN_EXPIRED:
	case SBX__V1__EXIT_REASON__IDLE:
		return EXIT_TIMEOUT;
	case SBX__V1__EXIT_REASON__OOM:
	case SBX__V1__EXIT_REASON__TORN_DOWN:
		return 128 + SIGKILL;
	default:
		return EXIT_SETUP;
	}
}
