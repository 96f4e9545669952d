/* SPDX-License-Identifier: Apache-2.0 */
/* Unit test of sbxd's configuration: the defaults, a full valid file, and
 * the exact error every bad file gets. Documents are written with ' for "
 * so the table stays readable; the test swaps them back. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "config.h"

#define H64  "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define H64B "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
#define TLS                                                                                        \
	"'tls': {'cert': '/etc/sbx/c.pem', 'key': '/etc/sbx/k.pem', 'client_ca': "                 \
	"'/etc/sbx/ca.pem'}"
#define TOK "'tokens': [{'name': 'alice', 'sha256': '" H64 "'}]"

static char dir[] = "/tmp/sbx-test-config-XXXXXX";
static char path[sizeof(dir) + 32];

/* Writes the document (raw bytes, len of them) to the test's file. */
static const char *write_doc(const char *doc, size_t len)
{
	FILE *f = fopen(path, "w");

	if (!f || fwrite(doc, 1, len, f) != len || fclose(f) != 0) {
		perror(path);
		exit(1);
	}
	return path;
}

static const char *write_q(const char *doc)
{
	char *d = strdup(doc);
	const char *p;

	if (!d)
		abort();
	for (char *c = d; *c; c++)
		if (*c == '\'')
			*c = '"';
	p = write_doc(d, strlen(d));
	free(d);
	return p;
}

static int load(const char *doc, struct sbx_config *cfg, struct sbx_err *err)
{
	return sbx_config_load(write_q(doc), cfg, err);
}

/* A bad document must fail, and its message must be "<file>: want". */
static void bad_at(const char *desc, const char *file, const char *want)
{
	struct sbx_config cfg;
	struct sbx_err err = {0};
	char full[SBX_ERR_MAX];
	int rc = sbx_config_load(file, &cfg, &err);

	snprintf(full, sizeof(full), "%s: %s", file, want);
	if (!check(rc < 0 && strncmp(err.msg, full, strlen(full)) == 0, "rejects %s", desc))
		printf("#   want: %s\n#    got: %s\n", full, rc < 0 ? err.msg : "(loaded)");
	/* A failed load leaves nothing behind, and freeing again is harmless. */
	sbx_config_free(&cfg);
}

static void bad(const char *desc, const char *doc, const char *want)
{
	bad_at(desc, write_q(doc), want);
}

static void test_defaults(void)
{
	struct sbx_config cfg;
	struct sbx_err err = {0};
	int rc;

	rc = sbx_config_load(NULL, &cfg, &err);
	if (!check(rc == 0, "no file: the defaults load"))
		printf("#   %s\n", err.msg);
	check(cfg.n_listen == 1 && strcmp(cfg.listen[0], "ipc:///run/sbx/sbxd.sock") == 0,
	      "default listener is ipc:///run/sbx/sbxd.sock");
	check(strcmp(cfg.state_dir, "/var/lib/sbx") == 0, "default state_dir /var/lib/sbx");
	check(cfg.runs_max == 64 && cfg.runs_max_per_identity == 16,
	      "default caps 64 per host, 16 per identity");
	check(cfg.workers == 16, "default 16 workers");
	check(cfg.ipc_mode == 0660, "default ipc_mode 0660");
	check(cfg.max_message_bytes == 4u * 1024 * 1024 + 64 * 1024,
	      "default max_message_bytes 4 MiB + 64 KiB");
	check(!cfg.helper && !cfg.cgroup_root && !cfg.log_path && !cfg.tls_cert &&
		  cfg.n_tokens == 0 && cfg.n_input_dirs == 0 && !cfg.insecure &&
		  !cfg.rlimit_fallback,
	      "everything else unset by default");
	sbx_config_free(&cfg);

	rc = load("{}", &cfg, &err);
	check(rc == 0 && cfg.n_listen == 1 && cfg.runs_max == 64 && cfg.workers == 16,
	      "empty object: the same defaults");
	sbx_config_free(&cfg);

	rc = load("{'runs_max': 8}", &cfg, &err);
	check(rc == 0 && cfg.runs_max_per_identity == 8,
	      "unwritten runs_max_per_identity follows a smaller runs_max");
	sbx_config_free(&cfg);
}

static void test_leases(void)
{
	struct sbx_config cfg;
	struct sbx_err err = {0};
	int rc;

	rc = load("{}", &cfg, &err);
	check(rc == 0 && cfg.idle_seconds_default == 600 && cfg.expired_keep_seconds == 600 &&
		  cfg.limits_max.idle_seconds == 604800,
	      "default lease 600 s, stopped runs kept 600 s, ceiling 7 days");
	sbx_config_free(&cfg);
	rc = load("{'idle_seconds_default': 30, 'expired_keep_seconds': 0}", &cfg, &err);
	check(rc == 0 && cfg.idle_seconds_default == 30 && cfg.expired_keep_seconds == 0,
	      "both set; expired_keep_seconds 0 sweeps a stopped run at once");
	sbx_config_free(&cfg);
	rc = load("{'limits_max': {'idle_seconds': 60}}", &cfg, &err);
	check(rc == 0 && cfg.idle_seconds_default == 60,
	      "unwritten idle_seconds_default follows a lower ceiling");
	sbx_config_free(&cfg);
	bad("idle default above its ceiling",
	    "{'idle_seconds_default': 61, 'limits_max': {'idle_seconds': 60}}",
	    "idle_seconds_default: must not exceed limits_max.idle_seconds (60)");
	bad("idle default 0", "{'idle_seconds_default': 0}",
	    "idle_seconds_default: must be 1..604800");
	bad("keep negative", "{'expired_keep_seconds': -1}",
	    "expired_keep_seconds: must be 0..604800");
	rc = load("{}", &cfg, &err);
	check(rc == 0 && cfg.drain_seconds == 300, "drain_seconds defaults to 300");
	sbx_config_free(&cfg);
	rc = load("{'drain_seconds': 0}", &cfg, &err);
	check(rc == 0 && cfg.drain_seconds == 0, "drain_seconds 0: tear down at once");
	sbx_config_free(&cfg);
	bad("drain too long", "{'drain_seconds': 86401}", "drain_seconds: must be 0..86400");
}

