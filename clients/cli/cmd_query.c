/* SPDX-License-Identifier: Apache-2.0 */
/* sbxctl status, artifacts, fetch, teardown, runs, health: the commands that
 * look (and the one that ends a run). Human output by default, protobuf's
 * JSON with --json. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "util.h"

static void msg_freep(ProtobufCMessage **m)
{
	if (*m)
		protobuf_c_message_free_unpacked(*m, NULL);
}

#define _cleanup_msg_ _cleanup_(msg_freep)

/* A script chooses its argv: each word escaped, so that one exec is its
 * lines and no more. */
static void print_argv(char **argv, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (i)
			putchar(' ');
		cli_put_name(stdout, argv[i]);
	}
}

static void print_stream(const char *name, uint64_t bytes, bool truncated, const char *cut,
			 uint64_t dropped)
{
	printf("  %s %" PRIu64, name, bytes);
	if (dropped)
		printf(" (%" PRIu64 " dropped between head and tail)", dropped);
	if (cut && *cut) {
		fputs(" (cut: ", stdout);
		cli_put_text(stdout, cut);
		putchar(')');
	} else if (truncated && !dropped) {
		fputs(" (truncated)", stdout);
	}
}

/* CreateRun's launch as sbxctl prints it. */
static const char *launch_name(Sbx__V1__Launch l)
{
	return l == SBX__V1__LAUNCH__LAUNCH_WARM ? "warm" : "cold";
}

static void print_label(const char *before, const char *key, const char *value, const char *after)
{
	fputs(before, stdout);
	cli_put_name(stdout, key);
	putchar('=');
	cli_put_name(stdout, value);
	fputs(after, stdout);
}

static void print_exec(const Sbx__V1__ExecStatus *e)
{
	char a[32];

	printf("exec %s  %s", e->exec_id, sbx_exit_reason_name(e->reason));
	if (e->reason == SBX__V1__EXIT_REASON__EXITED)
		printf(" %d", e->exit_code);
	else if (e->reason == SBX__V1__EXIT_REASON__SIGNALED)
		printf(" %d", e->signal);
	printf("  started %s", cli_time(e->started_unix_ms, a, sizeof(a)));
	if (e->ended_unix_ms > 0 && e->started_unix_ms > 0)
		printf("  wall %" PRId64 " ms", e->ended_unix_ms - e->started_unix_ms);
	printf("  cpu %" PRIu64 " ms  peak %" PRIu64 " KiB", e->cpu_ms, e->peak_memory_bytes >> 10);
	print_stream("out", e->stdout_bytes, e->stdout_truncated, e->stdout_cut, e->stdout_dropped);
	print_stream("err", e->stderr_bytes, e->stderr_truncated, e->stderr_cut, e->stderr_dropped);
	printf("\n     ");
	print_argv(e->argv, e->n_argv);
	putchar('\n');
	if (e->message && *e->message) {
		printf("     ");
		cli_put_text(stdout, e->message);
		putchar('\n');
	}
}

int cmd_status(struct cli *cli)
{
	_cleanup_client_ sbx_client *c = cli_connect(cli, NULL);
	struct sbx_rpc_status st;
	char a[32], b[32];

	if (!c)
		return EXIT_FAILURE_RPC;
	_cleanup_msg_ ProtobufCMessage *m = (ProtobufCMessage *)sbx_status(c, cli->run_id, &st);
	if (!m)
		return cli_status_error(&st), EXIT_FAILURE_RPC;
	if (cli->json)
		return cli_print_json(m) < 0 ? EXIT_FAILURE_RPC : 0;
	const Sbx__V1__StatusResponse *r = (const Sbx__V1__StatusResponse *)m;
	printf("run %s\nstate %s\npolicy %s\nimage %s\ncreated %s\ndeadline %s\n", r->run_id,
	       sbx_run_state_name(r->state), r->policy_digest, r->image_digest,
	       cli_time(r->created_unix_ms, a, sizeof(a)),
	       cli_time(r->deadline_unix_ms, b, sizeof(b)));
	/* Said only by an sbxd that knows it (an older one sends 0). */
	if (r->launch)
		printf("launch %s\n", launch_name(r->launch));
	for (size_t i = 0; i < r->n_labels; i++)
		print_label("label ", r->labels[i]->key, r->labels[i]->value, "\n");
	for (size_t i = 0; i < r->n_execs; i++)
		print_exec(r->execs[i]);
	if (r->execs_not_listed)
		printf("execs: %" PRIu32 " more not listed (to fit max_message_bytes; "
		       "the first and the last are, when they fit)\n",
		       r->execs_not_listed);
	cli_print_egress(stdout, r->egress, r->n_egress, r->egress_records_dropped);
	cli_print_egress_destinations(stdout, r->egress_destinations, r->n_egress_destinations);
	if (r->egress_destinations_folded)
		printf("egress: %" PRIu32 " more destinations summed in (other) (to fit "
		       "max_message_bytes)\n",
		       r->egress_destinations_folded);
	/* sbxd escapes the names it quotes in alerts; what else they hold is
	 * escaped here. */
	for (size_t i = 0; i < r->n_alerts; i++) {
		fputs("alert ", stdout);
		cli_put_text(stdout, r->alerts[i]);
		putchar('\n');
	}
	return 0;
}

