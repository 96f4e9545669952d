/* SPDX-License-Identifier: Apache-2.0 */
/* sbxd's configuration file: strict JSON, read the way policies are.
 *
 * An operator's typo must not silently become a default, so every key is
 * known, every value has one type and one range, and every error names the
 * JSON path ("tokens[2].sha256: must be 64 lowercase hex"). Keys that only
 * make sense together (a TLS listener and its certificates) are checked
 * after the whole document is read. */
#include "config.h"
#include "export_wire.h"
#include "strict_json.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "config_keys.h"
#include "config_rules.h"
#include "listen_url.h"
#include "path.h"
#include "policy.h"
#include "util.h"

#define CONFIG_BYTES_MAX (1 << 20)
#define PATH_LEN_MAX	 4095
#define WHERE_MAX	 64

/* Not a table row's default: the list stays empty until the whole file
 * is read, then this is the one listener when none was written. */
#define DEFAULT_LISTEN "ipc:///run/sbx/sbxd.sock"
#define CONN_MAX       (1 << 20)
#define RUNS_MAX_MAX   4096
#define WORKERS_MAX    256
/* A FetchArtifact or PutInput chunk (1 MiB) must fit; the upper end keeps
 * the byte-budgeted decoder (16x) within reason. */
#define MESSAGE_BYTES_MIN (64 * 1024)
#define MESSAGE_BYTES_MAX (64 * 1024 * 1024)

static int oom(struct sbx_err *err)
{
	return sbx_fail_errnum(err, ENOMEM, "config");
}

/* ---- typed access; each failure names the path ---- */

/* Every string setting is a name or a path: empty is a typo, never meant. */
static int want_string(json_t *v, const char *where, const char **s, struct sbx_err *err)
{
	if (sbx_json_string(v, where, s, NULL, err) < 0)
		return -1;
	if (!**s)
		return sbx_fail(err, "%s: must not be empty", where);
	return 0;
}

static int dup_path(json_t *v, const char *where, enum sbx_config_type rule, char **out,
		    struct sbx_err *err)
{
	const char *s;

	if (want_string(v, where, &s, err) < 0)
		return -1;
	return sbx_config_set_path(s, where, rule, out, err);
}

/* ---- listen ---- */

static int parse_listen(struct sbx_config *cfg, void *field, json_t *v, const char *key,
			struct sbx_err *err)
{
	char where[WHERE_MAX];
	size_t n;

	(void)field, (void)key;

	if (!json_is_array(v))
		return sbx_fail(err, "listen: must be an array");
	n = json_array_size(v);
	if (n == 0)
		return sbx_fail(err, "listen: must not be empty");
	if (n > SBX_CONFIG_MAX_LISTEN)
		return sbx_fail(err, "listen: at most %d entries", SBX_CONFIG_MAX_LISTEN);
	for (size_t i = 0; i < n; i++) {
		const char *s;

		snprintf(where, sizeof(where), "listen[%zu]", i);
		if (want_string(json_array_get(v, i), where, &s, err) < 0)
			return -1;
		if (sbx_listen_url_scheme(s, NULL) == SBX_SCHEME_BAD)
			return sbx_fail(err, "%s: must start with ipc://, tls+tcp:// or tcp://",
					where);
		for (size_t j = 0; j < i; j++)
			if (strcmp(cfg->listen[j], s) == 0)
				return sbx_fail(err, "%s: duplicate of listen[%zu]", where, j);
		cfg->listen[i] = strdup(s);
		if (!cfg->listen[i])
			return oom(err);
		cfg->n_listen = i + 1;
	}
	return 0;
}

/* ---- tls ---- */

static const struct sbx_config_key tls_keys[] = {
    {"cert", SBX_CONFIG_PATH, .offset = offsetof(struct sbx_config, tls_cert),
     .doc = "the server's certificate chain (PEM), for `tls+tcp://` listeners"},
    {"key", SBX_CONFIG_PATH, .offset = offsetof(struct sbx_config, tls_key),
     .doc = "its private key (PEM)"},
    {"client_ca", SBX_CONFIG_PATH, .offset = offsetof(struct sbx_config, tls_client_ca),
     .doc = "the CA that client certificates must chain to"},
};

const struct sbx_config_section sbx_config_tls_section = {
    "tls",
    "The files of `tls+tcp://` listeners, which need all three "
    "([TLS and identities](../operator/tls-and-identities.md)).",
    tls_keys,
    SBX_CONFIG_N(tls_keys),
};

/* ---- tokens: a name and the sha256 of the secret, never the secret ---- */

