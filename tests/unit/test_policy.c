/* SPDX-License-Identifier: Apache-2.0 */
/* Unit test of the policy codec: what parses, what it becomes, and the exact
 * error every bad document gets. Policies are written with ' for " so the
 * table stays readable; q() swaps them back. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "policy.h"

#define D64    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define PINNED "recon-runtime:2026.08.1@sha256:" D64

static char *q(const char *s)
{
	char *d = strdup(s);

	if (!d)
		abort();
	for (char *c = d; *c; c++)
		if (*c == '\'')
			*c = '"';
	return d;
}

static SbxPolicy *parse(const char *doc, struct sbx_err *err)
{
	char *json = q(doc);
	SbxPolicy *p = sbx_policy_parse(json, strlen(json), err);

	free(json);
	return p;
}

/* A bad document must fail, and its message must contain want. */
static void bad_raw(const char *desc, const char *json, size_t len, const char *want)
{
	struct sbx_err err = {0};
	SbxPolicy *p = sbx_policy_parse(json, len, &err);

	if (!check(!p && strstr(err.msg, want), "rejects %s", desc))
		printf("#   want: %s\n#    got: %s\n", want, p ? "(parsed)" : err.msg);
	sbx_policy_free(p);
}

static void bad(const char *desc, const char *doc, const char *want)
{
	char *json = q(doc);

	bad_raw(desc, json, strlen(json), want);
	free(json);
}

static bool digest_of(const char *doc, char hex[65])
{
	struct sbx_err err = {0};
	SbxPolicy *p = parse(doc, &err);
	int rc = p ? sbx_policy_digest(p, hex, &err) : -1;

	if (rc < 0)
		printf("# %s\n", err.msg);
	sbx_policy_free(p);
	return rc == 0;
}

/* ---- documents that parse ---- */

static void test_design_example(void)
{
	struct sbx_err err = {0};
	SbxPolicy *p =
	    parse("{'image': '" PINNED "',"
		  " 'mounts': [{'path': '/data', 'mode': 'ro'}, {'path': '/out', 'mode': 'rw'}],"
		  " 'env': {}, 'egress': {'policy': 'deny', 'allow': []},"
		  " 'limits': {'cpu': 2, 'memory_mb': 4096, 'script_seconds': 120,"
		  " 'run_seconds': 3600}, 'lifetime': 'per_run'}",
		  &err);
	const Sbx__V1__Limits *l;

	if (!check(p != NULL, "DESIGN.md example parses")) {
		printf("# %s\n", err.msg);
		return;
	}
	l = p->limits;
	check(strcmp(p->image, PINNED) == 0, "image kept");
	check(p->n_mounts == 2 && strcmp(p->mounts[0]->path, "/data") == 0 &&
		  p->mounts[0]->mode == SBX__V1__MOUNT__MODE__RO &&
		  strcmp(p->mounts[1]->path, "/out") == 0 &&
		  p->mounts[1]->mode == SBX__V1__MOUNT__MODE__RW,
	      "mounts /data ro, /out rw");
	check(p->n_env == 0, "env empty");
	check(p->egress->policy == SBX__V1__EGRESS__POLICY__DENY && p->egress->n_allow == 0,
	      "egress deny");
	check(l->cpu_millis == 2000 && l->memory_mb == 4096 && l->script_seconds == 120 &&
		  l->run_seconds == 3600,
	      "written limits kept");
	check(l->pids == SBX_PIDS_DEFAULT && l->out_mb == SBX_OUT_MB_DEFAULT &&
		  l->tmp_mb == SBX_TMP_MB_DEFAULT && l->output_kb == SBX_OUTPUT_KB_DEFAULT,
	      "unwritten limits defaulted");
	check(p->lifetime == SBX__V1__POLICY__LIFETIME__PER_RUN, "lifetime per_run");
	sbx_policy_free(p);
}

static void test_unpinned_parses(void)
{
	struct sbx_err err = {0};
	SbxPolicy *p = parse("{'image': 'recon-runtime:2026.08.1'}", &err);

	/* Whether an unpinned name may run is sbxd's rule (images.allow_unpinned). */
	check(p && strcmp(p->image, "recon-runtime:2026.08.1") == 0, "unpinned name:tag parses");
	sbx_policy_free(p);
}

static void test_host_defaults(void)
{
	struct sbx_err err = {0};
	SbxPolicy *p = parse("{'image': 'host'}", &err);
	const Sbx__V1__Limits *l;

	if (!check(p != NULL, "minimal host policy parses")) {
		printf("# %s\n", err.msg);
		return;
	}
	l = p->limits;
	check(strcmp(p->image, "host") == 0, "image host");
	check(sbx_policy_mount(p, "/data") && sbx_policy_mount(p, "/out") &&
		  sbx_policy_mount(p, "/out")->mode == SBX__V1__MOUNT__MODE__RW &&
		  !sbx_policy_mount(p, "/tmp"),
	      "default mounts and sbx_policy_mount");
	check(p->n_env == 0 && p->egress->policy == SBX__V1__EGRESS__POLICY__DENY &&
		  p->egress->n_allow == 0,
	      "default env and egress");
	check(l->cpu_millis == SBX_CPU_MILLIS_DEFAULT && l->memory_mb == SBX_MEMORY_MB_DEFAULT &&
		  l->script_seconds == SBX_SCRIPT_SECONDS_DEFAULT &&
		  l->run_seconds == SBX_RUN_SECONDS_DEFAULT && l->pids == SBX_PIDS_DEFAULT &&
		  l->out_mb == SBX_OUT_MB_DEFAULT && l->tmp_mb == SBX_TMP_MB_DEFAULT &&
		  l->output_kb == SBX_OUTPUT_KB_DEFAULT,
	      "every limit defaulted");
	check(p->lifetime == SBX__V1__POLICY__LIFETIME__PER_RUN, "default lifetime");
	sbx_policy_free(p);
}