int cmd_artifacts(struct cli *cli)
{
	_cleanup_client_ sbx_client *c = cli_connect(cli, NULL);
	struct sbx_rpc_status st;

	if (!c)
		return EXIT_FAILURE_RPC;
	_cleanup_msg_ ProtobufCMessage *m =
	    (ProtobufCMessage *)sbx_list_artifacts(c, cli->run_id, &st);
	if (!m)
		return cli_status_error(&st), EXIT_FAILURE_RPC;
	if (cli->json)
		return cli_print_json(m) < 0 ? EXIT_FAILURE_RPC : 0;
	const Sbx__V1__ListArtifactsResponse *r = (const Sbx__V1__ListArtifactsResponse *)m;
	/* One line per file, whatever its name holds. */
	for (size_t i = 0; i < r->n_artifacts; i++) {
		const Sbx__V1__Artifact *x = r->artifacts[i];
		printf("%12" PRIu64 "  %04o  %s  ", x->size, x->mode & 07777, x->sha256);
		cli_put_name(stdout, x->path);
		putchar('\n');
	}
	fflush(stdout);
	cli_note_listing(r->listing, r->skipped, "artifacts");
	return 0;
}

static const char *base_name(const char *p)
{
	const char *s = strrchr(p, '/');

	return s ? s + 1 : p;
}

int cmd_fetch(struct cli *cli)
{
	_cleanup_client_ sbx_client *c = cli_connect(cli, NULL);
	_cleanup_free_ char *dest = NULL;
	struct sbx_rpc_status st;
	struct stat sb;

	if (!c)
		return EXIT_FAILURE_RPC;
	cli_install_signals();
	if (cli->all_dir) {
		_cleanup_close_ int dirfd = sbx_dest_open(cli->all_dir, &st.err);
		if (dirfd < 0)
			return cli_err_error(SBX__V1__CODE__INVALID_ARGUMENT, &st.err),
			       EXIT_FAILURE_RPC;
		if (fetch_all(c, cli->run_id, dirfd, cli->all_dir, !cli->no_export, &st) < 0)
			return cli_status_error(&st), EXIT_FAILURE_RPC;
		if (!cli->json)
			return 0;
		/* What was fetched: the listing it followed. */
		json_t *r = json_pack("{s:s, s:s}", "run_id", cli->run_id, "dir", cli->all_dir);
		if (r && cli_result_add_artifacts(r, c, cli->run_id, &st) < 0) {
			json_decref(r);
			return cli_status_error(&st), EXIT_FAILURE_RPC;
		}
		return cli_print_json_value(r) < 0 ? EXIT_FAILURE_RPC : 0;
	}
	struct sbx_fetch_info info;
	/* "-": the bytes to stdout as they come, checked all the same. */
	if (cli->dest && !strcmp(cli->dest, "-")) {
		if (cli->json)
			return cli_error(SBX__V1__CODE__INVALID_ARGUMENT,
					 "fetch: --json and DEST '-' both want stdout"),
			       EXIT_USAGE;
		int rc =
		    sbx_fetch_fd(c, cli->run_id, cli->path, STDOUT_FILENO, NULL, NULL, &info, &st);
		if (rc < 0) {
			cli_status_error(&st);
			fputs(
			    "sbxctl: what (if anything) was written to stdout is not the verified "
			    "artifact\n",
			    stderr);
			return EXIT_FAILURE_RPC;
		}
		dest = strdup("-");
	}
	/* DEST: the artifact's name here, or inside DEST if that is a directory. */
	const char *name = base_name(cli->path);
	if (!*name)
		return cli_error(SBX__V1__CODE__INVALID_ARGUMENT, "%s: not a file name", cli->path),
		       EXIT_USAGE;
	if (dest)
		; /* written to stdout already */
	else if (!cli->dest)
		dest = strdup(name);
	else if (stat(cli->dest, &sb) == 0 && S_ISDIR(sb.st_mode))
		(void)!asprintf(&dest, "%s/%s", cli->dest, name);
	else
		dest = strdup(cli->dest);
	if (!dest)
		return cli_error(SBX__V1__CODE__RESOURCE_EXHAUSTED, "out of memory"),
		       EXIT_FAILURE_RPC;
	if (strcmp(dest, "-") && sbx_fetch_file_ex(c, cli->run_id, cli->path, dest, NULL, false,
						   cli_progress, NULL, &info, &st) < 0)
		return cli_status_error(&st), EXIT_FAILURE_RPC;
	if (info.live) {
		fputs("sbxctl: ", stderr);
		cli_put_name(stderr, cli->path);
		fprintf(stderr,
			": live: an exec is running; sha256 %s is of the bytes fetched, not "
			"final\n",
			info.sha256);
	}
	if (cli->json)
		return cli_print_json_value(json_pack("{s:s, s:s, s:s, s:I, s:s, s:b}", "run_id",
						      cli->run_id, "path", cli->path, "dest", dest,
						      "size", (json_int_t)info.size, "sha256",
						      info.sha256, "live", info.live)) < 0
			   ? EXIT_FAILURE_RPC
			   : 0;
	return 0;
}

