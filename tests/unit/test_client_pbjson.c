/* SPDX-License-Identifier: Apache-2.0 */
/* Unit test of clients/c/pbjson.c: messages to JSON text checked against the
 * exact expected text (proto3 JSON mapping), and back to the same bytes;
 * strict reading with errors naming the JSON path. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "pbjson.h"
#include "sbx/v1/sandbox.pb-c.h"

static char *compact(const ProtobufCMessage *m, unsigned flags)
{
	json_t *j = sbx_pbjson_from_message(m, flags);
	char *s = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;

	json_decref(j);
	return s;
}

/* m -> JSON (must equal want) -> message -> the same protobuf bytes. */
static void round_trip(const char *what, const ProtobufCMessage *m, unsigned flags,
		       const char *want)
{
	char *got = compact(m, flags);

	if (!check(got && !strcmp(got, want), "%s: JSON text", what))
		printf("#   want: %s\n#    got: %s\n", want, got ? got : "(null)");
	json_error_t jerr;
	json_t *j = json_loads(want, JSON_REJECT_DUPLICATES, &jerr);
	struct sbx_err err = {0};
	ProtobufCMessage *back = j ? sbx_pbjson_to_message(m->descriptor, j, &err) : NULL;
	size_t la = protobuf_c_message_get_packed_size(m);
	size_t lb = back ? protobuf_c_message_get_packed_size(back) : 0;
	uint8_t *a = malloc(la + 1), *b = malloc(lb + 1);
	protobuf_c_message_pack(m, a);
	if (back)
		protobuf_c_message_pack(back, b);
	if (!check(back && la == lb && !memcmp(a, b, la), "%s: back to the same bytes", what))
		printf("#   %s\n", back ? "bytes differ" : err.msg);
	free(a);
	free(b);
	free(got);
	json_decref(j);
	if (back)
		protobuf_c_message_free_unpacked(back, NULL);
}

static void bad(const char *what, const ProtobufCMessageDescriptor *d, const char *json,
		const char *want)
{
	json_t *j = json_loads(json, 0, NULL);
	struct sbx_err err = {0};
	ProtobufCMessage *m = j ? sbx_pbjson_to_message(d, j, &err) : NULL;

	if (!check(j && !m && strstr(err.msg, want), "rejects %s", what))
		printf("#   want: %s\n#    got: %s\n", want, m ? "(accepted)" : err.msg);
	if (m)
		protobuf_c_message_free_unpacked(m, NULL);
	json_decref(j);
}