static void test_connections(void)
{
	struct sbx_config cfg;
	struct sbx_err err = {0};
	int rc;

	rc = sbx_config_load(NULL, &cfg, &err);
	check(rc == 0 && cfg.connections.per_listener == 1024 && cfg.connections.per_peer == 64 &&
		  cfg.connections.new_per_peer_per_second == 50 &&
		  cfg.connections.idle_seconds == 300 && cfg.connections.message_seconds == 30 &&
		  cfg.connections.first_request_seconds == 10 &&
		  cfg.connections.pending_bytes_per_peer_mb == 16 &&
		  cfg.connections.pending_bytes_mb == 256,
	      "default connections: 1024 per listener, 64 per peer, 50 new/s, idle 300 s, "
	      "message 30 s, pending 16 MiB per peer and 256 MiB in all");
	sbx_config_free(&cfg);
	rc = load("{'connections': {'per_listener': 10, 'per_peer': 3, "
		  "'new_per_peer_per_second': 7, 'idle_seconds': 60, 'message_seconds': 5, "
		  "'first_request_seconds': 4, 'pending_bytes_per_peer_mb': 2, "
		  "'pending_bytes_mb': 9}}",
		  &cfg, &err);
	check(rc == 0 && cfg.connections.per_listener == 10 && cfg.connections.per_peer == 3 &&
		  cfg.connections.new_per_peer_per_second == 7 &&
		  cfg.connections.idle_seconds == 60 && cfg.connections.message_seconds == 5 &&
		  cfg.connections.first_request_seconds == 4 &&
		  cfg.connections.pending_bytes_per_peer_mb == 2 &&
		  cfg.connections.pending_bytes_mb == 9,
	      "every connections key is read");
	sbx_config_free(&cfg);
	rc = load("{'connections': {'per_listener': 10}}", &cfg, &err);
	check(rc == 0 && cfg.connections.per_peer == 10 && cfg.connections.idle_seconds == 300 &&
		  cfg.connections.per_listener_given,
	      "unwritten per_peer follows a smaller per_listener, the rest keep defaults");
	sbx_config_free(&cfg);

	bad("connections not an object", "{'connections': 5}", "connections: must be an object");
	bad("an unknown connections key", "{'connections': {'per_ip': 5}}",
	    "connections.per_ip: unknown key");
	bad("per_listener 0", "{'connections': {'per_listener': 0}}",
	    "connections.per_listener: must be 1..1048576");
	bad("per_peer as a string", "{'connections': {'per_peer': '5'}}",
	    "connections.per_peer: must be an integer");
	bad("new_per_peer_per_second too large",
	    "{'connections': {'new_per_peer_per_second': 1000001}}",
	    "connections.new_per_peer_per_second: must be 1..1000000");
	bad("idle_seconds 0", "{'connections': {'idle_seconds': 0}}",
	    "connections.idle_seconds: must be 1..86400");
	bad("message_seconds over an hour", "{'connections': {'message_seconds': 3601}}",
	    "connections.message_seconds: must be 1..3600");
	bad("per_peer above per_listener", "{'connections': {'per_listener': 4, 'per_peer': 5}}",
	    "connections.per_peer: must not exceed connections.per_listener (4)");
}

static void test_full(void)
{
	struct sbx_config cfg;
	struct sbx_err err = {0};
	int rc;

	rc =
	    load("{'listen': ['ipc:///run/sbx/a.sock', 'tls+tcp://0.0.0.0:7443', "
		 "'tcp://127.0.0.1:7000', 'tls+tcp://[::1]:7444'],"
		 " 'state_dir': '/srv/sbx', 'helper': '/usr/lib/sbx/sbx-helper',"
		 " 'cgroup_root': '/sbx', 'rlimit_fallback': true, 'log': '/var/log/sbx/audit.log',"
		 " " TLS ","
		 " 'tokens': [{'name': 'alice', 'sha256': '" H64 "'},"
		 "            {'name': 'ci.bot-2', 'sha256': '" H64B "'}],"
		 " 'input_dirs': ['/srv/inputs', '/home/shared'], 'insecure': true,"
		 " 'runs_max': 100, 'runs_max_per_identity': 10, 'workers': 8,"
		 " 'ipc_mode': 432, 'max_message_bytes': 8388608}",
		 &cfg, &err);
	if (!check(rc == 0, "full config loads"))
		printf("#   %s\n", err.msg);
	if (rc < 0)
		return;
	check(cfg.n_listen == 4 && strcmp(cfg.listen[1], "tls+tcp://0.0.0.0:7443") == 0 &&
		  strcmp(cfg.listen[3], "tls+tcp://[::1]:7444") == 0,
	      "listen: all four, in order");
	check(strcmp(cfg.state_dir, "/srv/sbx") == 0 &&
		  strcmp(cfg.helper, "/usr/lib/sbx/sbx-helper") == 0 &&
		  strcmp(cfg.cgroup_root, "/sbx") == 0 &&
		  strcmp(cfg.log_path, "/var/log/sbx/audit.log") == 0,
	      "paths");
	check(strcmp(cfg.tls_cert, "/etc/sbx/c.pem") == 0 &&
		  strcmp(cfg.tls_key, "/etc/sbx/k.pem") == 0 &&
		  strcmp(cfg.tls_client_ca, "/etc/sbx/ca.pem") == 0,
	      "tls files");
	check(cfg.n_tokens == 2 && strcmp(cfg.tokens[0].name, "alice") == 0 &&
		  strcmp(cfg.tokens[1].name, "ci.bot-2") == 0 && cfg.tokens[0].sha256[0] == 0x01 &&
		  cfg.tokens[0].sha256[1] == 0x23 && cfg.tokens[0].sha256[31] == 0xef &&
		  cfg.tokens[1].sha256[0] == 0xfe,
	      "tokens: names and hash bytes");
	check(cfg.n_input_dirs == 2 && strcmp(cfg.input_dirs[1], "/home/shared") == 0,
	      "input_dirs");
	check(cfg.insecure && cfg.rlimit_fallback, "booleans");
	check(cfg.runs_max == 100 && cfg.runs_max_per_identity == 10 && cfg.workers == 8 &&
		  cfg.ipc_mode == 0660 && cfg.max_message_bytes == 8388608,
	      "numbers");
	sbx_config_free(&cfg);
}