static void test_variants(void)
{
	struct sbx_err err = {0};
	SbxPolicy *p;

	p = parse("{'image': '/srv/images/rootfs', 'mounts': []}", &err);
	check(p && p->n_mounts == 0 && !sbx_policy_mount(p, "/out"),
	      "rootfs path image, empty mounts means none");
	sbx_policy_free(p);

	p = parse("{'image': 'host', 'mounts': [{'path': '/out', 'mode': 'rw'}]}", &err);
	check(p && p->n_mounts == 1 && !sbx_policy_mount(p, "/data"), "/out alone");
	sbx_policy_free(p);

	p = parse("{'image': 'host', 'limits': {'run_seconds': 60}}", &err);
	check(p && p->limits->script_seconds == 60, "unwritten script_seconds follows run_seconds");
	sbx_policy_free(p);

	p = parse("{'image': 'host', 'limits': {'cpu': 0.01}}", &err);
	check(p && p->limits->cpu_millis == 10, "cpu 0.01 is 10 millis");
	sbx_policy_free(p);

	p = parse("{'image': 'host', 'limits': {'cpu': 1024, 'memory_mb': 1048576, "
		  "'script_seconds': 86400, 'run_seconds': 604800, 'pids': 65536, "
		  "'out_mb': 1048576, 'tmp_mb': 1048576, 'output_kb': 1048576}}",
		  &err);
	check(p != NULL, "every limit at its maximum");
	sbx_policy_free(p);

	p = parse("{'image': 'host', 'env': {'Z': '', 'A': 'x', 'M': '\\u00e9'}}", &err);
	check(p && p->n_env == 3 && strcmp(p->env[0]->name, "A") == 0 &&
		  strcmp(p->env[2]->name, "Z") == 0 && p->env[2]->value[0] == '\0',
	      "env sorted, empty value kept");
	sbx_policy_free(p);

	p = parse("{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': ["
		  "'b.example:443', 'A.Example:80', {'host': 'a.example', 'port': 22, "
		  "'connections_per_minute': 5, 'bytes_per_second': 1000, 'allow_private': true},"
		  "'*.Svc.Internal:8443', '10.0.0.1:5432']}}",
		  &err);
	if (check(p && p->egress->n_allow == 5, "allowlist parses")) {
		Sbx__V1__EgressRule **r = p->egress->allow;

		check(strcmp(r[0]->host, "*.svc.internal") == 0 &&
			  strcmp(r[1]->host, "10.0.0.1") == 0 &&
			  strcmp(r[2]->host, "a.example") == 0 && r[2]->port == 22 &&
			  r[2]->allow_private && r[2]->connections_per_minute == 5 &&
			  strcmp(r[3]->host, "a.example") == 0 && r[3]->port == 80 &&
			  !r[3]->allow_private && strcmp(r[4]->host, "b.example") == 0,
		      "rules lowercased, sorted by host then port");
	} else {
		printf("# %s\n", err.msg);
	}
	sbx_policy_free(p);
}

static void test_egress_entries(void)
{
	struct sbx_err err = {0};
	SbxPolicy *p;

	p = parse("{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': ["
		  "'a.example:443', {'host': 'b.example', 'port': 80}]}}",
		  &err);
	if (check(p && p->egress->n_allow == 2, "entries without limits parse")) {
		bool all = true;

		for (size_t i = 0; i < 2; i++) {
			const Sbx__V1__EgressRule *r = p->egress->allow[i];

			all &= r->connections_per_minute == 600 &&
			       r->connections_per_minute ==
				   SBX_EGRESS_CONNECTIONS_PER_MINUTE_DEFAULT &&
			       r->max_concurrent == 32 &&
			       r->max_concurrent == SBX_EGRESS_MAX_CONCURRENT_DEFAULT &&
			       r->bytes_per_second == 0 && !r->allow_private;
		}
		check(all, "both forms default to 600 a minute, 32 at once, no byte rate");
		check(p->egress->alert_bytes == 0 && p->egress->max_bytes == 0,
		      "alert_bytes and max_bytes default to none");
	} else {
		printf("# %s\n", err.msg);
	}
	sbx_policy_free(p);

	p = parse("{'image': 'host', 'egress': {'policy': 'allowlist', 'alert_bytes': "
		  "4611686018427387904,"
		  " 'max_bytes': 1, 'allow': [{'host': 'a.example', 'port': 1, "
		  "'connections_per_minute': 600000, 'max_concurrent': 4096, "
		  "'bytes_per_second': 1099511627776}, {'host': 'b.example', 'port': 1, "
		  "'connections_per_minute': 1, 'max_concurrent': 1, 'bytes_per_second': 0}]}}",
		  &err);
	if (check(p != NULL, "every egress number at its bounds")) {
		const Sbx__V1__EgressRule *a = p->egress->allow[0], *b = p->egress->allow[1];

		check(a->connections_per_minute == 600000 && a->max_concurrent == 4096 &&
			  a->bytes_per_second == (UINT64_C(1) << 40) &&
			  b->connections_per_minute == 1 && b->max_concurrent == 1 &&
			  p->egress->alert_bytes == (UINT64_C(1) << 62) &&
			  p->egress->max_bytes == 1,
		      "bounds kept as written");
	} else {
		printf("# %s\n", err.msg);
	}
	sbx_policy_free(p);

	/* IDNA, case and the root's dot: the entry the proxy compares. */
	p = parse("{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': ["
		  "'B\\u00dccher.example:443', {'host': '*.B\\u00fccher.Example.', 'port': 443},"
		  " 'API.Example.:80', 'fa\\u00df.de:443']}}",
		  &err);
	if (check(p && p->egress->n_allow == 4, "IDNA entries parse")) {
		Sbx__V1__EgressRule **r = p->egress->allow;

		check(strcmp(r[0]->host, "*.xn--bcher-kva.example") == 0 &&
			  strcmp(r[1]->host, "api.example") == 0 &&
			  strcmp(r[2]->host, "xn--bcher-kva.example") == 0 &&
			  strcmp(r[3]->host, "xn--fa-hia.de") == 0,
		      "hosts in A-labels, lower case, without the trailing dot");
	} else {
		printf("# %s\n", err.msg);
	}
	sbx_policy_free(p);

	/* A deny policy may carry the zeros its effective JSON prints. */
	p = parse("{'image': 'host', 'egress': {'policy': 'deny', 'allow': [], 'alert_bytes': 0, "
		  "'max_bytes': 0}}",
		  &err);
	check(p != NULL, "deny with zero byte budgets parses");
	sbx_policy_free(p);
}

