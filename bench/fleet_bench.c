/* SPDX-License-Identifier: Apache-2.0 */
/* sbx-bench-fleet: creates per second through libsbxclient's placement
 * (sbx_fleet_create_run, then Teardown on the run's host) with several
 * creators in flight, across three sbxd against one sbxd in the same run:
 * rounds alternate between a fleet of the first host alone and a fleet of
 * all three (the order swapped every other round), and the medians of each
 * are printed with their ratio.
 *
 * It starts three private sbxd (each its own state directory and ipc
 * socket in one scratch directory), and stops them with SIGTERM at the
 * end. The three "hosts" share this machine's cores, memory and disk: the
 * ratio says what placement and three daemons add or take away here, not
 * what three machines would give. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "bench_sbxd.h"
#include "bench_scratch.h"
#include "bench_util.h"

#define PROG		 "sbx-bench-fleet"
#define HOSTS		 3
#define START_TIMEOUT_MS 15000
#define STOP_TIMEOUT_MS	 30000
#define CALL_TIMEOUT_MS	 60000
#define MAX_CREATORS	 32
#define MAX_ROUNDS	 50
#define POLICY		 "{\"image\":\"host\",\"limits\":{\"script_seconds\":30,\"memory_mb\":64}}"

static char *const child_env[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", NULL};
static pid_t sbxd_pid[HOSTS] = {-1, -1, -1};
static char endpoint[HOSTS][PATH_MAX];
static bool cleaning;

static void cleanup(void)
{
	if (cleaning)
		return;
	cleaning = true;
	for (int i = 0; i < HOSTS; i++)
		bench_stop_child(&sbxd_pid[i], "sbxd", STOP_TIMEOUT_MS);
	bench_scratch_remove();
}

static void start_sbxd(int i, const char *sbxd, const char *helper)
{
	char dir[PATH_MAX], name[32], config[PATH_MAX + 16], state[PATH_MAX + 16],
	    audit[PATH_MAX + 16], log[PATH_MAX + 16];

	snprintf(name, sizeof(name), "h%d", i + 1);
	bench_scratch_path(dir, sizeof(dir), name);
	if (mkdir(dir, 0700) < 0)
		bench_die_errno("mkdir %s", dir);
	snprintf(config, sizeof(config), "%s/sbxd.json", dir);
	snprintf(state, sizeof(state), "%s/state", dir);
	snprintf(audit, sizeof(audit), "%s/audit.log", dir);
	snprintf(log, sizeof(log), "%s/sbxd.stderr", dir);
	if ((size_t)snprintf(endpoint[i], sizeof(endpoint[i]), "ipc://%s/sbxd.sock", dir) >=
	    sizeof(endpoint[i]))
		bench_die("socket path too long");
	/* Admission by capacity would make the one host refuse what three
	 * take: both sides may commit this machine many times over. */
	json_t *cfg =
	    json_pack("{s:[s], s:s, s:s, s:s, s:i, s:i, s:{s:i, s:i}, s:i}", "listen", endpoint[i],
		      "state_dir", state, "helper", helper, "log", audit, "runs_max", 64,
		      "runs_max_per_identity", 64, "capacity", "cpu_overcommit_percent", 10000,
		      "memory_overcommit_percent", 1000, "drain_seconds", 0);
	if (!cfg || json_dump_file(cfg, config, JSON_INDENT(2)) < 0)
		bench_die_errno("write %s", config);
	json_decref(cfg);
	char *argv[] = {(char *)sbxd, "--config", config, NULL};
	sbxd_pid[i] = bench_spawn(argv, child_env, log);
	bench_sbxd_wait(endpoint[i], &sbxd_pid[i], log, START_TIMEOUT_MS);
}

struct round {
	sbx_fleet *f;
	atomic_long left;
	atomic_int failed;
	char why[512];
	pthread_mutex_t mu;
};