static void test_bad(void)
{
	static char big[(1 << 20) + 16];

	bad_at("a missing file", "/nonexistent/sbxd.json", "No such file or directory");
	bad("text that is not JSON", "{'listen': [}", "line 1 column 13: ");
	bad("a duplicate key", "{'workers': 1, 'workers': 2}", "line 1 column");
	bad("a top-level array", "[]", "config: must be a JSON object");
	bad("an unknown key", "{'listen': [], 'bogus': 1}", "bogus: unknown key");
	bad("a misspelt key", "{'worker': 4}", "worker: unknown key");

	bad("listen that is not an array", "{'listen': 'ipc:///x'}", "listen: must be an array");
	bad("an empty listen", "{'listen': []}", "listen: must not be empty");
	bad("a listener that is not a string", "{'listen': [7]}", "listen[0]: must be a string");
	bad("an unknown scheme", "{'listen': ['ipc:///a', 'ws://h:1']}",
	    "listen[1]: must start with ipc://, tls+tcp:// or tcp://");
	bad("a duplicate listener", "{'listen': ['ipc:///a', 'ipc:///a']}",
	    "listen[1]: duplicate of listen[0]");
	bad("nine listeners",
	    "{'listen': ['ipc:///1','ipc:///2','ipc:///3','ipc:///4','ipc:///5','ipc:///6',"
	    "'ipc:///7','ipc:///8','ipc:///9']}",
	    "listen: at most 8 entries");
	bad("ipc:// without a path", "{'listen': ['ipc://']}",
	    "listen[0]: ipc:// needs a socket path");
	bad("an ipc path too long for sun_path",
	    "{'listen': ['ipc:///"
	    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa']}",
	    "listen[0]: socket path longer than 107 bytes");
	bad("tls+tcp without certificates", "{'listen': ['tls+tcp://h:1'], " TOK "}",
	    "listen[0]: tls+tcp:// needs tls.cert, tls.key and tls.client_ca");
	bad("tls+tcp without client_ca",
	    "{'listen': ['tls+tcp://h:1'], 'tls': {'cert': '/c', 'key': '/k'}, " TOK "}",
	    "listen[0]: tls+tcp:// needs tls.cert, tls.key and tls.client_ca");
	bad("tls+tcp without tokens", "{'listen': ['tls+tcp://h:1'], " TLS "}",
	    "listen[0]: tls+tcp:// needs at least one entry in tokens");
	bad("tls+tcp without a port", "{'listen': ['tls+tcp://h'], " TLS ", " TOK "}",
	    "listen[0]: tls+tcp:// needs HOST:PORT");
	bad("a port past 65535", "{'listen': ['tls+tcp://h:65536'], " TLS ", " TOK "}",
	    "listen[0]: tls+tcp:// needs HOST:PORT");
	bad("tcp:// without insecure", "{'listen': ['ipc:///a', 'tcp://127.0.0.1:7000'], " TOK "}",
	    "listen[1]: tcp:// needs insecure: true");
	bad("tcp:// with insecure false",
	    "{'listen': ['tcp://127.0.0.1:7000'], 'insecure': false, " TOK "}",
	    "listen[0]: tcp:// needs insecure: true");
	bad("tcp:// without tokens", "{'listen': ['tcp://127.0.0.1:7000'], 'insecure': true}",
	    "listen[0]: tcp:// needs at least one entry in tokens");
	bad("an unbracketed IPv6 address",
	    "{'listen': ['tcp://::1:7000'], 'insecure': true, " TOK "}",
	    "listen[0]: tcp:// needs HOST:PORT");

	bad("tls that is not an object", "{'tls': ['/c']}", "tls: must be an object");
	bad("an unknown tls key", "{'tls': {'cert': '/c', 'ca': '/ca'}}", "tls.ca: unknown key");
	bad("tls.cert that is not a string", "{'tls': {'cert': 5}}", "tls.cert: must be a string");
	bad("an empty tls.key", "{'tls': {'key': ''}}", "tls.key: must not be empty");

	bad("tokens that is not an array", "{'tokens': {}}", "tokens: must be an array");
	bad("a token that is not an object", "{'tokens': ['abc']}", "tokens[0]: must be an object");
	bad("a raw token in the config", "{'tokens': [{'name': 'a', 'token': 'hunter2'}]}",
	    "tokens[0].token: unknown key");
	bad("a token without a name", "{'tokens': [{'sha256': '" H64 "'}]}",
	    "tokens[0].name: missing");
	bad("a token without a hash", "{'tokens': [{'name': 'a'}]}", "tokens[0].sha256: missing");
	bad("a token name with a colon", "{'tokens': [{'name': 'a:b', 'sha256': '" H64 "'}]}",
	    "tokens[0].name: must be 1..63 characters of A-Z a-z 0-9 . _ -");
	bad("a token name of 64 characters",
	    "{'tokens': [{'name': '" H64 "', 'sha256': '" H64 "'}]}",
	    "tokens[0].name: must be 1..63 characters");
	bad("a short hash",
	    "{'tokens': [{'name': 'a', 'sha256': '" H64 "'}, {'name': 'b', 'sha256': '" H64B "'},"
	    " {'name': 'c', 'sha256': 'abc'}]}",
	    "tokens[2].sha256: must be 64 lowercase hex");
	bad("an uppercase hash",
	    "{'tokens': [{'name': 'a', 'sha256': '0123456789ABCDEF0123456789abcdef0123456789abcdef"
	    "0123456789abcdef'}]}",
	    "tokens[0].sha256: must be 64 lowercase hex");
	bad("a hash that is a number", "{'tokens': [{'name': 'a', 'sha256': 12}]}",
	    "tokens[0].sha256: must be 64 lowercase hex");
	bad("a duplicate token name",
	    "{'tokens': [{'name': 'a', 'sha256': '" H64 "'}, {'name': 'a', 'sha256': '" H64B "'}]}",
	    "tokens[1].name: duplicate of tokens[0].name");
	bad("one token under two names",
	    "{'tokens': [{'name': 'a', 'sha256': '" H64 "'}, {'name': 'b', 'sha256': '" H64 "'}]}",
	    "tokens[1].sha256: same token as tokens[0]");

	bad("a relative state_dir", "{'state_dir': 'var/lib/sbx'}",
	    "state_dir: must be an absolute path");
	bad("a state_dir with ..", "{'state_dir': '/var/lib/../sbx'}",
	    "state_dir: must be an absolute path");
	bad("a helper that is not a string", "{'helper': true}", "helper: must be a string");
	bad("an empty helper", "{'helper': ''}", "helper: must not be empty");
	bad("a NUL in a path", "{'state_dir': '/var\\u0000/x'}", "state_dir: must not contain NUL");
	bad("cgroup_root with ..", "{'cgroup_root': '/sbx/../..'}",
	    "cgroup_root: must not contain \"..\"");
	bad("input_dirs that is not an array", "{'input_dirs': '/srv'}",
	    "input_dirs: must be an array");
	bad("an input dir with a trailing slash", "{'input_dirs': ['/srv', '/home/']}",
	    "input_dirs[1]: must be an absolute path");

	bad("insecure as a string", "{'insecure': 'yes'}", "insecure: must be true or false");
	bad("rlimit_fallback as a number", "{'rlimit_fallback': 1}",
	    "rlimit_fallback: must be true or false");
	bad("runs_max 0", "{'runs_max': 0}", "runs_max: must be 1..4096");
	bad("runs_max 5000", "{'runs_max': 5000}", "runs_max: must be 1..4096");
	bad("runs_max as a string", "{'runs_max': '64'}", "runs_max: must be an integer");
	bad("runs_max as a real", "{'runs_max': 64.0}", "runs_max: must be an integer");
	bad("runs_max_per_identity 0", "{'runs_max_per_identity': 0}",
	    "runs_max_per_identity: must be 1..4096");
	bad("a per-identity cap above the host cap",
	    "{'runs_max': 10, 'runs_max_per_identity': 20}",
	    "runs_max_per_identity: must not exceed runs_max (10)");
	bad("workers 0", "{'workers': 0}", "workers: must be 1..256");
	bad("workers 1000", "{'workers': 1000}", "workers: must be 1..256");
	bad("ipc_mode 01000", "{'ipc_mode': 512}", "ipc_mode: must be an integer 0..511");
	bad("ipc_mode as an octal string", "{'ipc_mode': '0660'}",
	    "ipc_mode: must be an integer 0..511");
	bad("ipc_mode negative", "{'ipc_mode': -1}", "ipc_mode: must be an integer 0..511");
	bad("max_message_bytes below 64 KiB", "{'max_message_bytes': 1000}",
	    "max_message_bytes: must be 65536..67108864");
	bad("max_message_bytes above 64 MiB", "{'max_message_bytes': 1099511627776}",
	    "max_message_bytes: must be 65536..67108864");

	/* Larger than 1 MiB: refused before parsing. */
	memset(big, ' ', sizeof(big));
	big[0] = '{';
	big[sizeof(big) - 1] = '}';
	bad_at("a file over 1 MiB", write_doc(big, sizeof(big)), "larger than 1048576 bytes");
}