/* ---- canonical form ---- */

static const char full[] =
    "{'image': '" PINNED "',"
    " 'env': {'LANG': 'C.UTF-8', 'B': 'two'},"
    " 'mounts': [{'path': '/out', 'mode': 'rw'}, {'path': '/data', 'mode': 'ro'}],"
    " 'egress': {'policy': 'allowlist', 'alert_bytes': 1000000, 'allow': ['API.internal:443',"
    " {'host': '*.example.com', 'port': 443, 'connections_per_minute': 60,"
    " 'bytes_per_second': 1048576, 'max_concurrent': 7, 'allow_private': false},"
    " 'B\\u00dccher.example.:8443']},"
    " 'limits': {'cpu': 1.5, 'memory_mb': 512, 'pids': 64}}";

static void test_round_trip(void)
{
	struct sbx_err err = {0};
	SbxPolicy *p = parse(full, &err), *p2 = NULL;
	char *j1 = NULL, *j2 = NULL;
	char h1[65] = "", h2[65] = "";

	if (!check(p != NULL, "full policy parses")) {
		printf("# %s\n", err.msg);
		return;
	}
	j1 = sbx_policy_to_json(p);
	check(j1 != NULL, "to_json");
	if (j1)
		p2 = sbx_policy_parse(j1, strlen(j1), &err);
	if (!check(p2 != NULL, "to_json output parses"))
		printf("# %s\n%s\n", err.msg, j1 ? j1 : "");
	else
		j2 = sbx_policy_to_json(p2);
	check(sbx_policy_digest(p, h1, &err) == 0 && p2 && sbx_policy_digest(p2, h2, &err) == 0 &&
		  strcmp(h1, h2) == 0 && strlen(h1) == 64,
	      "round trip keeps the digest");
	check(j1 && j2 && strcmp(j1, j2) == 0, "to_json is a fixed point");
	check(j1 && strstr(j1, "\"cpu\": 1.5,") && strstr(j1, "\"lifetime\": \"per_run\"") &&
		  strstr(j1, "\"output_kb\": 1024") && strstr(j1, "\"host\": \"api.internal\"") &&
		  strstr(j1, "\"allow_private\": false") &&
		  strstr(j1, "\"connections_per_minute\": 600") &&
		  strstr(j1, "\"max_concurrent\": 32") && strstr(j1, "\"max_concurrent\": 7") &&
		  strstr(j1, "\"alert_bytes\": 1000000") && strstr(j1, "\"max_bytes\": 0"),
	      "to_json has defaults and full egress objects");
	check(j1 && strstr(j1, "\"egress\"") < strstr(j1, "\"env\"") &&
		  strstr(j1, "\"env\"") < strstr(j1, "\"image\""),
	      "to_json keys sorted");
	free(j1);
	free(j2);
	sbx_policy_free(p);
	sbx_policy_free(p2);

	p = parse("{'image': 'host', 'limits': {'cpu': 2}}", &err);
	j1 = p ? sbx_policy_to_json(p) : NULL;
	check(j1 && strstr(j1, "\"cpu\": 2,"), "whole cpu prints as an integer");
	free(j1);
	sbx_policy_free(p);

	/* A deny policy's effective JSON, with its zero budgets, parses back. */
	p = parse("{'image': 'host'}", &err);
	j1 = p ? sbx_policy_to_json(p) : NULL;
	p2 = j1 ? sbx_policy_parse(j1, strlen(j1), &err) : NULL;
	check(p2 && sbx_policy_digest(p, h1, &err) == 0 && sbx_policy_digest(p2, h2, &err) == 0 &&
		  strcmp(h1, h2) == 0 && strstr(j1, "\"alert_bytes\": 0"),
	      "deny round trip keeps the digest");
	free(j1);
	sbx_policy_free(p);
	sbx_policy_free(p2);
}