static void test_status(void)
{
	Sbx__V1__StatusResponse s = SBX__V1__STATUS_RESPONSE__INIT;
	Sbx__V1__ExecStatus e = SBX__V1__EXEC_STATUS__INIT;
	Sbx__V1__ExecStatus *execs[] = {&e};
	Sbx__V1__StatusResponse__LabelsEntry l1 = SBX__V1__STATUS_RESPONSE__LABELS_ENTRY__INIT,
					     l2 = SBX__V1__STATUS_RESPONSE__LABELS_ENTRY__INIT;
	Sbx__V1__StatusResponse__LabelsEntry *labels[] = {&l1, &l2};
	char *argv[] = {"python3", "-c", "print(1)"};

	s.run_id = "run-1";
	s.state = SBX__V1__RUN_STATE__ACTIVE;
	s.policy_digest = "sha256:ab";
	e.exec_id = "e1";
	e.argv = argv;
	e.n_argv = 3;
	e.reason = SBX__V1__EXIT_REASON__EXITED;
	e.peak_memory_bytes = 3645440;
	e.stdout_truncated = 1;
	s.execs = execs;
	s.n_execs = 1;
	s.created_unix_ms = -5;
	l1.key = "team";
	l1.value = "recon";
	l2.key = "ticket";
	l2.value = "42";
	s.labels = labels;
	s.n_labels = 2;
	round_trip(
	    "StatusResponse", &s.base, 0,
	    "{\"runId\":\"run-1\",\"state\":\"ACTIVE\",\"policyDigest\":\"sha256:ab\","
	    "\"execs\":[{\"execId\":\"e1\",\"argv\":[\"python3\",\"-c\",\"print(1)\"],"
	    "\"reason\":\"EXITED\",\"peakMemoryBytes\":\"3645440\",\"stdoutTruncated\":true}],"
	    "\"createdUnixMs\":\"-5\",\"labels\":{\"team\":\"recon\",\"ticket\":\"42\"}}");

	/* With defaults: a script reading .exitCode finds 0. */
	char *got = compact(&e.base, SBX_PBJSON_EMIT_DEFAULTS);
	const char *want =
	    "{\"execId\":\"e1\",\"argv\":[\"python3\",\"-c\",\"print(1)\"],\"reason\":\"EXITED\","
	    "\"exitCode\":0,\"signal\":0,\"startedUnixMs\":\"0\",\"endedUnixMs\":\"0\","
	    "\"cpuMs\":\"0\",\"peakMemoryBytes\":\"3645440\",\"stdoutBytes\":\"0\","
	    "\"stderrBytes\":\"0\",\"stdoutTruncated\":true,\"stderrTruncated\":false,"
	    "\"message\":\"\",\"stdoutCut\":\"\",\"stderrCut\":\"\",\"env\":[],\"cwd\":\"\","
	    "\"timeoutSeconds\":0,\"stdoutDropped\":\"0\",\"stderrDropped\":\"0\","
	    "\"networkDeniedAttempts\":0,\"networkDeniedNames\":[]}";
	if (!check(got && !strcmp(got, want), "ExecStatus with defaults"))
		printf("#   want: %s\n#    got: %s\n", want, got);
	free(got);

	/* As the policy file writes JSON: .proto names, lower-case enums,
	 * 64-bit numbers as numbers (and a uint64 past INT64_MAX as a string). */
	e.cpu_ms = UINT64_MAX;
	got = compact(&s.base, SBX_PBJSON_POLICY_STYLE);
	want = "{\"run_id\":\"run-1\",\"state\":\"active\",\"policy_digest\":\"sha256:ab\","
	       "\"execs\":[{\"exec_id\":\"e1\",\"argv\":[\"python3\",\"-c\",\"print(1)\"],"
	       "\"reason\":\"exited\",\"cpu_ms\":\"18446744073709551615\","
	       "\"peak_memory_bytes\":3645440,\"stdout_truncated\":true}],"
	       "\"created_unix_ms\":-5,\"labels\":{\"team\":\"recon\",\"ticket\":\"42\"}}";
	if (!check(got && !strcmp(got, want), "StatusResponse in the policy's style"))
		printf("#   want: %s\n#    got: %s\n", want, got);
	free(got);
	e.cpu_ms = 0;
}

static void test_bytes_and_enums(void)
{
	Sbx__V1__ExecRequest x = SBX__V1__EXEC_REQUEST__INIT;
	char *argv[] = {"cat"};
	uint8_t in[] = {'h', 'i', 0, 0xff};

	x.run_id = "r";
	x.argv = argv;
	x.n_argv = 1;
	x.stdin.data = in;
	x.stdin.len = sizeof(in);
	round_trip("bytes as base64", &x.base, 0,
		   "{\"runId\":\"r\",\"argv\":[\"cat\"],\"stdin\":\"aGkA/w==\"}");

	Sbx__V1__RunSummary r = SBX__V1__RUN_SUMMARY__INIT;
	r.run_id = "r";
	r.state = (Sbx__V1__RunState)42;
	r.execs = 4000000000u;
	round_trip("unknown enum number, big uint32", &r.base, 0,
		   "{\"runId\":\"r\",\"state\":42,\"execs\":4000000000}");

	Sbx__V1__Response resp = SBX__V1__RESPONSE__INIT;
	resp.code = SBX__V1__CODE__NOT_FOUND;
	resp.message = "run run-1234 not found";
	round_trip("Response", &resp.base, 0,
		   "{\"code\":\"NOT_FOUND\",\"message\":\"run run-1234 not found\"}");
}