int cmd_teardown(struct cli *cli)
{
	_cleanup_client_ sbx_client *c = cli_connect(cli, NULL);
	struct sbx_rpc_status st;

	if (!c)
		return EXIT_FAILURE_RPC;
	_cleanup_msg_ ProtobufCMessage *m = (ProtobufCMessage *)sbx_teardown(c, cli->run_id, &st);
	if (!m)
		return cli_status_error(&st), EXIT_FAILURE_RPC;
	/* The manifest is the run's record: JSON always, for keeping. */
	const Sbx__V1__TeardownResponse *r = (const Sbx__V1__TeardownResponse *)m;
	if (!r->manifest)
		return cli_error(SBX__V1__CODE__INTERNAL, "Teardown returned no manifest"),
		       EXIT_FAILURE_RPC;
	if (cli_print_json(&r->manifest->base) < 0)
		return EXIT_FAILURE_RPC;
	/* What the record left out, said beside it (it is in the JSON too). */
	const Sbx__V1__RunManifest *mf = r->manifest;
	cli_note_listing(mf->artifacts_listing, 0, "manifest");
	if (mf->execs_not_listed)
		fprintf(stderr,
			"sbxctl: manifest: %" PRIu32 " exec records not listed (to fit "
			"max_message_bytes; the first and the last are, when they fit)\n",
			mf->execs_not_listed);
	if (mf->egress_destinations_folded)
		fprintf(stderr,
			"sbxctl: manifest: %" PRIu32 " egress destinations summed in (other) (to "
			"fit max_message_bytes)\n",
			mf->egress_destinations_folded);
	return 0;
}

/* runs --all: an operator's table, one run a line. */
static void print_all_runs(const Sbx__V1__ListRunsResponse *r)
{
	printf("%-20s  %-24s  %-8s  %10s  %9s  %9s  %s\n", "RUN", "OWNER", "STATE", "AGE", "CPU",
	       "MEM", "EXECS");
	for (size_t i = 0; i < r->n_runs; i++) {
		const Sbx__V1__RunSummary *s = r->runs[i];
		char cpu[32], mem[32];

		snprintf(cpu, sizeof(cpu), "%.1fs", (double)s->cpu_ms / 1000);
		snprintf(mem, sizeof(mem), "%.1fM", (double)s->peak_memory_bytes / (1 << 20));
		printf("%-20s  %-24s  %-8s  %9llds  %9s  %9s  %u/%u\n", s->run_id,
		       s->owner ? s->owner : "", sbx_run_state_name(s->state),
		       (long long)(s->age_ms / 1000), cpu, mem, s->execs_running, s->execs);
	}
}

/* --json over several hosts: the host's answer as one row, with "host". */
static int add_host_row(json_t *rows, const ProtobufCMessage *m, const char *host)
{
	json_t *j = cli_json_of(m);

	if (j && json_object_set_new(j, "host", json_string(host)) < 0) {
		json_decref(j);
		j = NULL;
	}
	/* The row is the array's even when appending fails (jansson). */
	if (!j || json_array_append_new(rows, j) < 0)
		return cli_error(SBX__V1__CODE__RESOURCE_EXHAUSTED, "out of memory"),
		       EXIT_FAILURE_RPC;
	return 0;
}

/* One host's runs; host: its name with a fleet (ids printed as RUN@HOST,
 * JSON rows appended to rows), else NULL. */