static long pid_max(void)
{
	FILE *f = fopen("/proc/sys/kernel/pid_max", "r");
	long n = 0;

	if (f) {
		if (fscanf(f, "%ld", &n) != 1)
			n = 0;
		fclose(f);
	}
	return n > 0 ? n : 65536;
}

/* limits_max, quotas and log_group: defaults, a full set, and the errors. */
static void test_limits(void)
{
	struct sbx_config cfg;
	struct sbx_err err = {0};
	long pm = pid_max();
	char doc[128];
	int rc;

	rc = sbx_config_load(NULL, &cfg, &err);
	check(rc == 0 && cfg.limits_max.pids == (uint32_t)(pm < 4096 ? pm : 4096),
	      "default limits_max.pids: min(4096, pid_max)");
	check(cfg.limits_max.memory_mb == 1048576 && cfg.limits_max.cpu_millis == 1024000 &&
		  cfg.limits_max.run_seconds == 604800 && cfg.limits_max.script_seconds == 86400 &&
		  cfg.limits_max.out_mb == 1048576 && cfg.limits_max.tmp_mb == 1048576 &&
		  cfg.limits_max.output_kb == 1048576 && cfg.limits_max.inputs == 10000 &&
		  cfg.limits_max.input_bytes == 64ull << 30,
	      "other ceilings default to the policy format's maxima, inputs to 10000 and 64 GiB");
	check(cfg.quotas.identity_mb == 8192 && cfg.quotas.host_mb == 0 &&
		  cfg.quotas.reserve_mb == 256 && !cfg.log_group,
	      "default quotas: 8 GiB per identity, no host quota, 256 MiB reserve; no log_group");
	sbx_config_free(&cfg);

	rc =
	    load("{'limits_max': {'cpu': 2.5, 'memory_mb': 4096, 'script_seconds': 60,"
		 " 'run_seconds': 600, 'pids': 512, 'out_mb': 100, 'tmp_mb': 50, 'output_kb': 2048,"
		 " 'input_bytes': 1000000, 'inputs': 10},"
		 " 'quotas': {'identity_mb': 10, 'host_mb': 100, 'reserve_mb': 0},"
		 " 'log_group': 'adm'}",
		 &cfg, &err);
	if (!check(rc == 0, "limits_max, quotas and log_group load"))
		printf("#   %s\n", err.msg);
	check(rc == 0 && cfg.limits_max.cpu_millis == 2500 && cfg.limits_max.memory_mb == 4096 &&
		  cfg.limits_max.script_seconds == 60 && cfg.limits_max.run_seconds == 600 &&
		  cfg.limits_max.pids == 512 && cfg.limits_max.out_mb == 100 &&
		  cfg.limits_max.tmp_mb == 50 && cfg.limits_max.output_kb == 2048 &&
		  cfg.limits_max.input_bytes == 1000000 && cfg.limits_max.inputs == 10,
	      "limits_max: every key");
	check(rc == 0 && cfg.quotas.identity_mb == 10 && cfg.quotas.host_mb == 100 &&
		  cfg.quotas.reserve_mb == 0 && cfg.log_group && !strcmp(cfg.log_group, "adm"),
	      "quotas and log_group");
	sbx_config_free(&cfg);

	bad("an unknown ceiling", "{'limits_max': {'disk': 1}}", "limits_max.disk: unknown key");
	bad("a ceiling that is not a number", "{'limits_max': {'pids': '8'}}",
	    "limits_max.pids: must be an integer");
	bad("a cpu ceiling out of range", "{'limits_max': {'cpu': 0}}",
	    "limits_max.cpu: must be a number 0.01..1024");
	bad("limits_max not an object", "{'limits_max': 3}", "limits_max: must be an object");
	bad("an unknown quota", "{'quotas': {'inputs_mb': 1}}", "quotas.inputs_mb: unknown key");
	bad("a negative quota", "{'quotas': {'reserve_mb': -1}}", "quotas.reserve_mb: must be");
	bad("an empty log_group", "{'log_group': ''}", "log_group: must not be empty");
	if (pm < 65536) {
		char want[128];

		snprintf(doc, sizeof(doc), "{'limits_max': {'pids': %ld}}", pm + 1);
		snprintf(want, sizeof(want),
			 "limits_max.pids: %ld is above this host's pid_max %ld", pm + 1, pm);
		bad("a pids ceiling above pid_max", doc, want);
	}
}

/* Flags on top of a loaded file: f applied to the document doc. */
static int with_flags(const char *doc, const struct sbx_config_flags *f, struct sbx_config *cfg,
		      struct sbx_err *err)
{
	if (load(doc, cfg, err) < 0)
		return -1;
	return sbx_config_apply_flags(cfg, f, err);
}

/* Flags are held to the file's rules, and the error names the flag. */
static void bad_flags(const char *desc, const struct sbx_config_flags *f, const char *want)
{
	struct sbx_config cfg;
	struct sbx_err err = {0};
	int rc = with_flags("{'tokens': [{'name': 'alice', 'sha256': '" H64 "'}]}", f, &cfg, &err);

	if (!check(rc < 0 && strncmp(err.msg, want, strlen(want)) == 0, "flags: rejects %s", desc))
		printf("#   want: %s\n#    got: %s\n", want, rc < 0 ? err.msg : "(applied)");
	sbx_config_free(&cfg);
}

