/* SPDX-License-Identifier: Apache-2.0 */
/* The options of `sbxctl run` and `sbxctl create` that write over the policy
 * (--memory 512m, --timeout 60s, -e NAME=VALUE...): their values checked
 * and turned into the policy's units. Pure parsing, as args.c. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli.h"
#include "policy.h"

#define MIB (UINT64_C(1) << 20)

/* "12", "1.5" with an optional suffix from units (each a letter and its
 * factor); the value times the factor must be a whole number in 1..max. */
struct unit {
	char letter;
	double factor;
};

static int parse_units(const char *flag, const char *s, const struct unit *units, double no_suffix,
		       double divisor, uint64_t max, uint64_t *out, struct sbx_err *err)
{
	char *end;
	double factor = no_suffix;

	errno = 0;
	double v = strtod(s, &end);
	if (end == s || errno || !isfinite(v) || v <= 0 || *s == '-' || *s == '+' ||
	    isspace((unsigned char)*s))
		return sbx_fail(err, "%s %s: not a positive number", flag, s);
	if (*end) {
		const struct unit *u = units;
		while (u->letter && u->letter != tolower((unsigned char)*end))
			u++;
		if (!u->letter)
			return sbx_fail(err, "%s %s: unknown unit '%s'", flag, s, end);
		factor = u->factor;
		end++;
		/* 512m, 512mb, 512MiB: the same (binary units, as docker's). */
		if (units[0].letter == 'b' && u->letter != 'b' &&
		    (!strcasecmp(end, "b") || !strcasecmp(end, "ib")))
			end += strlen(end);
		if (*end)
			return sbx_fail(err, "%s %s: unknown unit '%s'", flag, s, end - 1);
	}
	double total = v * factor / divisor;
	if (total < 1 || total > (double)max || total != floor(total))
		return sbx_fail(err, "%s %s: must come to a whole number of %s, 1..%llu", flag, s,
				divisor == (double)MIB ? "MiB" : "seconds",
				(unsigned long long)max);
	*out = (uint64_t)total;
	return 0;
}

static const struct unit size_units[] = {
    {'b', 1}, {'k', 1024.0}, {'m', 1024.0 * 1024}, {'g', 1024.0 * 1024 * 1024}, {0, 0}};
static const struct unit time_units[] = {{'s', 1}, {'m', 60}, {'h', 3600}, {0, 0}};

static int parse_count(const char *flag, const char *s, uint64_t max, uint32_t *out,
		       struct sbx_err *err)
{
	char *end;

	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (!isdigit((unsigned char)*s) || *end || errno || v < 1 || v > max)
		return sbx_fail(err, "%s %s: must be a whole number, 1..%llu", flag, s,
				(unsigned long long)max);
	*out = (uint32_t)v;
	return 0;
}

static int push(const char **list, unsigned *n, unsigned max, const char *flag, const char *v,
		struct sbx_err *err)
{
	if (*n >= max)
		return sbx_fail(err, "at most %u %s", max, flag);
	list[(*n)++] = v;
	return 0;
}

int cli_policy_flag(int opt, const char *arg, struct cli *cli, struct sbx_err *err)
{
	struct cli_policy_flags *f = &cli->pf;
	uint64_t v;

	f->any = true;
	switch (opt) {
	case CLI_OPT_ENV:
		if (!*arg || *arg == '=')
			return sbx_fail(err, "--env %s: must be NAME=VALUE or NAME", arg);
		return push(f->env, &f->n_env, CLI_MAX_ENV, "--env", arg, err);
	case CLI_OPT_ENV_FILE:
		return push(f->env_files, &f->n_env_files, CLI_MAX_ENV_FILES, "--env-file", arg,
			    err);
	case CLI_OPT_ALLOW:
		return push(f->allow, &f->n_allow, SBX_EGRESS_RULES_MAX, "--allow", arg, err);
	case CLI_OPT_IMAGE:
		f->image = arg;
		return 0;
	case CLI_OPT_MEMORY:
		if (parse_units("--memory", arg, size_units, 1, (double)MIB, SBX_MEMORY_MB_MAX, &v,
				err) < 0)
			return -1;
		f->memory_mb = (uint32_t)v;
		return 0;
	case CLI_OPT_CPUS: {
		char *end;
		errno = 0;
		double c = strtod(arg, &end);
		if (end == arg || *end || errno || !isfinite(c) || c <= 0)
			return sbx_fail(err, "--cpus %s: not a positive number", arg);
		f->cpus = c;
		return 0;
	}
	case CLI_OPT_SCRIPT_TIMEOUT:
		if (parse_units("--timeout", arg, time_units, 1, 1, SBX_SCRIPT_SECONDS_MAX, &v,
				err) < 0)
			return -1;
		f->script_seconds = (uint32_t)v;
		return 0;
	case CLI_OPT_RUN_TIMEOUT:
		if (parse_units("--run-timeout", arg, time_units, 1, 1, SBX_RUN_SECONDS_MAX, &v,
				err) < 0)
			return -1;
		f->run_seconds = (uint32_t)v;
		return 0;
	case CLI_OPT_IDLE_TIMEOUT:
		if (parse_units("--idle-timeout", arg, time_units, 1, 1, SBX_RUN_SECONDS_MAX, &v,
				err) < 0)
			return -1;
		f->idle_seconds = (uint32_t)v;
		return 0;
	case CLI_OPT_PIDS:
		return parse_count("--pids", arg, SBX_PIDS_MAX, &f->pids, err);
	case CLI_OPT_OUT_MB:
		return parse_count("--out-mb", arg, SBX_OUT_MB_MAX, &f->out_mb, err);
	case CLI_OPT_TMP_MB:
		return parse_count("--tmp-mb", arg, SBX_TMP_MB_MAX, &f->tmp_mb, err);
	default:
		return sbx_fail(err, "unknown policy option %d", opt);
	}
}