static void round_fail(struct round *r, const char *call, const struct sbx_rpc_status *st)
{
	pthread_mutex_lock(&r->mu);
	if (!r->why[0])
		snprintf(r->why, sizeof(r->why), "%.16s: %.32s: %.400s", call,
			 sbx_code_name(st->code), st->err.msg);
	pthread_mutex_unlock(&r->mu);
	atomic_store(&r->failed, 1);
}

/* A creator: CreateRun placed by the fleet, Teardown on the run's host,
 * until the round's count is spent. */
static void *creator(void *arg)
{
	struct round *r = arg;

	while (atomic_fetch_sub(&r->left, 1) > 0 && !atomic_load(&r->failed) &&
	       !bench_interrupted) {
		Sbx__V1__CreateRunRequest cr = SBX__V1__CREATE_RUN_REQUEST__INIT;
		struct sbx_rpc_status st;
		struct sbx_run_ref ref;

		cr.policy_json = POLICY;
		Sbx__V1__CreateRunResponse *run = sbx_fleet_create_run(r->f, &cr, &ref, &st);
		if (!run) {
			round_fail(r, "CreateRun", &st);
			break;
		}
		sbx__v1__create_run_response__free_unpacked(run, NULL);
		sbx_client *c = sbx_fleet_client(r->f, ref.host, &st);
		Sbx__V1__TeardownResponse *td = c ? sbx_teardown(c, ref.run_id, &st) : NULL;
		if (!td) {
			round_fail(r, "Teardown", &st);
			break;
		}
		sbx__v1__teardown_response__free_unpacked(td, NULL);
	}
	return NULL;
}

/* One round: n creates by `creators` threads through a fleet of the first
 * `hosts` endpoints; returns creates per second. */
static double one_round(int hosts, long n, int creators)
{
	const char *eps[HOSTS];
	struct sbx_client_opts o = {.timeout_ms = CALL_TIMEOUT_MS, .retries = -1};
	struct sbx_err err;
	struct round r = {.left = n};
	pthread_t t[MAX_CREATORS];

	for (int i = 0; i < hosts; i++)
		eps[i] = endpoint[i];
	if (!(r.f = sbx_fleet_open(eps, (size_t)hosts, &o, NULL, &err)))
		bench_die("a fleet of %d: %s", hosts, err.msg);
	pthread_mutex_init(&r.mu, NULL);
	double t0 = bench_now_ms();
	for (int i = 0; i < creators; i++)
		if (pthread_create(&t[i], NULL, creator, &r) != 0)
			bench_die("pthread_create failed");
	for (int i = 0; i < creators; i++)
		pthread_join(t[i], NULL);
	double ms = bench_now_ms() - t0;
	sbx_fleet_close(r.f);
	pthread_mutex_destroy(&r.mu);
	bench_check_interrupt();
	if (atomic_load(&r.failed))
		bench_die("a round on %d host%s: %s", hosts, hosts > 1 ? "s" : "", r.why);
	return (double)n * 1000.0 / ms;
}

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: %s [--sbxd PATH] [--helper PATH] [--rounds N] [--creates N]\n"
		"       [--creators N] [--quick] [--help]\n"
		"\n"
		"Creates per second (CreateRun placed by libsbxclient's fleet, then Teardown on\n"
		"the run's host), several creators in flight, across three private sbxd against\n"
		"the first of them alone, in one run: rounds alternate (the order swapped every\n"
		"other round); prints each round and the medians with their ratio. The three\n"
		"\"hosts\" are three sbxd on THIS machine, sharing its cores: the ratio is what\n"
		"three daemons and placement give here, not what three machines would.\n"
		"\n"
		"  --sbxd PATH     sbxd (default: ../server/sbxd next to this program)\n"
		"  --helper PATH   sbx-helper (default: ../helper/sbx-helper)\n"
		"  --rounds N      rounds of each (default 5; 1..%d)\n"
		"  --creates N     creates per round (default 30; 1..10000)\n"
		"  --creators N    creators in flight (default 6; 1..%d)\n"
		"  --quick         --rounds 3 --creates 12\n"
		"  -h, --help      this text\n",
		PROG, MAX_ROUNDS, MAX_CREATORS);
}