static void test_flags(void)
{
	struct sbx_config cfg;
	struct sbx_err err = {0};
	int rc;

	rc = with_flags("{'state_dir': '/srv/sbx', 'cgroup_root': '/sbx', 'log': '/var/log/a'}",
			&(struct sbx_config_flags){.listen = {"ipc:///run/x.sock", "ipc:///run/y"},
						   .n_listen = 2,
						   .state_dir = "/var/tmp/sbx",
						   .cgroup_root = "sbx/ci",
						   .log = "audit.log"},
			&cfg, &err);
	if (!check(rc == 0, "flags: valid ones apply"))
		printf("#   %s\n", err.msg);
	check(rc == 0 && cfg.n_listen == 2 && strcmp(cfg.listen[0], "ipc:///run/x.sock") == 0 &&
		  strcmp(cfg.listen[1], "ipc:///run/y") == 0,
	      "flags: --listen replaces the file's list");
	check(rc == 0 && strcmp(cfg.state_dir, "/var/tmp/sbx") == 0 &&
		  strcmp(cfg.cgroup_root, "sbx/ci") == 0 && strcmp(cfg.log_path, "audit.log") == 0,
	      "flags: win over the file's paths");
	sbx_config_free(&cfg);

	rc = with_flags("{'state_dir': '/srv/sbx'}", &(struct sbx_config_flags){0}, &cfg, &err);
	check(rc == 0 && strcmp(cfg.state_dir, "/srv/sbx") == 0 && cfg.n_listen == 1,
	      "flags: none given leave the file's settings");
	sbx_config_free(&cfg);

	bad_flags("a relative --state-dir", &(struct sbx_config_flags){.state_dir = "var/sbx"},
		  "--state-dir var/sbx: must be an absolute path");
	bad_flags("a --state-dir with ..",
		  &(struct sbx_config_flags){.state_dir = "/var/lib/../sbx"},
		  "--state-dir /var/lib/../sbx: must be an absolute path without");
	bad_flags("a --state-dir with a trailing slash",
		  &(struct sbx_config_flags){.state_dir = "/var/lib/sbx/"},
		  "--state-dir /var/lib/sbx/: must be an absolute path without");
	bad_flags("an empty --state-dir", &(struct sbx_config_flags){.state_dir = ""},
		  "--state-dir : must not be empty");
	bad_flags("a --cgroup-root with ..",
		  &(struct sbx_config_flags){.cgroup_root = "/sbx/../.."},
		  "--cgroup-root /sbx/../..: must not contain \"..\"");
	bad_flags("an empty --cgroup-root", &(struct sbx_config_flags){.cgroup_root = ""},
		  "--cgroup-root : must not be empty");
	bad_flags("an empty --log", &(struct sbx_config_flags){.log = ""},
		  "--log : must not be empty");
	bad_flags("an unknown --listen scheme",
		  &(struct sbx_config_flags){.listen = {"ws://h:1"}, .n_listen = 1},
		  "--listen ws://h:1: must start with ipc://, tls+tcp:// or tcp://");
	bad_flags("a --listen given twice",
		  &(struct sbx_config_flags){.listen = {"ipc:///a", "ipc:///a"}, .n_listen = 2},
		  "--listen ipc:///a: given twice");
	bad_flags("--listen tcp:// without insecure",
		  &(struct sbx_config_flags){.listen = {"tcp://127.0.0.1:1"}, .n_listen = 1},
		  "--listen tcp://127.0.0.1:1: tcp:// needs insecure: true");
}

