/* SPDX-License-Identifier: Apache-2.0 */
/* The metrics table and its exposition (server/metrics/metrics.c): escaping
 * of HELP texts and label values, every line of a scrape in the text
 * format, histogram buckets cumulative up to the count, counters that
 * never go back, increments from many threads that all arrive, label
 * values that stay in their fixed lists, and a scrape bounded in size
 * however the series are bumped. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "metrics.h"
#include "sbx/v1/sandbox.pb-c.h"

#define CREATE_RUN "/sbx.v1.Sandbox/CreateRun"

/* The value of the sample whose line starts with `series` + " "; -1 if
 * there is none. */
static double sample(const char *text, const char *series)
{
	size_t n = strlen(series);

	for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		if (!strncmp(p, series, n) && p[n] == ' ')
			return strtod(p + n + 1, NULL);
	return -1;
}

static char *scrape(void)
{
	size_t len = 0;
	char *t = sbx_metrics_render(&len);

	if (!t) {
		check(false, "render");
		exit(1);
	}
	check(strlen(t) == len, "the length said is the text's");
	return t;
}

/* Every line: "# HELP name text", "# TYPE name type" or
 * `name{label="value",...} number`, names and labels of [a-zA-Z_:0-9]. */
static bool line_ok(const char *l, size_t n)
{
	size_t i = 0;

	if (n > 7 && (!strncmp(l, "# HELP ", 7) || !strncmp(l, "# TYPE ", 7)))
		return true;
	while (i < n && (l[i] == '_' || l[i] == ':' || (l[i] >= 'a' && l[i] <= 'z') ||
			 (l[i] >= 'A' && l[i] <= 'Z') || (i && l[i] >= '0' && l[i] <= '9')))
		i++;
	if (!i)
		return false;
	if (i < n && l[i] == '{') {
		bool in_value = false;

		for (i++; i < n && (in_value || l[i] != '}'); i++) {
			if (in_value && l[i] == '\\')
				i++;
			else if (l[i] == '"')
				in_value = !in_value;
			else if (in_value && l[i] == '\n')
				return false;
		}
		if (i >= n)
			return false;
		i++;
	}
	if (i >= n || l[i] != ' ')
		return false;
	char *end;
	char num[64];

	snprintf(num, sizeof(num), "%.*s", (int)(n - i - 1), l + i + 1);
	strtod(num, &end);
	return end != num && !*end;
}

static void test_escaping(void)
{
	char out[64];

	sbx_metrics_escape(out, sizeof(out), "a\\b\"c\nd", true);
	check(!strcmp(out, "a\\\\b\\\"c\\nd"), "label value: backslash, quote, newline escaped: %s",
	      out);
	sbx_metrics_escape(out, sizeof(out), "a\\b\"c\nd", false);
	check(!strcmp(out, "a\\\\b\"c\\nd"), "HELP: backslash and newline, not quotes: %s", out);
	sbx_metrics_escape(out, 6, "\\\\\\\\", true);
	check(!strcmp(out, "\\\\\\\\"), "a cut never splits an escape: %s", out);
}