static void test_defaults_and_utf8(void)
{
	Sbx__V1__HealthResponse h = SBX__V1__HEALTH_RESPONSE__INIT;
	char *got = compact(&h.base, SBX_PBJSON_EMIT_DEFAULTS);
	const char *want =
	    "{\"version\":\"\",\"runsActive\":0,\"runsMax\":0,\"runsMaxPerIdentity\":0,"
	    "\"userns\":false,\"seccomp\":false,\"cgroup\":\"\",\"images\":[],"
	    "\"identity\":\"\",\"imagesNotListed\":0,\"imagesError\":\"\","
	    "\"auditLinesLost\":\"0\",\"fileMax\":\"0\",\"runFiles\":\"0\","
	    "\"runPinnedFiles\":\"0\",\"runsFit\":\"0\",\"hostUids\":\"\",\"hostUidSlots\":\"0\","
	    "\"state\":\"SERVING_STATE_UNSPECIFIED\",\"operator\":false,\"operatorDrain\":false,"
	    "\"shutdownDrain\":false,\"capacityCpuMillis\":\"0\",\"capacityMemoryMb\":\"0\","
	    "\"capacitySource\":\"\",\"committedCpuMillis\":\"0\",\"committedMemoryMb\":\"0\","
	    "\"allowedCpuMillis\":\"0\",\"allowedMemoryMb\":\"0\",\"cpuOvercommitPercent\":0,"
	    "\"memoryOvercommitPercent\":0,\"memoryReserveMb\":\"0\",\"runSlotsFree\":0,"
	    "\"identityRunSlotsFree\":0,\"pool\":[]}";
	if (!check(got && !strcmp(got, want), "empty HealthResponse with defaults"))
		printf("#   want: %s\n#    got: %s\n", want, got);
	free(got);
	got = compact(&h.base, 0);
	check(got && !strcmp(got, "{}"), "empty HealthResponse without defaults is {}");
	free(got);

	h.identity = "caf\xc3\xa9 \xff\xfe ok";
	got = compact(&h.base, 0);
	check(got && !strcmp(got, "{\"identity\":\"caf\xc3\xa9 \xef\xbf\xbd\xef\xbf\xbd ok\"}"),
	      "invalid UTF-8 becomes U+FFFD, valid UTF-8 stays");
	free(got);
}

static void test_nested_policy(void)
{
	Sbx__V1__CreateRunResponse r = SBX__V1__CREATE_RUN_RESPONSE__INIT;
	Sbx__V1__Policy p = SBX__V1__POLICY__INIT;
	Sbx__V1__Limits l = SBX__V1__LIMITS__INIT;
	Sbx__V1__Egress e = SBX__V1__EGRESS__INIT;
	Sbx__V1__EgressRule rule = SBX__V1__EGRESS_RULE__INIT;
	Sbx__V1__EgressRule *rules[] = {&rule};
	Sbx__V1__Mount m1 = SBX__V1__MOUNT__INIT, m2 = SBX__V1__MOUNT__INIT;
	Sbx__V1__Mount *mounts[] = {&m1, &m2};

	m1.path = "/data";
	m1.mode = SBX__V1__MOUNT__MODE__RO;
	m2.path = "/out";
	m2.mode = SBX__V1__MOUNT__MODE__RW;
	rule.host = "api.internal";
	rule.port = 443;
	rule.bytes_per_second = 18446744073709551615ull;
	e.policy = SBX__V1__EGRESS__POLICY__ALLOWLIST;
	e.allow = rules;
	e.n_allow = 1;
	l.cpu_millis = 1500;
	l.memory_mb = 4096;
	p.image = "host";
	p.mounts = mounts;
	p.n_mounts = 2;
	p.egress = &e;
	p.limits = &l;
	p.lifetime = SBX__V1__POLICY__LIFETIME__PER_RUN;
	r.run_id = "run-9";
	r.effective_policy = &p;
	r.deadline_unix_ms = 1700000000000;
	round_trip(
	    "nested messages, nested enums, max uint64", &r.base, 0,
	    "{\"runId\":\"run-9\",\"effectivePolicy\":{\"image\":\"host\",\"mounts\":[{\"path\":"
	    "\"/data\",\"mode\":\"RO\"},{\"path\":\"/out\",\"mode\":\"RW\"}],\"egress\":{"
	    "\"policy\":\"ALLOWLIST\",\"allow\":[{\"host\":\"api.internal\",\"port\":443,"
	    "\"bytesPerSecond\":\"18446744073709551615\"}]},\"limits\":{\"cpuMillis\":1500,"
	    "\"memoryMb\":\"4096\"},\"lifetime\":\"PER_RUN\"},\"deadlineUnixMs\":"
	    "\"1700000000000\"}");
}