static void test_egress(void)
{
	const struct sbx_config_egress *eg;
	struct sbx_config cfg;
	struct sbx_err err = {0};
	int rc;

	rc = sbx_config_load(NULL, &cfg, &err);
	eg = &cfg.egress;
	check(rc == 0 && strcmp(eg->hosts_file, "/etc/hosts") == 0 &&
		  strcmp(eg->resolv_conf, "/etc/resolv.conf") == 0 && eg->head_seconds == 10 &&
		  eg->lookup_seconds == 5 && eg->connect_seconds == 10 && eg->idle_seconds == 300 &&
		  eg->connections_per_run == 256 && eg->connections_max == 4096 &&
		  eg->records_per_run == 256 && eg->accepts_per_run_per_second == 50 &&
		  eg->accepts_per_identity_per_second == 100 && eg->n_destinations == 0,
	      "default egress: /etc/hosts, /etc/resolv.conf, head 10 s, lookup 5 s, connect 10 s, "
	      "idle 300 s, 256 per run, 4096 in all, 256 records, 50 accepts/s a run, 100 an "
	      "identity");
	sbx_config_free(&cfg);

	rc = load("{'egress': {'hosts_file': '/srv/hosts', 'resolv_conf': '', 'head_seconds': 2, "
		  "'lookup_seconds': 3, 'connect_seconds': 4, 'idle_seconds': 5, "
		  "'connections_per_run': 6, 'connections_max': 7, 'records_per_run': 8, "
		  "'accepts_per_run_per_second': 9, 'accepts_per_identity_per_second': 10, "
		  "'destinations': {"
		  "'API.Internal.:443': {'bytes_per_second': 1048576, "
		  "'connections_per_minute': 60, 'max_concurrent': 4}, "
		  "'*.B\\u00fccher.example:8443': {'max_concurrent': 1}, "
		  "'10.0.0.1:5432': {}}}}",
		  &cfg, &err);
	eg = &cfg.egress;
	if (!check(rc == 0, "every egress key is read"))
		printf("#   %s\n", err.msg);
	if (rc == 0) {
		const struct sbx_egress_destination *d = eg->destinations;

		check(strcmp(eg->hosts_file, "/srv/hosts") == 0 && eg->resolv_conf[0] == '\0' &&
			  eg->head_seconds == 2 && eg->lookup_seconds == 3 &&
			  eg->connect_seconds == 4 && eg->idle_seconds == 5 &&
			  eg->connections_per_run == 6 && eg->connections_max == 7 &&
			  eg->records_per_run == 8 && eg->accepts_per_run_per_second == 9 &&
			  eg->accepts_per_identity_per_second == 10,
		      "egress numbers and files as written, \"\" for none");
		check(eg->n_destinations == 3 &&
			  strcmp(d[0].host, "*.xn--bcher-kva.example") == 0 && d[0].port == 8443 &&
			  d[0].max_concurrent == 1 && d[0].connections_per_minute == 0 &&
			  d[0].bytes_per_second == 0 && strcmp(d[1].host, "10.0.0.1") == 0 &&
			  d[1].port == 5432 && strcmp(d[2].host, "api.internal") == 0 &&
			  d[2].port == 443 && d[2].bytes_per_second == 1048576 &&
			  d[2].connections_per_minute == 60 && d[2].max_concurrent == 4,
		      "destinations normalized (IDNA, case, trailing dot), sorted, 0 = off");
	}
	sbx_config_free(&cfg);
	check(cfg.egress.n_destinations == 0 && !cfg.egress.hosts_file,
	      "sbx_config_free releases the egress section");

	rc = load("{'egress': {'connections_max': 100}}", &cfg, &err);
	check(rc == 0 && cfg.egress.connections_per_run == 100,
	      "unwritten connections_per_run follows a smaller connections_max");
	sbx_config_free(&cfg);

	/* 256 destinations fit; the 257th does not. */
	char *doc = malloc(64 + 257 * 40);
	size_t len;

	if (!doc)
		abort();
	for (int n = 256; n <= 257; n++) {
		len = (size_t)sprintf(doc, "{'egress': {'destinations': {");
		for (int i = 0; i < n; i++)
			len +=
			    (size_t)sprintf(doc + len, "%s'h%d.example:443': {}", i ? ", " : "", i);
		strcpy(doc + len, "}}}");
		if (n == 256) {
			rc = load(doc, &cfg, &err);
			check(rc == 0 && cfg.egress.n_destinations == 256, "256 destinations load");
			sbx_config_free(&cfg);
		} else {
			bad("257 destinations", doc, "egress.destinations: at most 256 entries");
		}
	}
	free(doc);

	bad("egress not an object", "{'egress': []}", "egress: must be an object");
	bad("an unknown egress key", "{'egress': {'nameservers': []}}",
	    "egress.nameservers: unknown key");
	bad("a relative hosts_file", "{'egress': {'hosts_file': 'hosts'}}",
	    "egress.hosts_file: must be an absolute path");
	bad("hosts_file not a string", "{'egress': {'hosts_file': null}}",
	    "egress.hosts_file: must be a string");
	bad("resolv_conf with ..", "{'egress': {'resolv_conf': '/etc/../resolv.conf'}}",
	    "egress.resolv_conf: ");
	bad("head_seconds 0", "{'egress': {'head_seconds': 0}}",
	    "egress.head_seconds: must be 1..3600");
	bad("lookup_seconds over 300", "{'egress': {'lookup_seconds': 301}}",
	    "egress.lookup_seconds: must be 1..300");
	bad("connect_seconds a string", "{'egress': {'connect_seconds': '10'}}",
	    "egress.connect_seconds: must be an integer");
	bad("idle_seconds over a day", "{'egress': {'idle_seconds': 86401}}",
	    "egress.idle_seconds: must be 1..86400");
	bad("connections_max 0", "{'egress': {'connections_max': 0}}",
	    "egress.connections_max: must be 1..1048576");
	bad("records_per_run over 4096", "{'egress': {'records_per_run': 4097}}",
	    "egress.records_per_run: must be 1..4096");
	bad("accepts_per_run_per_second 0", "{'egress': {'accepts_per_run_per_second': 0}}",
	    "egress.accepts_per_run_per_second: must be 1..1000000");
	bad("accepts_per_identity_per_second 0",
	    "{'egress': {'accepts_per_identity_per_second': 0}}",
	    "egress.accepts_per_identity_per_second: must be 1..1000000");
	bad("connections_per_run above connections_max",
	    "{'egress': {'connections_per_run': 11, 'connections_max': 10}}",
	    "egress.connections_per_run: must not exceed egress.connections_max (10)");
	bad("destinations an array", "{'egress': {'destinations': ['a.example:443']}}",
	    "egress.destinations: must be an object");
	bad("a destination not an object", "{'egress': {'destinations': {'a.example:443': 5}}}",
	    "egress.destinations[\"a.example:443\"]: must be an object");
	bad("an unknown destination key",
	    "{'egress': {'destinations': {'a.example:443': {'rate': 5}}}}",
	    "egress.destinations[\"a.example:443\"].rate: unknown key");
	bad("a destination without a port", "{'egress': {'destinations': {'a.example': {}}}}",
	    "egress.destinations[\"a.example\"]: must be \"host:port\"");
	bad("a destination port 0", "{'egress': {'destinations': {'a.example:0': {}}}}",
	    "egress.destinations[\"a.example:0\"]: port must be 1..65535");
	bad("a destination port 65536", "{'egress': {'destinations': {'a.example:65536': {}}}}",
	    "egress.destinations[\"a.example:65536\"]: port must be 1..65535");
	bad("a destination with a bad host", "{'egress': {'destinations': {'a_b.example:1': {}}}}",
	    "egress.destinations[\"a_b.example:1\"]: host: a label may hold only letters");
	bad("a destination with a short IPv4", "{'egress': {'destinations': {'127.1:80': {}}}}",
	    "egress.destinations[\"127.1:80\"]: host: a numeric name must be a dotted-quad");
	bad("a destination with an IPv6 literal", "{'egress': {'destinations': {'[::1]:80': {}}}}",
	    "egress.destinations[\"[::1]:80\"]: host: an IPv6 literal is not allowed here");
	bad("a destination host with a newline",
	    "{'egress': {'destinations': {'a\\nb.example:1': {}}}}",
	    "egress.destinations[\"a\\x0ab.example:1\"]: host: control byte 0x0a");
	/* jansson refuses it; were it let through, the key's length (not its
	 * C string) is what config_egress.c reads. */
	bad("a destination key with a NUL",
	    "{'egress': {'destinations': {'a.example:443\\u0000x': {}}}}",
	    "line 1 column 51: NUL byte in object key not supported");
	bad("a destination duplicate after normalization",
	    "{'egress': {'destinations': {'A.example:443': {}, 'a.example.:443': {}}}}",
	    "egress.destinations[\"a.example.:443\"]: duplicate destination a.example:443");
	bad("a destination rate over 600000",
	    "{'egress': {'destinations': {'a.example:1': {'connections_per_minute': 600001}}}}",
	    "egress.destinations[\"a.example:1\"].connections_per_minute: must be 0..600000");
	bad("a destination bandwidth over 2^40",
	    "{'egress': {'destinations': {'a.example:1': {'bytes_per_second': 1099511627777}}}}",
	    "egress.destinations[\"a.example:1\"].bytes_per_second: must be 0..1099511627776");
	bad("a destination max_concurrent negative",
	    "{'egress': {'destinations': {'a.example:1': {'max_concurrent': -1}}}}",
	    "egress.destinations[\"a.example:1\"].max_concurrent: must be 0..1048576");
}