static void test_format(void)
{
	char *t;
	size_t lines = 0, bad = 0;

	sbx_metrics_reset();
	sbx_metrics_init("0.1.0-test");
	sbx_metrics_rpc(CREATE_RUN, SBX__V1__CODE__OK, 0.2);
	sbx_metrics_rpc(NULL, SBX__V1__CODE__UNAUTHENTICATED, -1);
	sbx_metrics_gauge_add(SBX_M_RUNS, SBX_RUNS_CREATED, -2);
	t = scrape();
	for (const char *p = t; *p;) {
		const char *nl = strchr(p, '\n');

		if (!nl) {
			check(false, "the text ends with a newline");
			break;
		}
		lines++;
		if (!line_ok(p, (size_t)(nl - p)) && bad++ < 3)
			check(false, "a line of the format: %.*s", (int)(nl - p), p);
		p = nl + 1;
	}
	check(lines > 40 && !bad, "%zu lines, %zu not in the format", lines, bad);
	check(sample(t, "sbx_build_info{version=\"0.1.0-test\"}") == 1, "build info");
	check(sample(t, "sbx_rpc_calls_total{method=\"CreateRun\",code=\"OK\"}") == 1,
	      "a call by its method and code");
	check(sample(t, "sbx_rpc_calls_total{method=\"unknown\",code=\"UNAUTHENTICATED\"}") == 1,
	      "a call refused before its method was known: method unknown");
	check(sample(t, "sbx_rpc_calls_total{method=\"Exec\",code=\"OK\"}") == -1,
	      "a method x code series that never happened is left out");
	check(sample(t, "sbx_rpc_duration_seconds_count{method=\"unknown\"}") == -1,
	      "an untimed answer is not observed");
	check(sample(t, "sbx_runs{state=\"created\"}") == -2, "a gauge goes below zero");
	check(sample(t, "sbx_runs{state=\"active\"}") == 0,
	      "a one-label gauge shows each value of its list");
	check(strstr(t, "# TYPE sbx_rpc_duration_seconds histogram\n") != NULL, "TYPE lines");
	free(t);
}

static void test_histogram_cumulative(void)
{
	static const double obs[] = {0.0005, 0.001, 0.003, 0.2, 0.2, 7, 45, 100, 1e6};
	double sum = 0, prev = -1, v;
	char series[160], *t;
	bool ordered = true;

	sbx_metrics_reset();
	for (size_t i = 0; i < sizeof(obs) / sizeof(obs[0]); i++) {
		sbx_metrics_rpc(CREATE_RUN, SBX__V1__CODE__OK, obs[i]);
		sum += obs[i];
	}
	t = scrape();
	check(sample(t, "sbx_rpc_duration_seconds_bucket{method=\"CreateRun\",le=\"0.001\"}") == 2,
	      "le is inclusive: 0.0005 and 0.001 in le=0.001");
	check(sample(t, "sbx_rpc_duration_seconds_bucket{method=\"CreateRun\",le=\"0.25\"}") == 5,
	      "le=0.25 counts every one below it too");
	check(sample(t, "sbx_rpc_duration_seconds_bucket{method=\"CreateRun\",le=\"60\"}") == 7,
	      "le=60: all but the two beyond it");
	check(sample(t, "sbx_rpc_duration_seconds_bucket{method=\"CreateRun\",le=\"+Inf\"}") == 9,
	      "+Inf is the count");
	check(sample(t, "sbx_rpc_duration_seconds_count{method=\"CreateRun\"}") == 9, "the count");
	v = sample(t, "sbx_rpc_duration_seconds_sum{method=\"CreateRun\"}");
	check(v > sum - 1e-3 && v < sum + 1e-3, "the sum %f of %f", v, sum);
	for (const char *p = strstr(t, "sbx_rpc_duration_seconds_bucket{method=\"CreateRun\"");
	     p && !strncmp(p, "sbx_rpc_duration_seconds_bucket{method=\"CreateRun\"", 50);
	     p = strchr(p, '\n') + 1) {
		snprintf(series, sizeof(series), "%.*s", (int)(strchr(p, ' ') - p), p);
		v = sample(p, series);
		ordered = ordered && v >= prev;
		prev = v;
	}
	check(ordered && prev == 9, "the buckets never decrease and end at the count");
	free(t);
}

static void test_counters_monotonic(void)
{
	double prev = 0, v;
	bool up = true;

	sbx_metrics_reset();
	for (int i = 0; i < 5; i++) {
		char *t;

		sbx_metrics_add(SBX_M_EGRESS_BYTES, SBX_EGRESS_OUT, (uint64_t)i * 1000);
		sbx_metrics_exec_ended(SBX__V1__EXIT_REASON__TIMEOUT, 1.5);
		t = scrape();
		v = sample(t, "sbx_egress_bytes_total{direction=\"out\"}");
		up = up && v >= prev;
		prev = v;
		if (i == 4) {
			check(v == 10000, "bytes add up: %f", v);
			check(sample(t, "sbx_exec_ends_total{reason=\"TIMEOUT\"}") == 5,
			      "exec ends by their reason");
			check(sample(t, "sbx_exec_duration_seconds_bucket{le=\"1\"}") == 0 &&
				  sample(t, "sbx_exec_duration_seconds_bucket{le=\"5\"}") == 5,
			      "an unlabelled histogram");
		}
		free(t);
	}
	check(up, "a counter never goes back between scrapes");
}