static void test_reading(void)
{
	const ProtobufCMessageDescriptor *st = &sbx__v1__status_response__descriptor;
	struct sbx_err err = {0};

	/* Both spellings of a name, numbers for 64-bit fields, enum numbers. */
	json_t *j = json_loads("{\"run_id\":\"a\",\"state\":2,\"createdUnixMs\":12,"
			       "\"execs\":[{\"cpu_ms\":\"7\",\"reason\":\"OOM\"}],\"labels\":null}",
			       0, NULL);
	Sbx__V1__StatusResponse *s = (Sbx__V1__StatusResponse *)sbx_pbjson_to_message(st, j, &err);
	check(s && !strcmp(s->run_id, "a") && s->state == SBX__V1__RUN_STATE__ACTIVE &&
		  s->created_unix_ms == 12 && s->n_execs == 1 && s->execs[0]->cpu_ms == 7 &&
		  s->execs[0]->reason == SBX__V1__EXIT_REASON__OOM,
	      "reads .proto names, numbers for int64, enum by number and by name, null as default");
	if (s)
		sbx__v1__status_response__free_unpacked(s, NULL);
	json_decref(j);

	bad("an unknown field, by its path", st, "{\"execs\":[{\"execId\":\"a\"},{\"bogus\":1}]}",
	    "execs[1].bogus: unknown field of sbx.v1.ExecStatus");
	bad("a number for a string", st, "{\"runId\":5}", "runId: must be a string");
	bad("a negative uint32", &sbx__v1__health_response__descriptor, "{\"runsMax\":-1}",
	    "runsMax: out of range");
	bad("a uint32 beyond 2^32", &sbx__v1__health_response__descriptor,
	    "{\"runsMax\":4294967296}", "runsMax: out of range");
	bad("a bad enum name", st, "{\"state\":\"RUNNING\"}",
	    "state: no sbx.v1.RunState named RUNNING");
	bad("bad base64", &sbx__v1__exec_request__descriptor, "{\"stdin\":\"a$==\"}",
	    "stdin: not valid base64");
	bad("a fraction for an integer", st, "{\"createdUnixMs\":1.5}",
	    "createdUnixMs: must be an integer");
	bad("a non-object map", st, "{\"labels\":[1]}", "labels: must be an object");
	bad("a number as a map value", st, "{\"labels\":{\"a\":1}}", "labels.a: must be a string");
	bad("the same field twice", st, "{\"runId\":\"a\",\"run_id\":\"b\"}", "given twice");
	bad("an array where an object belongs", st, "[]", "(top): must be an object");
	bad("a string for a repeated field", st, "{\"alerts\":\"x\"}", "alerts: must be an array");
	bad("a 64-bit integer out of range", st, "{\"createdUnixMs\":\"9223372036854775808\"}",
	    "createdUnixMs: must be an integer in range");
}

static void test_names(void)
{
	static const char *const cases[][2] = {
	    {"run_id", "runId"},  {"peak_memory_bytes", "peakMemoryBytes"},
	    {"sha256", "sha256"}, {"deadline_unix_ms", "deadlineUnixMs"},
	    {"a_1b", "a1b"},
	};
	char out[64];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		sbx_pbjson_name(cases[i][0], out, sizeof(out));
		check(!strcmp(out, cases[i][1]), "JSON name of %s is %s", cases[i][0], cases[i][1]);
	}
}

int main(void)
{
	test_status();
	test_bytes_and_enums();
	test_defaults_and_utf8();
	test_nested_policy();
	test_reading();
	test_names();
	return check_done();
}