static const struct sbx_config_key token_keys[] = {
    {"name", SBX_CONFIG_OTHER, .type_doc = "string", .range_doc = "1..63 of `A-Z a-z 0-9 . _ -`",
     .def_doc = "required", .doc = "the identity the token grants, `token:<name>`; unique"},
    {"sha256", SBX_CONFIG_OTHER, .type_doc = "string", .range_doc = "64 lowercase hex",
     .def_doc = "required",
     .doc = "sha256 of the token's bytes (`sha256sum`); the token itself is never stored"},
};

_Static_assert(sizeof(((struct sbx_token *)0)->name) == 64, "tokens[].name's range_doc says 63");

/* parse_token reads the rows itself (a missing key is an error, names and
 * hashes must be unique); the table checks the keys and documents them. */
const struct sbx_config_section sbx_config_token_section = {
    "tokens[]",
    "Each entry of `tokens`: a bearer token callers may present on "
    "`tls+tcp://` and `tcp://` listeners.",
    token_keys,
    SBX_CONFIG_N(token_keys),
};

bool config_is_name(const char *s, size_t max)
{
	size_t len = strlen(s);

	if (len == 0 || len > max)
		return false;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || strchr("._-", *s)))
			return false;
	return true;
}

static int hex_nibble(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* Lowercase only: one spelling per hash, as sha256sum prints it. */
static bool parse_sha256_hex(const char *s, uint8_t out[32])
{
	if (strlen(s) != 64)
		return false;
	for (size_t i = 0; i < 32; i++) {
		int hi = hex_nibble(s[2 * i]), lo = hex_nibble(s[2 * i + 1]);

		if (hi < 0 || lo < 0)
			return false;
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return true;
}

static int parse_token(struct sbx_config *cfg, json_t *v, size_t i, struct sbx_err *err)
{
	struct sbx_token *t = &cfg->tokens[i];
	char where[WHERE_MAX + 16];
	const char *s;
	json_t *f;

	snprintf(where, sizeof(where), "tokens[%zu]", i);
	if (sbx_config_check_section(&sbx_config_token_section, v, where, err) < 0)
		return -1;

	snprintf(where, sizeof(where), "tokens[%zu].name", i);
	if (!(f = json_object_get(v, "name")))
		return sbx_fail(err, "%s: missing", where);
	if (want_string(f, where, &s, err) < 0)
		return -1;
	if (!config_is_name(s, sizeof(t->name) - 1))
		return sbx_fail(err, "%s: must be 1..%zu characters of A-Z a-z 0-9 . _ -", where,
				sizeof(t->name) - 1);
	for (size_t j = 0; j < i; j++)
		if (strcmp(cfg->tokens[j].name, s) == 0)
			return sbx_fail(err, "%s: duplicate of tokens[%zu].name", where, j);
	snprintf(t->name, sizeof(t->name), "%s", s);

	snprintf(where, sizeof(where), "tokens[%zu].sha256", i);
	if (!(f = json_object_get(v, "sha256")))
		return sbx_fail(err, "%s: missing", where);
	if (!json_is_string(f) || !parse_sha256_hex(json_string_value(f), t->sha256))
		return sbx_fail(err, "%s: must be 64 lowercase hex (sha256 of the token)", where);
	/* One secret must name one identity. */
	for (size_t j = 0; j < i; j++)
		if (memcmp(cfg->tokens[j].sha256, t->sha256, sizeof(t->sha256)) == 0)
			return sbx_fail(err, "%s: same token as tokens[%zu]", where, j);
	cfg->n_tokens = i + 1;
	return 0;
}

static int parse_tokens(struct sbx_config *cfg, void *field, json_t *v, const char *key,
			struct sbx_err *err)
{
	(void)field, (void)key;
	if (!json_is_array(v))
		return sbx_fail(err, "tokens: must be an array");
	if (json_array_size(v) > SBX_CONFIG_MAX_TOKENS)
		return sbx_fail(err, "tokens: at most %d entries", SBX_CONFIG_MAX_TOKENS);
	for (size_t i = 0; i < json_array_size(v); i++)
		if (parse_token(cfg, json_array_get(v, i), i, err) < 0)
			return -1;
	return 0;
}

/* ---- operators: identities that see and end every run ---- */

/* "uid:N" (N a uid, 0..4294967294), "token:NAME" (NAME in tokens) or
 * "tls:NAME" (a name as a token's); where names the entry. */
static int parse_operator(struct sbx_config *cfg, json_t *v, size_t i, struct sbx_err *err)
{
	char where[WHERE_MAX];
	const char *s, *name;

	snprintf(where, sizeof(where), "operators[%zu]", i);
	if (want_string(v, where, &s, err) < 0)
		return -1;
	if (!strncmp(s, "uid:", 4)) {
		char *end;
		unsigned long long uid;

		name = s + 4;
		errno = 0;
		uid = strtoull(name, &end, 10);
		if (!*name || *end || errno || *name < '0' || *name > '9' ||
		    (name[0] == '0' && name[1]) || uid > 4294967294ull)
			return sbx_fail(err,
					"%s: \"%.64s\": a uid must be a decimal number "
					"0..4294967294 (\"uid:1000\")",
					where, s);
	} else if (!strncmp(s, "token:", 6)) {
		size_t j;

		name = s + 6;
		for (j = 0; j < cfg->n_tokens; j++)
			if (!strcmp(cfg->tokens[j].name, name))
				break;
		if (j == cfg->n_tokens)
			return sbx_fail(err, "%s: \"%.80s\": no token of that name in tokens",
					where, s);
	} else if (!strncmp(s, "tls:", 4)) {
		if (!config_is_name(s + 4, sizeof(((struct sbx_token *)0)->name) - 1))
			return sbx_fail(err,
					"%s: \"%.80s\": a tls name must be 1..63 characters of "
					"A-Z a-z 0-9 . _ -",
					where, s);
		/* nng 1.5.2 does not tell which client certificate connected:
		 * TLS callers are known by their token, so this names nobody yet. */
		fprintf(stderr,
			"sbxd: config: %s: \"%s\": no caller is identified by its "
			"certificate yet (TLS callers are \"token:NAME\"), so it matches nobody\n",
			where, s);
	} else {
		return sbx_fail(err,
				"%s: \"%.80s\": must be \"uid:N\", \"token:NAME\" or "
				"\"tls:NAME\"",
				where, s);
	}
	for (size_t j = 0; j < i; j++)
		if (!strcmp(cfg->operators[j], s))
			return sbx_fail(err, "%s: duplicate of operators[%zu]", where, j);
	snprintf(cfg->operators[i], sizeof(cfg->operators[i]), "%s", s);
	cfg->n_operators = i + 1;
	return 0;
}

static int parse_operators(struct sbx_config *cfg, void *field, json_t *v, const char *key,
			   struct sbx_err *err)
{
	(void)field, (void)key;
	if (!json_is_array(v))
		return sbx_fail(err, "operators: must be an array");
	if (json_array_size(v) > SBX_CONFIG_MAX_OPERATORS)
		return sbx_fail(err, "operators: at most %d entries", SBX_CONFIG_MAX_OPERATORS);
	for (size_t i = 0; i < json_array_size(v); i++)
		if (parse_operator(cfg, json_array_get(v, i), i, err) < 0)
			return -1;
	return 0;
}

/* ---- input_dirs ---- */

static int parse_input_dirs(struct sbx_config *cfg, void *field, json_t *v, const char *key,
			    struct sbx_err *err)
{
	char where[WHERE_MAX];

	(void)field, (void)key;

	if (!json_is_array(v))
		return sbx_fail(err, "input_dirs: must be an array");
	if (json_array_size(v) > SBX_CONFIG_MAX_INPUT_DIRS)
		return sbx_fail(err, "input_dirs: at most %d entries", SBX_CONFIG_MAX_INPUT_DIRS);
	for (size_t i = 0; i < json_array_size(v); i++) {
		snprintf(where, sizeof(where), "input_dirs[%zu]", i);
		if (dup_path(json_array_get(v, i), where, SBX_CONFIG_ABS_PATH, &cfg->input_dirs[i],
			     err) < 0)
			return -1;
		cfg->n_input_dirs = i + 1;
	}
	return 0;
}

/* ---- numbers ---- */

/* JSON has no octal: 0660 is written 432. The message says both. */
static int parse_ipc_mode(struct sbx_config *cfg, void *field, json_t *v, const char *where,
			  struct sbx_err *err)
{
	(void)cfg, (void)where;
	if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 0777)
		return sbx_fail(err, "ipc_mode: must be an integer 0..511 (octal 0..0777; "
				     "0660 is 432)");
	*(uint32_t *)field = (uint32_t)json_integer_value(v);
	return 0;
}

/* A call's deadline bounds its records': a shorter one would end every
 * slow record before the record's own deadline says. */
static int check_same_host_call_ms(struct sbx_config *cfg, void *base, json_t *root,
				   struct sbx_err *err)
{
	(void)base;
	(void)root;
	if (cfg->same_host_call_ms < cfg->same_host_record_ms)
		return sbx_fail(err, "same_host_call_ms: %u is less than same_host_record_ms (%u)",
				cfg->same_host_call_ms, cfg->same_host_record_ms);
	return 0;
}

/* An unwritten per-identity cap follows a smaller host-wide one instead of
 * failing on a number the operator never wrote. */
static int follow_runs_max(struct sbx_config *cfg, void *base, json_t *root, struct sbx_err *err)
{
	(void)base;
	return config_follow(root, "runs_max_per_identity", "runs_max_per_identity",
			     &cfg->runs_max_per_identity, cfg->runs_max, "runs_max", err);
}

/* exec_fds_per_run's doc says these numbers. */
_Static_assert(SBX_EXEC_FDS == 7 && SBX_EXEC_FDS_PER_RUN_MAX == 448, "exec_fds_per_run's doc");

/* A share smaller than one exec's would refuse every Exec. */
static int check_exec_fds(struct sbx_config *cfg, void *base, json_t *root, struct sbx_err *err)
{
	(void)base, (void)root;
	if (cfg->exec_fds_per_run && cfg->exec_fds_per_run < SBX_EXEC_FDS)
		return sbx_fail(err,
				"exec_fds_per_run: %u is less than one exec's %d descriptors "
				"(0: fit RLIMIT_NOFILE)",
				cfg->exec_fds_per_run, SBX_EXEC_FDS);
	return 0;
}

/* The ceilings against the host (config_limits.c), then, as
 * runs_max_per_identity follows runs_max, an unwritten default lease
 * follows a lower ceiling. */
static int check_limits(struct sbx_config *cfg, void *base, json_t *root, struct sbx_err *err)
{
	if (sbx_config_limits_check(cfg, base, root, err) < 0)
		return -1;
	return config_follow(root, "idle_seconds_default", "idle_seconds_default",
			     &cfg->idle_seconds_default, cfg->limits_max.idle_seconds,
			     "limits_max.idle_seconds", err);
}

/* ---- connections ---- */

/* Written or not: an unwritten one shrinks to fit RLIMIT_NOFILE. */
static int note_per_listener(struct sbx_config *cfg, void *base, json_t *obj, struct sbx_err *err)
{
	(void)cfg, (void)err;
	((struct sbx_config_connections *)base)->per_listener_given =
	    json_object_get(obj, "per_listener") != NULL;
	return 0;
}

/* As runs_max_per_identity follows runs_max. */
static int follow_per_listener(struct sbx_config *cfg, void *base, json_t *obj, struct sbx_err *err)
{
	struct sbx_config_connections *c = base;

	(void)cfg;
	return config_follow(obj, "per_peer", "connections.per_peer", &c->per_peer, c->per_listener,
			     "connections.per_listener", err);
}

#define CONN(field) .offset = offsetof(struct sbx_config_connections, field)
static const struct sbx_config_key connection_keys[] = {
    {"per_listener", SBX_CONFIG_U32, 1, CONN_MAX, 1024, CONN(per_listener),
     .check = note_per_listener, .def_note = "less when unwritten and RLIMIT_NOFILE is short",
     .doc = "open connections on one listener, pending ones included"},
    {"per_peer", SBX_CONFIG_U32, 1, CONN_MAX, 64, CONN(per_peer), .check = follow_per_listener,
     .doc = "open connections of one peer across listeners (a uid on ipc, an address on "
	    "tcp); at most `per_listener`"},
    {"new_per_peer_per_second", SBX_CONFIG_U32, 1, 1000000, 50, CONN(new_per_peer_per_second),
     .doc = "new connections a peer may open a second, as many in a burst"},
    {"idle_seconds", SBX_CONFIG_U32, 1, 86400, 300, CONN(idle_seconds),
     .doc = "a connection with no request in hand is closed after this"},
    {"message_seconds", SBX_CONFIG_U32, 1, 3600, 30, CONN(message_seconds),
     .doc = "a request arriving on ipc or tcp must be whole within this"},
    {"first_request_seconds", SBX_CONFIG_U32, 1, 3600, 10, CONN(first_request_seconds),
     .doc = "ipc, tcp: from accept to a whole first request"},
    {"pending_bytes_per_peer_mb", SBX_CONFIG_U32, 1, 1 << 20, 16, CONN(pending_bytes_per_peer_mb),
     .doc = "announced, incomplete messages of one peer"},
    {"pending_bytes_mb", SBX_CONFIG_U32, 1, 1 << 20, 256, CONN(pending_bytes_mb),
     .doc = "announced, incomplete messages of every peer together"},
};
#undef CONN

const struct sbx_config_section sbx_config_connections_section = {
    "connections",
    "Bounds on connections (server/rpc/conn_guard.c); [connections](../operator/connections.md) "
    "says what each costs.",
    connection_keys,
    SBX_CONFIG_N(connection_keys),
};

/* "subordinate" or "shared" (common/host_ids.h); whether runs_max runs fit
 * in the subordinate range is checked at start (config_limits.c). */
static int parse_host_uids(struct sbx_config *cfg, void *field, json_t *v, const char *where,
			   struct sbx_err *err)
{
	const char *s = json_string_value(v);

	(void)cfg, (void)where;
	if (!s || (strcmp(s, "subordinate") && strcmp(s, "shared")))
		return sbx_fail(err,
				"config: host_uids: must be \"subordinate\" (a host uid of "
				"its own for each run) or \"shared\" (sbxd's own uid; weaker)");
	*(bool *)field = !strcmp(s, "shared");
	return 0;
}

/* ---- the document ---- */

#define ROOT(field) .offset = offsetof(struct sbx_config, field)
/* In the order they are read: a row's check may use the rows above it. */
static const struct sbx_config_key root_keys[] = {
    {"listen", SBX_CONFIG_OTHER, .parse = parse_listen, .type_doc = "array of 1..8 strings",
     .range_doc = "`ipc://PATH`, `tls+tcp://HOST:PORT`, `tcp://HOST:PORT`",
     .def_doc = "`[\"" DEFAULT_LISTEN "\"]`",
     .doc = "where sbxd listens; `tls+tcp://` needs `tls`, `tcp://` needs `insecure`"},
    {"state_dir", SBX_CONFIG_ABS_PATH, ROOT(state_dir), .def_str = "/var/lib/sbx",
     .doc = "per-run directories (inputs, output spill) and the image store's default home"},
    {"helper", SBX_CONFIG_ABS_PATH, ROOT(helper),
     .def_doc = "next to sbxd, then `../helper/sbx-helper` (a build tree), then "
		"`../libexec/sbx/sbx-helper` (an install), then PATH",
     .doc = "the sbx-helper sbxd runs sandboxes with"},
    {"cgroup_root", SBX_CONFIG_SUB_PATH, ROOT(cgroup_root), .def_doc = "sbx-helper's",
     .doc = "passed to sbx-helper `--cgroup-root`, under /sys/fs/cgroup"},
    {"rlimit_fallback", SBX_CONFIG_BOOL, ROOT(rlimit_fallback),
     .doc = "passed as `--allow-rlimit-fallback`: rlimits where no cgroup can be had"},
    {"host_uids", SBX_CONFIG_BOOL, ROOT(host_uids_shared), .parse = parse_host_uids,
     .type_doc = "string", .range_doc = "`\"subordinate\"`, `\"shared\"`",
     .def_doc = "`\"subordinate\"`",
     .doc = "a host uid of /etc/subuid's for each run, or sbxd's own uid for all (weaker)"},
    {"host_id_dir", SBX_CONFIG_ABS_PATH, ROOT(host_id_dir),
     .def_doc = "`~/.local/state/sbx/host-ids` of sbxd's user",
     .doc = "where the run host uids' locks live, for a user without a usable home; every "
	    "sbx of that user must use the same (sbx-helper `--host-id-dir`)"},
    {"log", SBX_CONFIG_PATH, ROOT(log_path), .def_doc = "stderr",
     .doc = "the audit log, JSON lines"},
    {"log_group", SBX_CONFIG_PATH, ROOT(log_group), .def_doc = "none: sbxd alone (0600)",
     .doc = "a group that may read the audit log (0640)"},
    {"tls", SBX_CONFIG_OBJECT, .section = &sbx_config_tls_section,
     .doc = "the certificate, key and client CA of `tls+tcp://` listeners"},
    {"tokens", SBX_CONFIG_OTHER, .parse = parse_tokens, .section = &sbx_config_token_section,
     .type_doc = "array of at most 256 objects", .def_doc = "none",
     .doc = "bearer tokens, each an identity"},
    {"input_dirs", SBX_CONFIG_OTHER, .parse = parse_input_dirs,
     .type_doc = "array of absolute paths", .range_doc = "at most 32", .def_doc = "none",
     .doc = "a same-host CreateRun.input_dir must be under one of these"},
    {"insecure", SBX_CONFIG_BOOL, ROOT(insecure),
     .doc = "allows plain `tcp://` listeners (with a warning)"},
    {"same_host_export", SBX_CONFIG_BOOL, ROOT(same_host_export), .def = 1,
     .doc = "allows ExportArtifacts: an ipc caller on this host gets its runs' `/out` files "
	    "sent to a unix socket it listens on (its uid checked), without chunks; one way: "
	    "the caller can send sbxd nothing, no descriptor, on any kernel "
	    "(docs/operator/known-limits.md)"},
    {"same_host_record_ms", SBX_CONFIG_U32, 100, 3600000, SBX_EXPORT_RECORD_MS,
     ROOT(same_host_record_ms),
     .doc = "ExportArtifacts (ImportInputs): the time a caller has to take (send) one "
	    "file's bytes; one that stops reading (sending) holds its own worker this long"},
    {"same_host_call_ms", SBX_CONFIG_U32, 100, 3600000, SBX_EXPORT_CALL_MS, ROOT(same_host_call_ms),
     .check = check_same_host_call_ms,
     .doc = "ExportArtifacts and ImportInputs: the time a whole call has, an export's "
	    "caller's hang-up after the last file included; at least `same_host_record_ms`"},
    {"same_host_import", SBX_CONFIG_BOOL, ROOT(same_host_import), .def = 1,
     .doc = "allows ImportInputs: an ipc caller on this host uploads its runs' inputs over a "
	    "unix socket it listens on (its uid checked), without chunks, checked as PutInput "
	    "checks them, under the deadlines `same_host_record_ms` (per file) and "
	    "`same_host_call_ms`; UNIMPLEMENTED (callers upload in chunks) on a kernel before "
	    "Linux 6.16, whose sockets cannot refuse descriptors (SO_PASSRIGHTS)"},
    {"exec_prepare", SBX_CONFIG_BOOL, ROOT(exec_prepare), .def = 1,
     .doc = "each run's pid 1 makes the next exec's init (namespaces, cgroup leaf, network) "
	    "ahead, once the last one was claimed, so that an Exec finds it ready; false: "
	    "each at its Exec (one process, one pid of the run's `pids` and some kernel "
	    "memory fewer per run, slower execs); passed to sbx-helper as `--no-prepare`; "
	    "true: a warm pool's member makes its first one before Ready (`--prepare-first`)"},
    {"runs_max", SBX_CONFIG_U32, 1, RUNS_MAX_MAX, 64, ROOT(runs_max),
     .doc = "runs at once, host-wide"},
    {"runs_max_per_identity", SBX_CONFIG_U32, 1, RUNS_MAX_MAX, 16, ROOT(runs_max_per_identity),
     .check = follow_runs_max,
     .doc = "runs at once of one identity (stopped ones do not count); at most `runs_max`"},
    {"workers", SBX_CONFIG_U32, 1, WORKERS_MAX, 16, ROOT(workers), .doc = "worker threads"},
    {"exec_fds_per_run", SBX_CONFIG_U32, 0, SBX_EXEC_FDS_PER_RUN_MAX, 0, ROOT(exec_fds_per_run),
     .check = check_exec_fds, .def_doc = "0: fit `RLIMIT_NOFILE`",
     .doc = "descriptors of sbxd's that one run's running execs may hold between them ("
	    "7 an exec; kept for each of `runs_max` runs); an Exec past "
	    "its run's share is refused RESOURCE_EXHAUSTED. 0: half of what the rest of "
	    "sbxd's reserve (and `connections.per_listener` where the config sets it) "
	    "leaves of `RLIMIT_NOFILE`, over `runs_max`, in whole execs, "
	    "at least one exec's and at most 64 execs' (448)"},
    {"idle_seconds_default", SBX_CONFIG_U32, 1, SBX_RUN_SECONDS_MAX, SBX_IDLE_SECONDS_DEFAULT,
     ROOT(idle_seconds_default),
     .doc = "a run's lease when its policy says 0 or nothing; at most "
	    "`limits_max.idle_seconds`"},
    {"expired_keep_seconds", SBX_CONFIG_U32, 0, SBX_RUN_SECONDS_MAX,
     SBX_EXPIRED_KEEP_SECONDS_DEFAULT, ROOT(expired_keep_seconds),
     .doc = "an expired or failed run keeps its artifacts this long, then sbxd tears it down"},
    {"ipc_mode", SBX_CONFIG_U32, 0, 0777, 0660, ROOT(ipc_mode), .parse = parse_ipc_mode,
     .range_doc = "0..511 (octal 0..0777)", .def_doc = "432 (octal 0660)",
     .doc = "the mode of `ipc://` socket files; JSON has no octal"},
    {"max_message_bytes", SBX_CONFIG_U64, MESSAGE_BYTES_MIN, MESSAGE_BYTES_MAX,
     4 * 1024 * 1024 + 64 * 1024, ROOT(max_message_bytes),
     .doc = "the largest request a listener takes (4 MiB + 64 KiB: a 1 MiB chunk fits)"},
    {"limits_max", SBX_CONFIG_OBJECT, ROOT(limits_max), .section = &sbx_config_limits_section,
     .check = check_limits, .doc = "ceilings on what a CreateRun's policy may ask"},
    {"quotas", SBX_CONFIG_OBJECT, ROOT(quotas), .section = &sbx_config_quotas_section,
     .doc = "what uploads, kept output and the audit log may take"},
    {"connections", SBX_CONFIG_OBJECT, ROOT(connections),
     .section = &sbx_config_connections_section, .doc = "bounds on connections"},
    {"egress", SBX_CONFIG_OBJECT, ROOT(egress), .section = &sbx_config_egress_section,
     .doc = "the egress proxy"},
    {"images", SBX_CONFIG_OBJECT, ROOT(images), .section = &sbx_config_images_section,
     .doc = "the image store"},
    {"metrics", SBX_CONFIG_OBJECT, ROOT(metrics), .section = &sbx_config_metrics_section,
     .doc = "the Prometheus metrics listener"},
    {"operators", SBX_CONFIG_OTHER, .parse = parse_operators,
     .type_doc = "array of at most 64 strings",
     .range_doc = "`\"uid:N\"`, `\"token:NAME\"` (in `tokens`), `\"tls:NAME\"`", .def_doc = "none",
     .doc = "identities that may list, read and tear down every run, and drain and undrain"},
    {"capacity", SBX_CONFIG_OBJECT, ROOT(capacity), .section = &sbx_config_capacity_section,
     .doc = "the CPUs and memory runs may commit"},
    {"drain_seconds", SBX_CONFIG_U32, 0, SBX_DRAIN_SECONDS_MAX, SBX_DRAIN_SECONDS_DEFAULT,
     ROOT(drain_seconds),
     .doc = "after SIGTERM, how long runs already there may go on before sbxd tears the "
	    "rest down and exits"},
    {"pool", SBX_CONFIG_OTHER, .parse = sbx_config_parse_pool, .section = &sbx_config_pool_section,
     .type_doc = "array of at most 16 objects", .def_doc = "none: no sandbox is built ahead",
     .doc = "the warm pool: sandboxes built ahead for a policy's shape "
	    "([pool.md](../operator/pool.md)); sizes together at most `runs_max`"},
    {"pool_max_age_seconds", SBX_CONFIG_U32, 10, 86400, 600, ROOT(pool_max_age_seconds),
     .doc = "a ready pool member older than this (or than half its policy's `run_seconds`) "
	    "is destroyed and built again"},
    {"pool_builds_per_second", SBX_CONFIG_U32, 1, 100, 4, ROOT(pool_builds_per_second),
     .doc = "the pool's refill: at most this many builds started per second (a token "
	    "bucket of as many), one at a time, never in a caller's thread"},
};
#undef ROOT

const struct sbx_config_section sbx_config_root_section = {
    "",
    "The file is one JSON object; every key is optional.",
    root_keys,
    SBX_CONFIG_N(root_keys),
};

static int set_defaults(struct sbx_config *cfg, struct sbx_err *err)
{
	memset(cfg, 0, sizeof(*cfg));
	return sbx_config_section_defaults(&sbx_config_root_section, cfg, err);
}

static int parse_root(struct sbx_config *cfg, json_t *root, struct sbx_err *err)
{
	if (!json_is_object(root))
		return sbx_fail(err, "config: must be a JSON object");
	if (sbx_config_check_section(&sbx_config_root_section, root, "", err) < 0 ||
	    sbx_config_parse_keys(&sbx_config_root_section, cfg, cfg, root, "", err) < 0)
		return -1;
	/* Across keys, now that all of them are known. */
	for (size_t i = 0; i < cfg->n_listen; i++) {
		char where[WHERE_MAX];

		snprintf(where, sizeof(where), "listen[%zu]", i);
		if (sbx_config_check_listen(cfg, cfg->listen[i], where, err) < 0)
			return -1;
	}
	return 0;
}

int config_read_file(const char *path, size_t max, char **out, size_t *len, struct sbx_err *err)
{
	_cleanup_free_ char *buf = malloc(max + 1);
	_cleanup_close_ int fd = -1;

	*len = 0;
	if (!buf)
		return oom(err);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return sbx_fail_errno(err, "%s", path);
	/* One byte past the limit is enough to know the file is too large. */
	while (*len < max + 1) {
		ssize_t n = read(fd, buf + *len, max + 1 - *len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return sbx_fail_errno(err, "%s: read", path);
		if (n == 0)
			break;
		*len += (size_t)n;
	}
	if (*len > max)
		return sbx_fail(err, "%s: larger than %zu bytes", path, max);
	*out = sbx_steal_ptr(buf);
	return 0;
}

static int load_file(const char *path, struct sbx_config *cfg, struct sbx_err *err)
{
	_cleanup_free_ char *buf = NULL;
	json_auto_t *root = NULL;
	json_error_t jerr;
	size_t len;

	if (config_read_file(path, CONFIG_BYTES_MAX, &buf, &len, err) < 0)
		return -1;
	root = json_loadb(buf, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
	if (!root)
		return sbx_fail(err, "%s: line %d column %d: %s", path, jerr.line, jerr.column,
				jerr.text);
	if (parse_root(cfg, root, err) < 0)
		return sbx_err_prefix(err, "%s", path);
	return 0;
}

int sbx_config_check_listen(const struct sbx_config *cfg, const char *url, const char *where,
			    struct sbx_err *err)
{
	struct sbx_listen_have have = {
	    .tls_files = cfg->tls_cert && cfg->tls_key && cfg->tls_client_ca,
	    .tokens = cfg->n_tokens > 0,
	    .insecure = cfg->insecure,
	};

	return sbx_listen_url_check(url, &have, where, err);
}

int sbx_config_load(const char *path, struct sbx_config *cfg, struct sbx_err *err)
{
	if (set_defaults(cfg, err) < 0 || (path && load_file(path, cfg, err) < 0))
		goto fail;
	/* A file's limits were checked as they were parsed; the defaults
	 * alone must fit the host as well. */
	if (!path && sbx_config_check_files(cfg, false, false, err) < 0)
		goto fail;
	if (cfg->n_listen == 0) {
		cfg->listen[0] = strdup(DEFAULT_LISTEN);
		if (!cfg->listen[0]) {
			oom(err);
			goto fail;
		}
		cfg->n_listen = 1;
	}
	return 0;
fail:
	/* Never half a config: the caller may still call sbx_config_free. */
	sbx_config_free(cfg);
	return -1;
}

/* ---- command-line flags ---- */

/* "--state-dir VALUE" (cut short) names a flag in its errors, as
 * "listen[1]" names a key. */
static const char *flag_where(char *buf, size_t size, const char *flag, const char *value)
{
	snprintf(buf, size, "%s %.*s", flag, SBX_LISTEN_URL_MAX, value);
	return buf;
}

static int apply_listen_flags(struct sbx_config *cfg, const struct sbx_config_flags *f,
			      struct sbx_err *err)
{
	char where[SBX_LISTEN_URL_MAX + 16];

	for (size_t i = 0; i < cfg->n_listen; i++) {
		free(cfg->listen[i]);
		cfg->listen[i] = NULL;
	}
	cfg->n_listen = 0;
	for (size_t i = 0; i < f->n_listen; i++) {
		flag_where(where, sizeof(where), "--listen", f->listen[i]);
		for (size_t j = 0; j < i; j++)
			if (strcmp(f->listen[i], f->listen[j]) == 0)
				return sbx_fail(err, "%s: given twice", where);
		if (sbx_config_check_listen(cfg, f->listen[i], where, err) < 0)
			return -1;
		if (!(cfg->listen[i] = strdup(f->listen[i])))
			return oom(err);
		cfg->n_listen = i + 1;
	}
	return 0;
}

int sbx_config_apply_flags(struct sbx_config *cfg, const struct sbx_config_flags *f,
			   struct sbx_err *err)
{
	char where[SBX_LISTEN_URL_MAX + 16];

	if (f->n_listen && apply_listen_flags(cfg, f, err) < 0)
		return -1;
	if (f->state_dir &&
	    sbx_config_set_path(f->state_dir,
				flag_where(where, sizeof(where), "--state-dir", f->state_dir),
				SBX_CONFIG_ABS_PATH, &cfg->state_dir, err) < 0)
		return -1;
	if (f->cgroup_root &&
	    sbx_config_set_path(f->cgroup_root,
				flag_where(where, sizeof(where), "--cgroup-root", f->cgroup_root),
				SBX_CONFIG_SUB_PATH, &cfg->cgroup_root, err) < 0)
		return -1;
	if (f->log && sbx_config_set_path(f->log, flag_where(where, sizeof(where), "--log", f->log),
					  SBX_CONFIG_PATH, &cfg->log_path, err) < 0)
		return -1;
	return 0;
}

void sbx_config_free(struct sbx_config *cfg)
{
	for (size_t i = 0; i < SBX_CONFIG_MAX_LISTEN; i++)
		free(cfg->listen[i]);
	for (size_t i = 0; i < SBX_CONFIG_MAX_INPUT_DIRS; i++)
		free(cfg->input_dirs[i]);
	free(cfg->state_dir);
	free(cfg->helper);
	free(cfg->cgroup_root);
	free(cfg->host_id_dir);
	free(cfg->log_path);
	free(cfg->log_group);
	free(cfg->tls_cert);
	free(cfg->tls_key);
	free(cfg->tls_client_ca);
	sbx_config_egress_free(&cfg->egress);
	sbx_config_pool_free(cfg);
	sbx_config_images_free(&cfg->images);
	sbx_config_metrics_free(&cfg->metrics);
	/* The token hashes are not secrets, but nothing needs them after. */
	memset(cfg, 0, sizeof(*cfg));
}