static int runs_one(struct cli *cli, sbx_client *c, const char *host, json_t *rows)
{
	struct sbx_rpc_status st;
	char a[32];

	_cleanup_msg_ ProtobufCMessage *m =
	    (ProtobufCMessage *)(cli->runs_all ? sbx_list_all_runs(c, &st) : sbx_list_runs(c, &st));
	if (!m)
		return cli_status_error(&st), EXIT_FAILURE_RPC;
	if (cli->json && !host)
		return cli_print_json(m) < 0 ? EXIT_FAILURE_RPC : 0;
	if (cli->json)
		return add_host_row(rows, m, host);
	const Sbx__V1__ListRunsResponse *r = (const Sbx__V1__ListRunsResponse *)m;
	if (r->runs_not_listed)
		fprintf(stderr, "sbxctl: %s%s%u newer runs not listed (to fit max_message_bytes)\n",
			host ? host : "", host ? ": " : "", r->runs_not_listed);
	if (cli->runs_all) {
		if (host)
			printf("host %s\n", host);
		print_all_runs(r);
		return 0;
	}
	for (size_t i = 0; i < r->n_runs; i++) {
		const Sbx__V1__RunSummary *s = r->runs[i];
		printf("%s%s%s  %-8s  %s  execs %u", s->run_id, host ? "@" : "", host ? host : "",
		       sbx_run_state_name(s->state), cli_time(s->created_unix_ms, a, sizeof(a)),
		       s->execs);
		if (s->launch)
			printf("  %s", launch_name(s->launch));
		for (size_t k = 0; k < s->n_labels; k++)
			print_label("  ", s->labels[k]->key, s->labels[k]->value, "");
		putchar('\n');
	}
	return 0;
}

/* A command over every host of the fleet: each one's status, the worst
 * returned; a host that does not answer is said and the others go on. */
static int each_host(struct cli *cli,
		     int (*one)(struct cli *, sbx_client *, const char *, json_t *))
{
	struct sbx_rpc_status st;
	const char *names[SBX_FLEET_MAX_HOSTS];
	sbx_fleet *f = cli_fleet(cli);
	int status = 0;

	if (!f)
		return EXIT_FAILURE_RPC;
	size_t n = sbx_fleet_hosts(f, names, SBX_ARRAY_SIZE(names), &st);
	if (st.code != SBX__V1__CODE__OK)
		return cli_status_error(&st), EXIT_FAILURE_RPC;
	json_auto_t *rows = json_array();
	if (!rows)
		return cli_error(SBX__V1__CODE__RESOURCE_EXHAUSTED, "out of memory"),
		       EXIT_FAILURE_RPC;
	for (size_t i = 0; i < n; i++) {
		sbx_client *c = cli_connect_host(cli, names[i]);
		int rc = c ? one(cli, c, names[i], rows) : EXIT_FAILURE_RPC;
		status = rc > status ? rc : status;
	}
	if (cli->json && cli_print_json_value(json_incref(rows)) < 0)
		return EXIT_FAILURE_RPC;
	return status;
}

int cmd_runs(struct cli *cli)
{
	if (cli->fleet)
		return each_host(cli, runs_one);
	_cleanup_client_ sbx_client *c = cli_connect(cli, NULL);
	if (!c)
		return EXIT_FAILURE_RPC;
	return runs_one(cli, c, NULL, NULL);
}

int cmd_drain(struct cli *cli)
{
	_cleanup_client_ sbx_client *c = cli_connect(cli, NULL);
	struct sbx_rpc_status st;

	if (!c)
		return EXIT_FAILURE_RPC;
	_cleanup_msg_ ProtobufCMessage *m =
	    (ProtobufCMessage *)sbx_drain(c, cli->cmd == CMD_UNDRAIN, &st);
	if (!m)
		return cli_status_error(&st), EXIT_FAILURE_RPC;
	if (cli->json)
		return cli_print_json(m) < 0 ? EXIT_FAILURE_RPC : 0;
	const Sbx__V1__DrainResponse *d = (const Sbx__V1__DrainResponse *)m;
	printf("state %s\noperator drain %s\nshutdown drain %s\nruns %u go on\n",
	       sbx_serving_state_name(d->state), d->operator_drain ? "yes" : "no",
	       d->shutdown_drain ? "yes (SIGTERM: sbxd is stopping)" : "no", d->runs_active);
	return 0;
}

/* Health's capacity: operators only (an older sbxd, or another caller,
 * sends none). */