static void test_digest_stable(void)
{
	char a[65], b[65], c[65];

	check(
	    digest_of("{'image': 'host', 'env': {'A': '1', 'B': '2'}, 'limits': {'cpu': 1}}", a) &&
		digest_of("{'limits': {'cpu': 1.0}, 'env': {'B': '2', 'A': '1'}, 'image': 'host'}",
			  b) &&
		strcmp(a, b) == 0,
	    "digest independent of key order and env order");
	check(digest_of("{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': "
			"['b.example:1', 'a.example:2', 'a.example:1']}}",
			a) &&
		  digest_of("{'image': 'host', 'egress': {'allow': [{'host': 'A.example', "
			    "'port': 1}, 'a.example:2', 'B.EXAMPLE:1'], 'policy': 'allowlist'}}",
			    b) &&
		  strcmp(a, b) == 0,
	      "digest independent of rule order, form and host case");
	check(digest_of("{'image': 'host'}", a) &&
		  digest_of("{'image': 'host', 'mounts': [{'path': '/out', 'mode': 'rw'},"
			    " {'path': '/data', 'mode': 'ro'}], 'env': {}, 'egress': "
			    "{'policy': 'deny'}, 'limits': {}, 'lifetime': 'per_run'}",
			    b) &&
		  digest_of("{'image': 'host', 'limits': {'pids': 257}}", c) && strcmp(a, b) == 0 &&
		  strcmp(a, c) != 0,
	      "defaults digest as written; a change changes it");
	/* Digests of deny policies as the tree before the egress limits gave
	 * them (proto3 omits the new zero fields): existing runs' policy
	 * digests stay what their callers recorded. */
	check(digest_of("{'image': 'host'}", a) &&
		  strcmp(a, "ada7799ed093b5b195cbd2c3fa4453fb7b424878b13d100f3595f787e3754719") ==
		      0,
	      "deny policy digest unchanged by the egress fields");
	check(digest_of("{'image': '" PINNED "',"
			" 'mounts': [{'path': '/data', 'mode': 'ro'}, {'path': '/out', 'mode': "
			"'rw'}], 'env': {}, 'egress': {'policy': 'deny', 'allow': []},"
			" 'limits': {'cpu': 2, 'memory_mb': 4096, 'script_seconds': 120,"
			" 'run_seconds': 3600}, 'lifetime': 'per_run'}",
			a) &&
		  strcmp(a, "9613a47b75934c33dd752c3b73cb10f2426d4a8d4a6fa66a905a9d5a42defb32") ==
		      0,
	      "DESIGN.md example's digest unchanged");
	check(digest_of("{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': "
			"['A.example:443', 'b\\u00fccher.example:1']}}",
			a) &&
		  digest_of("{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': "
			    "[{'host': 'a.example.', 'port': 443, 'connections_per_minute': 600, "
			    "'max_concurrent': 32, 'bytes_per_second': 0}, "
			    "'xn--bcher-kva.example:1'], 'alert_bytes': 0, 'max_bytes': 0}}",
			    b) &&
		  strcmp(a, b) == 0,
	      "digest of defaults and normal forms equals the written-out form");
}

/* ---- documents that do not ---- */