int main(int argc, char **argv)
{
	enum { OPT_SBXD = 256, OPT_HELPER, OPT_ROUNDS, OPT_CREATES, OPT_CREATORS, OPT_QUICK };
	static const struct option opts[] = {
	    {"sbxd", required_argument, NULL, OPT_SBXD},
	    {"helper", required_argument, NULL, OPT_HELPER},
	    {"rounds", required_argument, NULL, OPT_ROUNDS},
	    {"creates", required_argument, NULL, OPT_CREATES},
	    {"creators", required_argument, NULL, OPT_CREATORS},
	    {"quick", no_argument, NULL, OPT_QUICK},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	const char *sbxd = NULL, *helper = NULL;
	char sbxd_buf[PATH_MAX], helper_buf[PATH_MAX];
	long rounds = 5, creates = 30, creators = 6;
	double one[MAX_ROUNDS], three[MAX_ROUNDS];
	struct bench_host host;
	int opt;

	bench_prog = PROG;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case OPT_SBXD:
			sbxd = optarg;
			break;
		case OPT_HELPER:
			helper = optarg;
			break;
		case OPT_ROUNDS:
			rounds = bench_parse_count("--rounds", optarg, 1, MAX_ROUNDS);
			break;
		case OPT_CREATES:
			creates = bench_parse_count("--creates", optarg, 1, 10000);
			break;
		case OPT_CREATORS:
			creators = bench_parse_count("--creators", optarg, 1, MAX_CREATORS);
			break;
		case OPT_QUICK:
			rounds = 3;
			creates = 12;
			break;
		default:
			return bench_option_other(opt, usage);
		}
	}
	int rc = bench_no_operands(argc, argv, optind, usage);
	if (rc || opt == 'h')
		return rc;
	bench_refuse_root(argv[0], "sbx-helper refuses to run as real root");
	bench_find_sbxd_helper(&sbxd, sbxd_buf, &helper, helper_buf, sizeof(sbxd_buf));
	bench_make_absolute(&sbxd, sbxd_buf, sizeof(sbxd_buf));
	bench_make_absolute(&helper, helper_buf, sizeof(helper_buf));

	bench_on_signals(bench_on_signal);
	bench_scratch_make();
	if (atexit(cleanup) != 0)
		bench_die("atexit failed");
	for (int i = 0; i < HOSTS; i++)
		start_sbxd(i, sbxd, helper);
	/* One warm-up round each: page cache, the helper's first runs. */
	one_round(1, creators, (int)creators);
	one_round(HOSTS, creators, (int)creators);

	bench_probe_host(&host);
	printf("%s: %ld rounds of %ld creates (CreateRun + Teardown), %ld creators in flight\n",
	       PROG, rounds, creates, creators);
	printf("note: the three hosts are three sbxd on this machine, sharing its %ld cores "
	       "(kernel %s, cgroup %s, load %.2f): the ratio is not what three machines "
	       "would give\n",
	       host.cpus, host.kernel, host.cgroup, host.load[0]);
	for (long i = 0; i < rounds; i++) {
		bool three_first = i % 2;
		if (three_first)
			three[i] = one_round(HOSTS, creates, (int)creators);
		one[i] = one_round(1, creates, (int)creators);
		if (!three_first)
			three[i] = one_round(HOSTS, creates, (int)creators);
		printf("round %ld: one host %.1f creates/s, three hosts %.1f creates/s\n", i + 1,
		       one[i], three[i]);
		fflush(stdout);
	}
	double m1 = bench_pct(one, (size_t)rounds, 50), m3 = bench_pct(three, (size_t)rounds, 50);
	printf("median: one host %.1f creates/s, three hosts %.1f creates/s, ratio three/one "
	       "%.2f\n",
	       m1, m3, m3 / m1);
	return 0;
}