static void test_images(void)
{
	struct sbx_config cfg;
	struct sbx_err err = {0};
	char *images;
	int rc;

	rc = load("{'state_dir': '/srv/sbx'}", &cfg, &err);
	images = rc == 0 ? sbx_config_images_dir(&cfg) : NULL;
	check(rc == 0 && !cfg.images.dir && !cfg.images.allow_unpinned &&
		  cfg.images.max_entries == 0 && cfg.images.max_bytes == 0 &&
		  cfg.images.max_file_bytes == 0 && images &&
		  strcmp(images, "/srv/sbx/images") == 0,
	      "default images: <state_dir>/images, pinned only, the store's own bounds (0)");
	free(images);
	sbx_config_free(&cfg);

	rc = load("{'images': {'dir': '/srv/images', 'allow_unpinned': true, 'max_entries': 10, "
		  "'max_bytes': 17592186044416, 'max_file_bytes': 4096}}",
		  &cfg, &err);
	if (!check(rc == 0, "every images key is read"))
		printf("#   %s\n", err.msg);
	images = rc == 0 ? sbx_config_images_dir(&cfg) : NULL;
	check(rc == 0 && images && strcmp(cfg.images.dir, "/srv/images") == 0 &&
		  strcmp(images, "/srv/images") == 0 && cfg.images.allow_unpinned &&
		  cfg.images.max_entries == 10 && cfg.images.max_bytes == (uint64_t)1 << 44 &&
		  cfg.images.max_file_bytes == 4096,
	      "images numbers and dir as written, 16 TiB the largest max_bytes");
	free(images);
	sbx_config_free(&cfg);
	check(!cfg.images.dir, "sbx_config_free releases the images section");

	rc = load("{'images': {'max_file_bytes': 17592186044416}}", &cfg, &err);
	check(rc == 0 && cfg.images.max_file_bytes == (uint64_t)1 << 44 && !cfg.images.max_bytes,
	      "max_file_bytes alone: the total bound stays the store's default");
	sbx_config_free(&cfg);

	bad("images not an object", "{'images': '/srv/images'}", "images: must be an object");
	bad("an unknown images key", "{'images': {'directory': '/srv'}}",
	    "images.directory: unknown key");
	bad("a relative images dir", "{'images': {'dir': 'images'}}",
	    "images.dir: must be an absolute path");
	bad("an images dir with ..", "{'images': {'dir': '/srv/../images'}}", "images.dir: ");
	bad("images dir /", "{'images': {'dir': '/'}}", "images.dir: must not be /");
	bad("an empty images dir", "{'images': {'dir': ''}}", "images.dir: ");
	bad("images dir not a string", "{'images': {'dir': 5}}", "images.dir: must be a string");
	bad("allow_unpinned not a bool", "{'images': {'allow_unpinned': 1}}",
	    "images.allow_unpinned: must be true or false");
	bad("max_entries 0", "{'images': {'max_entries': 0}}",
	    "images.max_entries: must be 1..100000000");
	bad("max_bytes over 16 TiB", "{'images': {'max_bytes': 17592186044417}}",
	    "images.max_bytes: must be 1..17592186044416");
	bad("max_file_bytes negative", "{'images': {'max_file_bytes': -1}}",
	    "images.max_file_bytes: must be 1..17592186044416");
	bad("max_file_bytes above max_bytes",
	    "{'images': {'max_bytes': 100, 'max_file_bytes': 101}}",
	    "images.max_file_bytes: must not exceed images.max_bytes (100)");
}

static void test_metrics(void)
{
	static const char *const loopback[] = {"127.0.0.1:9464", "127.1.2.3:0", "[::1]:65535"};
	struct sbx_config cfg;
	struct sbx_err err;
	char doc[256];
	int rc = load("{}", &cfg, &err);

	check(rc == 0 && !cfg.metrics.listen && !cfg.metrics.allow_remote,
	      "default metrics: no listener, loopback only");
	sbx_config_free(&cfg);
	for (size_t i = 0; i < sizeof(loopback) / sizeof(loopback[0]); i++) {
		snprintf(doc, sizeof(doc), "{'metrics': {'listen': '%s'}}", loopback[i]);
		rc = load(doc, &cfg, &err);
		check(rc == 0 && cfg.metrics.listen && !strcmp(cfg.metrics.listen, loopback[i]),
		      "metrics.listen %s: a loopback address needs nothing more", loopback[i]);
		sbx_config_free(&cfg);
	}
	rc = load("{'metrics': {'listen': '192.0.2.1:9464', 'allow_remote': true}}", &cfg, &err);
	check(rc == 0 && cfg.metrics.allow_remote && !strcmp(cfg.metrics.listen, "192.0.2.1:9464"),
	      "metrics.listen on another address with allow_remote");
	sbx_config_free(&cfg);
	check(!cfg.metrics.listen, "sbx_config_free releases the metrics section");

	bad("metrics on 0.0.0.0 without allow_remote", "{'metrics': {'listen': '0.0.0.0:9464'}}",
	    "metrics.listen: \"0.0.0.0:9464\" is not a loopback address");
	bad("metrics on [::] without allow_remote",
	    "{'metrics': {'listen': '[::]:9464', 'allow_remote': false}}",
	    "metrics.listen: \"[::]:9464\" is not a loopback address");
	bad("metrics by host name", "{'metrics': {'listen': 'localhost:9464'}}",
	    "metrics.listen: \"localhost:9464\" is not an IP address and port");
	bad("metrics without a port", "{'metrics': {'listen': '127.0.0.1'}}",
	    "metrics.listen: \"127.0.0.1\" is not an IP address and port");
	bad("metrics port out of range", "{'metrics': {'listen': '127.0.0.1:65536'}}",
	    "metrics.listen: \"127.0.0.1:65536\" is not an IP address and port");
	bad("metrics IPv6 without brackets", "{'metrics': {'listen': '::1:9464'}}",
	    "metrics.listen: \"::1:9464\" is not an IP address and port");
	bad("metrics as a URL", "{'metrics': {'listen': 'http://127.0.0.1:9464'}}",
	    "metrics.listen: \"http://127.0.0.1:9464\" is not an IP address and port");
	bad("metrics listen not a string", "{'metrics': {'listen': 9464}}",
	    "metrics.listen: must be a string");
	bad("allow_remote not a bool", "{'metrics': {'allow_remote': 'yes'}}",
	    "metrics.allow_remote: must be true or false");
	bad("an unknown metrics key", "{'metrics': {'path': '/metrics'}}",
	    "metrics.path: unknown key");
}

/* config operators: identity names, a token's name must exist. */
static void test_operators(void)
{
	struct sbx_config cfg;
	struct sbx_err err = {0};
	int rc;
	const char *tok = "'tokens': [{'name': 'ops', 'sha256': "
			  "'2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae'}]";
	char doc[512];

	rc = load("{}", &cfg, &err);
	check(rc == 0 && cfg.n_operators == 0, "no operators by default");
	sbx_config_free(&cfg);
	snprintf(doc, sizeof(doc), "{%s, 'operators': ['uid:0', 'token:ops', 'uid:1000']}", tok);
	rc = load(doc, &cfg, &err);
	check(rc == 0 && cfg.n_operators == 3 && !strcmp(cfg.operators[1], "token:ops"),
	      "uid:N and token:NAME operators load: %s", err.msg);
	sbx_config_free(&cfg);
	bad("a token that is not configured", "{'operators': ['token:ops']}",
	    "operators[0]: \"token:ops\": no token of that name in tokens");
	bad("a uid that is not a number", "{'operators': ['uid:root']}",
	    "operators[0]: \"uid:root\": a uid must be a decimal number");
	bad("a uid out of range", "{'operators': ['uid:4294967295']}",
	    "operators[0]: \"uid:4294967295\": a uid must be");
	bad("another kind of name", "{'operators': ['alice']}",
	    "operators[0]: \"alice\": must be \"uid:N\", \"token:NAME\" or \"tls:NAME\"");
	bad("a duplicate", "{'operators': ['uid:1', 'uid:1']}",
	    "operators[1]: duplicate of operators[0]");
	bad("not an array", "{'operators': 'uid:1'}", "operators: must be an array");
	bad("not a string", "{'operators': [1000]}", "operators[0]: must be a string");
}