static const struct {
	const char *desc, *doc, *want;
} bad_cases[] = {
    /* document */
    {"trailing garbage", "{'image': 'host'} x",
     "policy: line 1 column 19: end of file expected near 'x'"},
    {"invalid JSON with line and column", "{\n 'image': 'host',\n 'limits': {'cpu': tru}\n}",
     "policy: line 3 column 22: invalid token near 'tru'"},
    {"empty document", "", "policy: line 1 column 0: '[' or '{' expected near end of file"},
    {"top level array", "[{'image': 'host'}]", "policy: must be a JSON object"},
    {"top level scalar", "'host'", "policy: line 1 column 6: '[' or '{' expected"},
    {"duplicate key", "{'image': 'host', 'image': 'host'}", "duplicate object key"},
    {"unknown top level key", "{'image': 'host', 'bogus': 1}", "bogus: unknown key"},
    {"unknown key before missing image", "{'imgae': 'host'}", "imgae: unknown key"},
    /* image */
    {"missing image", "{}", "image: missing"},
    {"image not a string", "{'image': 5}", "image: must be a string"},
    {"image null", "{'image': null}", "image: must be a string"},
    {"image with NUL", "{'image': '/srv/a\\u0000b'}", "image: must not contain NUL"},
    {"image empty", "{'image': ''}",
     "image: must be \"host\", an absolute rootfs path, name:tag or name:tag@sha256:<64 hex>"},
    {"image HOST", "{'image': 'HOST'}", "image: must be \"host\""},
    {"image relative path", "{'image': 'srv/rootfs'}", "image: must be \"host\""},
    {"image path with ..", "{'image': '/srv/../etc'}", "image: must be \"host\""},
    {"image bad pin", "{'image': 'recon-runtime:2026.08.1@sha256:abc'}", "the pin must be"},
    {"image empty tag", "{'image': 'recon-runtime:'}", "the tag must be"},
    {"image without tag", "{'image': 'recon-runtime@sha256:" D64 "'}", "image: must be \"host\""},
    {"image uppercase name", "{'image': 'Recon:1@sha256:" D64 "'}", "image: must be \"host\""},
    {"image uppercase digest",
     "{'image': 'recon:1@sha256:0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef'}",
     "image: must be \"host\""},
    {"image short digest",
     "{'image': 'recon:1@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde'}",
     "image: must be \"host\""},
    {"image long digest", "{'image': 'recon:1@sha256:" D64 "0'}", "image: must be \"host\""},
    {"image other algorithm", "{'image': 'recon:1@sha512:" D64 "'}", "image: must be \"host\""},
    {"image bad tag", "{'image': 'recon:a+b@sha256:" D64 "'}", "image: must be \"host\""},
    /* mounts */
    {"mounts not an array", "{'image': 'host', 'mounts': {}}", "mounts: must be an array"},
    {"mounts null", "{'image': 'host', 'mounts': null}", "mounts: must be an array"},
    {"mount not an object", "{'image': 'host', 'mounts': ['/data']}",
     "mounts[0]: must be an object"},
    {"mount unknown key",
     "{'image': 'host', 'mounts': [{'path': '/data', 'mode': 'ro', 'bogus': 1}]}",
     "mounts[0].bogus: unknown key"},
    {"mount path missing", "{'image': 'host', 'mounts': [{'mode': 'ro'}]}",
     "mounts[0].path: missing"},
    {"mount mode missing", "{'image': 'host', 'mounts': [{'path': '/data'}]}",
     "mounts[0].mode: missing"},
    {"mount path not a string", "{'image': 'host', 'mounts': [{'path': 1, 'mode': 'ro'}]}",
     "mounts[0].path: must be a string"},
    {"mount relative path", "{'image': 'host', 'mounts': [{'path': 'data', 'mode': 'ro'}]}",
     "mounts[0].path: must be an absolute path"},
    {"mount trailing slash", "{'image': 'host', 'mounts': [{'path': '/data/', 'mode': 'ro'}]}",
     "mounts[0].path: must be normalised"},
    {"mount path with ..", "{'image': 'host', 'mounts': [{'path': '/out/../etc', 'mode': 'rw'}]}",
     "mounts[0].path: must be normalised"},
    {"mount path with //", "{'image': 'host', 'mounts': [{'path': '//out', 'mode': 'rw'}]}",
     "mounts[0].path: must be normalised"},
    {"mount unsupported path",
     "{'image': 'host', 'mounts': [{'path': '/data', 'mode': 'ro'}, {'path': '/out', "
     "'mode': 'rw'}, {'path': '/etc', 'mode': 'ro'}]}",
     "mounts[2].path: only /data (ro) and /out (rw) can be mounted"},
    {"duplicate mount path",
     "{'image': 'host', 'mounts': [{'path': '/out', 'mode': 'rw'}, {'path': '/out', "
     "'mode': 'rw'}]}",
     "mounts[1].path: duplicate mount path /out"},
    {"/data rw", "{'image': 'host', 'mounts': [{'path': '/data', 'mode': 'rw'}]}",
     "mounts[0].mode: /data must be ro"},
    {"/out ro", "{'image': 'host', 'mounts': [{'path': '/out', 'mode': 'ro'}]}",
     "mounts[0].mode: /out must be rw"},
    {"mount mode unknown", "{'image': 'host', 'mounts': [{'path': '/out', 'mode': 'RW'}]}",
     "mounts[0].mode: must be \"ro\" or \"rw\""},
    {"mount mode not a string", "{'image': 'host', 'mounts': [{'path': '/out', 'mode': 2}]}",
     "mounts[0].mode: must be a string"},
    /* env */
    {"env not an object", "{'image': 'host', 'env': ['A=1']}", "env: must be an object"},
    {"env name with =", "{'image': 'host', 'env': {'FOO=BAR': 'x'}}",
     "env.FOO=BAR: name must not contain '='"},
    {"env name with NUL", "{'image': 'host', 'env': {'A\\u0000B': 'x'}}",
     "policy: line 1 column 36: NUL byte in object key not supported"},
    {"env empty name", "{'image': 'host', 'env': {'': 'x'}}", "env.: name must not be empty"},
    {"env value with NUL", "{'image': 'host', 'env': {'A': 'x\\u0000y'}}",
     "env.A: value must not contain NUL"},
    {"env value not a string", "{'image': 'host', 'env': {'A': 1}}", "env.A: must be a string"},
    /* egress */
    {"egress not an object", "{'image': 'host', 'egress': 'deny'}", "egress: must be an object"},
    {"egress unknown key", "{'image': 'host', 'egress': {'policy': 'deny', 'bogus': []}}",
     "egress.bogus: unknown key"},
    {"egress policy missing", "{'image': 'host', 'egress': {'allow': []}}",
     "egress.policy: missing"},
    {"egress policy allow", "{'image': 'host', 'egress': {'policy': 'allow'}}",
     "egress.policy: must be \"deny\" or \"allowlist\""},
    {"egress policy not a string", "{'image': 'host', 'egress': {'policy': true}}",
     "egress.policy: must be a string"},
    {"egress deny with entries",
     "{'image': 'host', 'egress': {'policy': 'deny', 'allow': ['a.example:443']}}",
     "egress.allow: must be empty when policy is deny"},
    {"egress allowlist empty", "{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': []}}",
     "egress.allow: must not be empty when policy is allowlist"},
    {"egress allowlist without allow", "{'image': 'host', 'egress': {'policy': 'allowlist'}}",
     "egress.allow: must not be empty when policy is allowlist"},
    {"egress allow not an array",
     "{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': 'a.example:443'}}",
     "egress.allow: must be an array"},
    {"egress entry a number",
     "{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': [443]}}",
     "egress.allow[0]: must be \"host:port\" or an object"},
    {"egress port 0",
     "{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': ['a.example:0']}}",
     "egress.allow[0]: port must be 1..65535"},
    {"egress port 70000",
     "{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': ['a.b:443', "
     "'a.example:70000']}}",
     "egress.allow[1]: port must be 1..65535"},
    {"egress port signed",
     "{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': ['a.b:+1']}}",
     "egress.allow[0]: port must be 1..65535"},
    {"egress no port",
     "{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': ['a.example']}}",
     "egress.allow[0]: must be \"host:port\""},
    {"egress bad host",
     "{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': ['a_b.example:443']}}",
     "egress.allow[0]: host: a label may hold only letters, digits and hyphens"},
    {"egress empty label",
     "{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': ['a..b:443']}}",
     "egress.allow[0]: host: empty label"},
    {"egress empty host", "{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': [':443']}}",
     "egress.allow[0]: host: empty host name"},
    {"egress bare wildcard",
     "{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': ['*:443']}}",
     "egress.allow[0]: host: a wildcard is allowed only as a leading \"*.\""},
    {"egress inner wildcard",
     "{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': ['a.*.example:443']}}",
     "egress.allow[0]: host: a wildcard is allowed only as a leading \"*.\""},
    {"egress short IPv4",
     "{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': ['127.1:80']}}",
     "egress.allow[0]: host: a numeric name must be a dotted-quad IPv4 address"},
    {"egress IPv4 out of range",
     "{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': ['256.0.0.1:80']}}",
     "egress.allow[0]: host: a numeric name must be a dotted-quad IPv4 address"},
    {"egress wildcard IPv4",
     "{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': ['*.10.0.0.1:80']}}",
     "egress.allow[0]: host: a wildcard covers names, not addresses"},
    {"egress IPv6", "{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': ['::1:80']}}",
     "egress.allow[0]: host: an IPv6 literal is not allowed here"},
    {"egress object unknown key",
     "{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': [{'host': 'a.b', 'port': 1, "
     "'rate': 2}]}}",
     "egress.allow[0].rate: unknown key"},
    {"egress object host missing",
     "{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': [{'port': 1}]}}",
     "egress.allow[0].host: missing"},
    {"egress object host not a string",
     "{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': [{'host': 1, 'port': 1}]}}",
     "egress.allow[0].host: must be a string"},
    {"egress object bad host",
     "{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': [{'host': 'a b', 'port': 1}]}}",
     "egress.allow[0].host: a label may hold only letters, digits and hyphens"},
    {"egress object port missing",
     "{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': [{'host': 'a.b'}]}}",
     "egress.allow[0].port: missing"},
    {"egress object port 0",
     "{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': [{'host': 'a.b', 'port': 0}]}}",
     "egress.allow[0].port: must be 1..65535"},
    {"egress object port 70000",
     "{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': [{'host': 'a.b', 'port': "
     "70000}]}}",
     "egress.allow[0].port: must be 1..65535"},
    {"egress object port a string",
     "{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': [{'host': 'a.b', 'port': "
     "'443'}]}}",
     "egress.allow[0].port: must be an integer"},
    {"egress object negative rate",
     "{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': [{'host': 'a.b', 'port': 1, "
     "'connections_per_minute': -1}]}}",
     "egress.allow[0].connections_per_minute: must be 1..600000"},
    {"egress object real bandwidth",
     "{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': [{'host': 'a.b', 'port': 1, "
     "'bytes_per_second': 1.5}]}}",
     "egress.allow[0].bytes_per_second: must be an integer"},
    {"egress object allow_private not a boolean",
     "{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': [{'host': 'a.b', 'port': 1, "
     "'allow_private': 1}]}}",
     "egress.allow[0].allow_private: must be a boolean"},
    {"egress duplicate rule",
     "{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': ['API.example:443', "
     "'b.example:443', {'host': 'api.EXAMPLE', 'port': 443}]}}",
     "egress.allow[2]: duplicate rule api.example:443"},
    {"egress duplicate after the trailing dot",
     "{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': ['A.example:443', "
     "'a.example.:443']}}",
     "egress.allow[1]: duplicate rule a.example:443"},
    {"egress duplicate after IDNA",
     "{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': ['xn--bcher-kva.example:443', "
     "{'host': 'B\\u00fccher.example', 'port': 443}]}}",
     "egress.allow[1]: duplicate rule xn--bcher-kva.example:443"},
    {"egress invalid IDNA name",
     "{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': "
     "['\\ud83d\\ude42.example:443']}}",
     "egress.allow[0]: host: invalid IDNA name: "},
    {"egress object invalid IDNA name",
     "{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': [{'host': "
     "'-b\\u00fccher.example', 'port': 1}]}}",
     "egress.allow[0].host: invalid IDNA name: "},
    {"egress trailing dots",
     "{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': ['a.example..:443']}}",
     "egress.allow[0]: host: empty label"},
    {"egress host with NUL",
     "{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': ['a\\u0000b.example:443']}}",
     "egress.allow[0]: must not contain NUL"},
    {"egress host control byte",
     "{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': ['a\\u0007b.example:443']}}",
     "egress.allow[0]: host: control byte 0x07 in a host name"},
    {"egress bracketed IPv6",
     "{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': ['[::1]:443']}}",
     "egress.allow[0]: host: an IPv6 literal is not allowed here"},
    {"egress decimal IPv4",
     "{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': ['2130706433:80']}}",
     "egress.allow[0]: host: a numeric name must be a dotted-quad IPv4 address"},
    {"egress hex IPv4",
     "{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': ['0x7f.1:80']}}",
     "egress.allow[0]: host: a numeric name must be a dotted-quad IPv4 address"},
    {"egress object rate 0",
     "{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': [{'host': 'a.b', 'port': 1, "
     "'connections_per_minute': 0}]}}",
     "egress.allow[0].connections_per_minute: must be 1..600000"},
    {"egress object rate over 600000",
     "{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': [{'host': 'a.b', 'port': 1, "
     "'connections_per_minute': 600001}]}}",
     "egress.allow[0].connections_per_minute: must be 1..600000"},
    {"egress object max_concurrent 0",
     "{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': [{'host': 'a.b', 'port': 1, "
     "'max_concurrent': 0}]}}",
     "egress.allow[0].max_concurrent: must be 1..4096"},
    {"egress object max_concurrent 4097",
     "{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': [{'host': 'a.b', 'port': 1, "
     "'max_concurrent': 4097}]}}",
     "egress.allow[0].max_concurrent: must be 1..4096"},
    {"egress object max_concurrent a string",
     "{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': [{'host': 'a.b', 'port': 1, "
     "'max_concurrent': '2'}]}}",
     "egress.allow[0].max_concurrent: must be an integer"},
    {"egress object bandwidth over 2^40",
     "{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': [{'host': 'a.b', 'port': 1, "
     "'bytes_per_second': 1099511627777}]}}",
     "egress.allow[0].bytes_per_second: must be 0..1099511627776"},
    {"egress object negative bandwidth",
     "{'image': 'host', 'egress': {'policy': 'allowlist', 'allow': [{'host': 'a.b', 'port': 1, "
     "'bytes_per_second': -1}]}}",
     "egress.allow[0].bytes_per_second: must be 0..1099511627776"},
    {"egress alert_bytes negative",
     "{'image': 'host', 'egress': {'policy': 'allowlist', 'alert_bytes': -1, 'allow': ['a.b:1']}}",
     "egress.alert_bytes: must be 0..4611686018427387904"},
    {"egress alert_bytes over 2^62",
     "{'image': 'host', 'egress': {'policy': 'allowlist', 'alert_bytes': 4611686018427387905, "
     "'allow': ['a.b:1']}}",
     "egress.alert_bytes: must be 0..4611686018427387904"},
    {"egress alert_bytes real",
     "{'image': 'host', 'egress': {'policy': 'allowlist', 'alert_bytes': 1.5, 'allow': ['a.b:1']}}",
     "egress.alert_bytes: must be an integer"},
    {"egress max_bytes over 2^62",
     "{'image': 'host', 'egress': {'policy': 'allowlist', 'max_bytes': 9223372036854775807, "
     "'allow': ['a.b:1']}}",
     "egress.max_bytes: must be 0..4611686018427387904"},
    {"egress max_bytes a string",
     "{'image': 'host', 'egress': {'policy': 'allowlist', 'max_bytes': '1', 'allow': ['a.b:1']}}",
     "egress.max_bytes: must be an integer"},
    {"egress alert_bytes with deny",
     "{'image': 'host', 'egress': {'policy': 'deny', 'alert_bytes': 1}}",
     "egress.alert_bytes: only with policy allowlist"},
    {"egress max_bytes with deny",
     "{'image': 'host', 'egress': {'policy': 'deny', 'max_bytes': 1024}}",
     "egress.max_bytes: only with policy allowlist"},
    /* limits */
    {"limits not an object", "{'image': 'host', 'limits': 1}", "limits: must be an object"},
    {"limits unknown key", "{'image': 'host', 'limits': {'bogus': 1}}",
     "limits.bogus: unknown key"},
    {"cpu a string", "{'image': 'host', 'limits': {'cpu': '2'}}", "limits.cpu: must be a number"},
    {"cpu 0", "{'image': 'host', 'limits': {'cpu': 0}}", "limits.cpu: must be 0.01..1024"},
    {"cpu 1e9", "{'image': 'host', 'limits': {'cpu': 1e9}}", "limits.cpu: must be 0.01..1024"},
    {"cpu negative", "{'image': 'host', 'limits': {'cpu': -1}}", "limits.cpu: must be 0.01..1024"},
    {"cpu below a hundredth", "{'image': 'host', 'limits': {'cpu': 0.009}}",
     "limits.cpu: must be 0.01..1024"},
    {"cpu 1025", "{'image': 'host', 'limits': {'cpu': 1025}}", "limits.cpu: must be 0.01..1024"},
    {"memory_mb 0", "{'image': 'host', 'limits': {'memory_mb': 0}}",
     "limits.memory_mb: must be 16..1048576"},
    {"memory_mb 15", "{'image': 'host', 'limits': {'memory_mb': 15}}",
     "limits.memory_mb: must be 16..1048576"},
    {"memory_mb absurd", "{'image': 'host', 'limits': {'memory_mb': 9223372036854775807}}",
     "limits.memory_mb: must be 16..1048576"},
    {"memory_mb real", "{'image': 'host', 'limits': {'memory_mb': 1.5}}",
     "limits.memory_mb: must be an integer"},
    {"memory_mb string", "{'image': 'host', 'limits': {'memory_mb': '4096'}}",
     "limits.memory_mb: must be an integer"},
    {"memory_mb beyond int64", "{'image': 'host', 'limits': {'memory_mb': 99999999999999999999}}",
     "too big integer"},
    {"script_seconds 0", "{'image': 'host', 'limits': {'script_seconds': 0}}",
     "limits.script_seconds: must be 1..86400"},
    {"script_seconds absurd", "{'image': 'host', 'limits': {'script_seconds': 86401}}",
     "limits.script_seconds: must be 1..86400"},
    {"script_seconds boolean", "{'image': 'host', 'limits': {'script_seconds': true}}",
     "limits.script_seconds: must be an integer"},
    {"run_seconds 0", "{'image': 'host', 'limits': {'run_seconds': 0}}",
     "limits.run_seconds: must be 1..604800"},
    {"run_seconds absurd", "{'image': 'host', 'limits': {'run_seconds': 604801}}",
     "limits.run_seconds: must be 1..604800"},
    {"script_seconds over run_seconds",
     "{'image': 'host', 'limits': {'script_seconds': 100, 'run_seconds': 50}}",
     "limits.script_seconds: must not exceed limits.run_seconds (50)"},
    {"pids 0", "{'image': 'host', 'limits': {'pids': 0}}", "limits.pids: must be 8..65536"},
    {"pids absurd", "{'image': 'host', 'limits': {'pids': 65537}}",
     "limits.pids: must be 8..65536"},
    {"out_mb 0", "{'image': 'host', 'limits': {'out_mb': 0}}", "limits.out_mb: must be 1..1048576"},
    {"out_mb absurd", "{'image': 'host', 'limits': {'out_mb': 1048577}}",
     "limits.out_mb: must be 1..1048576"},
    {"tmp_mb 0", "{'image': 'host', 'limits': {'tmp_mb': 0}}", "limits.tmp_mb: must be 1..1048576"},
    {"tmp_mb absurd", "{'image': 'host', 'limits': {'tmp_mb': 1048577}}",
     "limits.tmp_mb: must be 1..1048576"},
    {"output_kb 0", "{'image': 'host', 'limits': {'output_kb': 0}}",
     "limits.output_kb: must be 1..1048576"},
    {"output_kb absurd", "{'image': 'host', 'limits': {'output_kb': 1048577}}",
     "limits.output_kb: must be 1..1048576"},
    {"output_kb negative", "{'image': 'host', 'limits': {'output_kb': -1}}",
     "limits.output_kb: must be 1..1048576"},
    {"idle_seconds negative", "{'image': 'host', 'limits': {'idle_seconds': -1}}",
     "limits.idle_seconds: must be 0..604800"},
    {"idle_seconds absurd", "{'image': 'host', 'limits': {'idle_seconds': 604801}}",
     "limits.idle_seconds: must be 0..604800"},
    /* lifetime */
    {"lifetime unknown", "{'image': 'host', 'lifetime': 'forever'}",
     "lifetime: must be \"per_run\""},
    {"lifetime not a string", "{'image': 'host', 'lifetime': 1}", "lifetime: must be a string"},
};