#define THREADS 8
#define PER	100000

static void *bump(void *arg)
{
	(void)arg;
	for (int i = 0; i < PER; i++) {
		sbx_metrics_rpc(CREATE_RUN, SBX__V1__CODE__OK, 0.001);
		sbx_metrics_add(SBX_M_CONN_REFUSED, SBX_REFUSED_PEER_RATE, 1);
		sbx_metrics_gauge_add(SBX_M_RUNS, SBX_RUNS_ACTIVE, (i & 1) ? -1 : 1);
	}
	return NULL;
}

static void test_concurrent(void)
{
	pthread_t th[THREADS];
	char *t;

	sbx_metrics_reset();
	for (int i = 0; i < THREADS; i++)
		pthread_create(&th[i], NULL, bump, NULL);
	for (int i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
	t = scrape();
	check(sample(t, "sbx_rpc_calls_total{method=\"CreateRun\",code=\"OK\"}") == THREADS * PER,
	      "every increment of %d threads arrived", THREADS);
	check(sample(t, "sbx_rpc_duration_seconds_count{method=\"CreateRun\"}") == THREADS * PER &&
		  sample(t, "sbx_rpc_duration_seconds_bucket{method=\"CreateRun\",le=\"0.001\"}") ==
		      THREADS * PER,
	      "every observation arrived, in its bucket");
	check(sample(t, "sbx_connections_refused_total{reason=\"peer_rate\"}") == THREADS * PER,
	      "a second counter too");
	check(sample(t, "sbx_runs{state=\"active\"}") == 0, "a gauge's ups and downs cancel out");
	free(t);
}

static void test_bounded(void)
{
	const ProtobufCServiceDescriptor *svc = &sbx__v1__sandbox__descriptor;
	size_t len;
	char *t;

	sbx_metrics_reset();
	/* Every method (and names no method has), every code, and out of
	 * range values: the series are the table's lists, nothing more. */
	for (size_t m = 0; m <= svc->n_methods + 2; m++) {
		char name[128];

		snprintf(name, sizeof(name), "/sbx.v1.Sandbox/%s",
			 m < svc->n_methods    ? svc->methods[m].name
			 : m == svc->n_methods ? "Nope"
					       : "");
		for (int code = -3; code < 40; code++)
			sbx_metrics_rpc(name, code, 0.5);
	}
	for (int r = -2; r < 30; r++)
		sbx_metrics_exec_ended(r, 1);
	for (size_t i = 0; i < 100; i++)
		sbx_metrics_add(SBX_M_CONN_REFUSED, i, 1);
	t = sbx_metrics_render(&len);
	check(t && len < SBX_METRICS_TEXT_MAX / 4, "a full table renders in %zu bytes", len);
	check(t && sample(t, "sbx_rpc_calls_total{method=\"unknown\",code=\"OK\"}") > 0,
	      "a method no service has counts as unknown");
	check(t && !strstr(t, "Nope"), "a caller's method name never becomes a label");
	check(t && sample(t, "sbx_exec_ends_total{reason=\"EXIT_REASON_UNSPECIFIED\"}") > 0,
	      "an exit reason out of the enum counts under its first value");
	free(t);
}

static void test_reference(void)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	sbx_metrics_print_reference(f);
	fclose(f);
	check(buf && strstr(buf, "| `sbx_rpc_calls_total` | counter |") &&
		  strstr(buf, "| `sbx_exec_duration_seconds` | histogram (le:"),
	      "the reference table names each metric and its type");
	free(buf);
}

int main(void)
{
	test_escaping();
	test_format();
	test_histogram_cumulative();
	test_counters_monotonic();
	test_concurrent();
	test_bounded();
	test_reference();
	return check_done();
}