/* config capacity: defaults and ranges naming the key. */
static void test_capacity(void)
{
	struct sbx_config cfg;
	struct sbx_err err = {0};
	int rc = load("{}", &cfg, &err);

	check(rc == 0 && cfg.capacity.cpu_millis == 0 && cfg.capacity.memory_mb == 0 &&
		  cfg.capacity.cpu_overcommit_percent == 400 &&
		  cfg.capacity.memory_overcommit_percent == 100 &&
		  cfg.capacity.memory_reserve_mb == SBX_MEMORY_RESERVE_AUTO,
	      "capacity defaults: measured, CPU 400 %%, memory 100 %% less 1024 MiB");
	sbx_config_free(&cfg);
	rc = load("{'capacity': {'cpu_millis': 8000, 'memory_mb': 16384, 'memory_reserve_mb': 0}}",
		  &cfg, &err);
	check(rc == 0 && cfg.capacity.cpu_millis == 8000 && cfg.capacity.memory_mb == 16384 &&
		  cfg.capacity.memory_reserve_mb == 0,
	      "capacity numbers load: %s", err.msg);
	sbx_config_free(&cfg);
	bad("memory overcommit too high", "{'capacity': {'memory_overcommit_percent': 1001}}",
	    "capacity.memory_overcommit_percent: must be 10..1000");
	bad("cpu overcommit too low", "{'capacity': {'cpu_overcommit_percent': 9}}",
	    "capacity.cpu_overcommit_percent: must be 10..10000");
	bad("an unknown capacity key", "{'capacity': {'cpus': 2}}", "capacity.cpus: unknown key");
}

static void test_pool(void)
{
	struct sbx_config cfg;
	struct sbx_err err = {0};
	int rc = load("{}", &cfg, &err);

	check(rc == 0 && cfg.n_pool == 0 && cfg.pool_max_age_seconds == 600 &&
		  cfg.pool_builds_per_second == 4,
	      "pool defaults: none, 600 s, 4 builds/s");
	sbx_config_free(&cfg);
	rc = load("{'pool': [{'name': 'py', 'policy': {'image': 'host'}, 'size': 3}, "
		  "{'name': 'none', 'policy': {'image': 'host', 'limits': {'memory_mb': 64}}}]}",
		  &cfg, &err);
	check(rc == 0 && cfg.n_pool == 2 && cfg.pool[0].size == 3 && cfg.pool[1].size == 0 &&
		  !strcmp(cfg.pool[0].name, "py") && strstr(cfg.pool[0].policy_json, "host") &&
		  !cfg.pool[0].policy_file,
	      "pool entries load, size defaults to 0: %s", err.msg);
	sbx_config_free(&cfg);
	bad("a pool that is not a list", "{'pool': {}}", "pool: must be an array");
	bad("a pool entry without a name", "{'pool': [{'policy': {'image': 'host'}}]}",
	    "pool[0].name: missing");
	bad("a duplicate pool name",
	    "{'pool': [{'name': 'a', 'policy': {'image': 'host'}}, {'name': 'a', 'policy': "
	    "{'image': 'host'}}]}",
	    "pool[1].name: duplicate of pool[0].name");
	bad("a pool entry with both policies",
	    "{'pool': [{'name': 'a', 'policy': {'image': 'host'}, 'policy_file': '/x'}]}",
	    "pool[0]: give exactly one of policy and policy_file");
	bad("a pool entry with neither", "{'pool': [{'name': 'a'}]}",
	    "pool[0]: give exactly one of policy and policy_file");
	bad("a pool size too large", "{'pool': [{'name': 'a', 'policy': {}, 'size': 257}]}",
	    "pool[0].size: must be an integer 0..256");
	bad("a pool policy the parser refuses",
	    "{'pool': [{'name': 'a', 'policy': {'image': 'host', 'limits': {'memory_mb': 1}}}]}",
	    "pool[0]: limits.memory_mb: must be 16..1048576");
	bad("pool sizes past runs_max",
	    "{'runs_max': 4, 'pool': [{'name': 'a', 'policy': {'image': 'host'}, 'size': 5}]}",
	    "pool: sizes add up to 5, more than runs_max (4)");
	bad("a missing policy_file", "{'pool': [{'name': 'a', 'policy_file': '/nonexistent/p'}]}",
	    "pool[0].policy_file: /nonexistent/p");
	bad("an unknown pool key", "{'pool': [{'name': 'a', 'policy': {}, 'sz': 1}]}",
	    "pool[0].sz: unknown key");
	bad("a pool max age too small", "{'pool_max_age_seconds': 9}",
	    "pool_max_age_seconds: must be 10..86400");
	bad("no builds per second", "{'pool_builds_per_second': 0}",
	    "pool_builds_per_second: must be 1..100");
}

/* A reload names the keys it cannot apply, and only those. */
static void test_restart_keys(void)
{
	struct sbx_config a, b;
	struct sbx_err err = {0};
	char out[256];
	size_t n;

	if (!check(load("{'runs_max': 8, 'runs_max_per_identity': 4, 'state_dir': '/var/x'}", &a,
			&err) == 0,
		   "restart keys: first config loads"))
		return;
	if (!check(load("{'runs_max': 8, 'runs_max_per_identity': 2, 'state_dir': '/var/x', "
			"'quotas': {'identity_mb': 5}, 'drain_seconds': 9, "
			"'limits_max': {'memory_mb': 64}}",
			&b, &err) == 0,
		   "restart keys: second config loads")) {
		sbx_config_free(&a);
		return;
	}
	n = sbx_config_restart_keys(&a, &b, out, sizeof(out));
	check(n == 0 && !strcmp(out, ""),
	      "runs_max_per_identity, quotas, limits_max, drain_seconds reload: none needs a "
	      "restart ('%s')",
	      out);
	sbx_config_free(&b);
	if (load("{'runs_max': 9, 'state_dir': '/var/y', 'workers': 3, "
		 "'connections': {'per_peer': 5}, 'listen': ['ipc:///tmp/other.sock']}",
		 &b, &err) == 0) {
		n = sbx_config_restart_keys(&a, &b, out, sizeof(out));
		check(n == 5 && !strcmp(out, "listen, state_dir, runs_max, workers, connections"),
		      "listen, state_dir, runs_max, workers, connections need a restart ('%s')",
		      out);
		n = sbx_config_restart_keys(&a, &b, out, 12);
		check(n == 5 && strlen(out) < 12, "cut at its size, still counted");
		sbx_config_free(&b);
	}
	sbx_config_free(&a);
}

int main(void)
{
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	snprintf(path, sizeof(path), "%s/sbxd.json", dir);
	test_defaults();
	test_connections();
	test_leases();
	test_full();
	test_bad();
	test_limits();
	test_flags();
	test_egress();
	test_images();
	test_metrics();
	test_operators();
	test_capacity();
	test_pool();
	test_restart_keys();
	unlink(path);
	rmdir(dir);
	return check_done();
}