static char *repeat(const char *head, const char *unit, size_t n, const char *tail)
{
	size_t hl = strlen(head), ul = strlen(unit), tl = strlen(tail);
	char *s = malloc(hl + ul * n + tl + 1), *c;

	if (!s)
		abort();
	memcpy(s, head, hl);
	c = s + hl;
	for (size_t i = 0; i < n; i++, c += ul)
		memcpy(c, unit, ul);
	memcpy(c, tail, tl + 1);
	return s;
}

/* Documents too big to write out in the table. */
static void test_bad_generated(void)
{
	char *s, *name, unit[64];
	size_t len;

	s = repeat("{\"image\": \"/", "a", 4096, "\"}");
	bad("image path over 4096 bytes", s, "image: must be \"host\"");
	free(s);

	name = repeat("", "N", 257, "");
	s = repeat("{\"image\": \"host\", \"env\": {\"", name, 1, "\": \"x\"}}");
	bad("env name over 256 bytes", s, "name must be at most 256 bytes");
	free(s);
	free(name);

	s = repeat("{\"image\": \"host\", \"env\": {\"A\": \"", "v", 32769, "\"}}");
	bad("env value over 32768 bytes", s, "env.A: value must be at most 32768 bytes");
	free(s);

	/* 257 distinct names: E000 .. E256 */
	s = malloc(32 + 257 * 16);
	if (!s)
		abort();
	len = (size_t)sprintf(s, "{\"image\": \"host\", \"env\": {");
	for (int i = 0; i <= SBX_ENV_MAX; i++)
		len += (size_t)sprintf(s + len, "%s\"E%03d\": \"\"", i ? ", " : "", i);
	strcpy(s + len, "}}");
	bad("more than 256 env entries", s, "env: at most 256 entries");
	free(s);

	s = malloc(64 + 257 * 24);
	if (!s)
		abort();
	len = (size_t)sprintf(s, "{\"image\": \"host\", \"egress\": {\"policy\": \"allowlist\", "
				 "\"allow\": [");
	for (int i = 0; i <= SBX_EGRESS_RULES_MAX; i++) {
		snprintf(unit, sizeof(unit), "%s\"h%d.example:443\"", i ? ", " : "", i);
		len += (size_t)sprintf(s + len, "%s", unit);
	}
	strcpy(s + len, "]}}");
	bad("more than 256 egress rules", s, "egress.allow: at most 256 entries");
	free(s);

	s = repeat("{\"image\": \"host\"}", " ", SBX_POLICY_BYTES_MAX, "");
	bad("document over the size limit", s, "policy: larger than 1048576 bytes");
	free(s);

	bad_raw("raw NUL byte in the document", "{\"image\": \"host\"}\0", 18, "policy: line 1");
}