static void print_capacity(const Sbx__V1__HealthResponse *h)
{
	printf("drains operator %s, shutdown %s\n", h->operator_drain ? "yes" : "no",
	       h->shutdown_drain ? "yes" : "no");
	printf("cpu: %.2f CPUs, %.2f committed of %.2f allowed (overcommit %u%%)\n",
	       (double)h->capacity_cpu_millis / 1000, (double)h->committed_cpu_millis / 1000,
	       (double)h->allowed_cpu_millis / 1000, h->cpu_overcommit_percent);
	printf("memory: %" PRIu64 " MiB, %" PRIu64 " committed of %" PRIu64
	       " allowed (overcommit %u%%, reserve %" PRIu64 " MiB)\n",
	       h->capacity_memory_mb, h->committed_memory_mb, h->allowed_memory_mb,
	       h->memory_overcommit_percent, h->memory_reserve_mb);
	printf("capacity from %s\nrun slots free %u\n", h->capacity_source, h->run_slots_free);
}

static int health_one(struct cli *cli, sbx_client *c, const char *host, json_t *rows)
{
	struct sbx_rpc_status st;

	_cleanup_msg_ ProtobufCMessage *m = (ProtobufCMessage *)sbx_health(c, &st);
	if (!m)
		return cli_status_error(&st), EXIT_FAILURE_RPC;
	if (cli->json && !host)
		return cli_print_json(m) < 0 ? EXIT_FAILURE_RPC : 0;
	if (cli->json)
		return add_host_row(rows, m, host);
	if (host)
		printf("host %s\n", host);
	const Sbx__V1__HealthResponse *h = (const Sbx__V1__HealthResponse *)m;
	printf("endpoint %s\nversion %s\nidentity %s\nruns %u of %u (%u per identity)\n"
	       "userns %s\nseccomp %s\ncgroup %s\n",
	       sbx_client_endpoint(c), h->version, h->identity, h->runs_active, h->runs_max,
	       h->runs_max_per_identity, h->userns ? "yes" : "no", h->seccomp ? "yes" : "no",
	       h->cgroup);
	if (h->state)
		printf("state %s\nyour run slots free %u\n", sbx_serving_state_name(h->state),
		       h->identity_run_slots_free);
	if (h->operator_)
		print_capacity(h);
	else if (h->capacity_memory_mb) /* every caller's since issue 19 */
		printf("cpu: %.2f committed of %.2f allowed\nmemory: %" PRIu64
		       " MiB committed of %" PRIu64 " allowed\nrun slots free %u\n",
		       (double)h->committed_cpu_millis / 1000, (double)h->allowed_cpu_millis / 1000,
		       h->committed_memory_mb, h->allowed_memory_mb, h->run_slots_free);
	/* Said only by an sbxd that knows it (older ones send no fields). */
	if (h->file_max)
		printf("files %" PRIu64 " per run, %" PRIu64 " more pinned by mappings; %" PRIu64
		       " runs fit in half of fs.file-max %" PRIu64 "\n",
		       h->run_files, h->run_pinned_files, h->runs_fit, h->file_max);
	if (h->host_uids && h->host_uids[0])
		printf("host uids %s%s", h->host_uids,
		       strcmp(h->host_uids, "subordinate") ? " (every sandbox as sbxd's uid)\n"
							   : "");
	if (h->host_uids && !strcmp(h->host_uids, "subordinate"))
		printf(": %" PRIu64 " runs at once, each its own\n", h->host_uid_slots);
	for (size_t i = 0; i < h->n_pool; i++)
		printf("pool %s: %u of %u ready, %" PRIu64 " built, %" PRIu64 " failed, %" PRIu64
		       " claimed%s%s\n",
		       h->pool[i]->name, h->pool[i]->ready, h->pool[i]->size, h->pool[i]->built,
		       h->pool[i]->failed, h->pool[i]->claimed,
		       h->pool[i]->error[0] ? "; last error: " : "", h->pool[i]->error);
	for (size_t i = 0; i < h->n_images; i++)
		printf("image %s\n", h->images[i]);
	if (h->images_error && h->images_error[0])
		printf("images: not listed: %s\n", h->images_error);
	if (h->images_not_listed)
		printf("images: %" PRIu32 " more not listed (sbxd image list on the host shows "
		       "them)\n",
		       h->images_not_listed);
	return 0;
}

int cmd_health(struct cli *cli)
{
	if (cli->fleet && !cli->run_host)
		return each_host(cli, health_one);
	_cleanup_client_ sbx_client *c = cli_connect(cli, NULL);
	if (!c)
		return EXIT_FAILURE_RPC;
	return health_one(cli, c, NULL, NULL);
}