static void test_bad_table(void)
{
	for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++)
		bad(bad_cases[i].desc, bad_cases[i].doc, bad_cases[i].want);
}

/* ---- files ---- */

static char *write_temp(const char *body, size_t len)
{
	char *path = strdup("/tmp/test_policy.XXXXXX");
	int fd = path ? mkstemp(path) : -1;

	if (fd < 0 || write(fd, body, len) != (ssize_t)len)
		abort();
	close(fd);
	return path;
}

static void test_load(void)
{
	struct sbx_err err = {0};
	char *json = q("{'image': 'host', 'limits': {'pids': 0}}");
	char *path = write_temp(json, strlen(json)), want[256];
	char *big = repeat("{\"image\": \"host\"}", " ", SBX_POLICY_BYTES_MAX, "");
	SbxPolicy *p;

	p = sbx_policy_load(path, &err);
	snprintf(want, sizeof(want), "%s: limits.pids: must be 8..65536", path);
	check(!p && strcmp(err.msg, want) == 0, "load error is prefixed with the path");
	unlink(path);
	free(path);
	free(json);

	json = q("{'image': 'host'}");
	path = write_temp(json, strlen(json));
	p = sbx_policy_load(path, &err);
	check(p && strcmp(p->image, "host") == 0, "load parses a file");
	sbx_policy_free(p);
	unlink(path);

	p = sbx_policy_load(path, &err);
	snprintf(want, sizeof(want), "%s: No such file or directory", path);
	check(!p && strcmp(err.msg, want) == 0 && err.errnum != 0, "load of a missing file");
	free(path);
	free(json);

	path = write_temp(big, strlen(big));
	p = sbx_policy_load(path, &err);
	snprintf(want, sizeof(want), "%s: policy: larger than 1048576 bytes", path);
	check(!p && strcmp(err.msg, want) == 0, "load of a file over the size limit");
	unlink(path);
	free(path);
	free(big);
}

int main(void)
{
	test_design_example();
	test_host_defaults();
	test_unpinned_parses();
	test_variants();
	test_egress_entries();
	test_round_trip();
	test_digest_stable();
	test_bad_table();
	test_bad_generated();
	test_load();
	return check_done();
}
