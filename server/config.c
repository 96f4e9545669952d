/* SPDX-License-Identifier: Apache-2.0 */
/* sbxd's configuration file: strict JSON, read the way policies are.
 *
 * An operator's typo must not silently become a default, so every key is
 * known, every value has one type and one range, and every error names the
 * JSON path ("tokens[2].sha256: must be 64 lowercase hex"). Keys that only
 * make sense together (a TLS listener and its certificates) are checked
 * after the whole document is read. */
#include "config.h"
#include "strict_json.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "config_rules.h"
#include "listen_url.h"
#include "path.h"
#include "policy.h"
#include "util.h"

#define CONFIG_BYTES_MAX (1 << 20)
#define PATH_LEN_MAX	 4095
#define WHERE_MAX	 64

#define DEFAULT_LISTEN		      "ipc:///run/sbx/sbxd.sock"
#define DEFAULT_STATE_DIR	      "/var/lib/sbx"
#define DEFAULT_RUNS_MAX	      64
#define DEFAULT_RUNS_MAX_PER_IDENTITY 16
#define DEFAULT_WORKERS		      16
#define DEFAULT_IPC_MODE	      0660
#define DEFAULT_MAX_MESSAGE_BYTES     (4u * 1024 * 1024 + 64 * 1024)
#define DEFAULT_CONN_PER_LISTENER     1024
#define DEFAULT_CONN_PER_PEER	      64
#define DEFAULT_CONN_NEW_PER_SECOND   50
#define DEFAULT_CONN_IDLE_SECONDS     300
#define DEFAULT_CONN_MESSAGE_SECONDS  30
#define DEFAULT_CONN_FIRST_SECONDS    10
#define DEFAULT_CONN_PENDING_PEER_MB  16
#define DEFAULT_CONN_PENDING_MB	      256
#define CONN_MAX		      (1 << 20)
#define RUNS_MAX_MAX		      4096
#define WORKERS_MAX		      256
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

/* How a path setting is checked (common/path.h has the rules). Absolute
 * paths are compared by prefix by the run manager, so they are spelled one
 * way; the cgroup root is joined under /sys/fs/cgroup. */
enum path_rule { ANY_PATH, ABS_PATH, NO_DOTDOT };

static const char *path_problem(const char *s, enum path_rule rule)
{
	switch (rule) {
	case ABS_PATH:
		return sbx_path_problem(s, PATH_LEN_MAX, SBX_PATH_ABSOLUTE);
	case NO_DOTDOT:
		return sbx_path_problem(s, PATH_LEN_MAX, SBX_PATH_NO_DOTDOT);
	default:
		return NULL;
	}
}

/* The one check of a path setting, from the file or from a flag. */
static int set_path(const char *s, const char *where, enum path_rule rule, char **out,
		    struct sbx_err *err)
{
	const char *problem;
	char *copy;

	if (!*s)
		return sbx_fail(err, "%s: must not be empty", where);
	if (strlen(s) > PATH_LEN_MAX)
		return sbx_fail(err, "%s: longer than %d bytes", where, PATH_LEN_MAX);
	if ((problem = path_problem(s, rule)))
		return sbx_fail(err, "%s: %s", where, problem);
	if (!(copy = strdup(s)))
		return oom(err);
	free(*out);
	*out = copy;
	return 0;
}

static int dup_path(json_t *v, const char *where, enum path_rule rule, char **out,
		    struct sbx_err *err)
{
	const char *s;

	if (want_string(v, where, &s, err) < 0)
		return -1;
	return set_path(s, where, rule, out, err);
}

/* ---- listen ---- */

static int parse_listen(struct sbx_config *cfg, json_t *v, struct sbx_err *err)
{
	char where[WHERE_MAX];
	size_t n;

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

static const char *const tls_keys[] = {"cert", "key", "client_ca", NULL};

static int parse_tls(struct sbx_config *cfg, json_t *v, struct sbx_err *err)
{
	json_t *f;

	if (!json_is_object(v))
		return sbx_fail(err, "tls: must be an object");
	if (sbx_json_check_keys(v, "tls", tls_keys, err) < 0)
		return -1;
	if ((f = json_object_get(v, "cert")) &&
	    dup_path(f, "tls.cert", ANY_PATH, &cfg->tls_cert, err) < 0)
		return -1;
	if ((f = json_object_get(v, "key")) &&
	    dup_path(f, "tls.key", ANY_PATH, &cfg->tls_key, err) < 0)
		return -1;
	if ((f = json_object_get(v, "client_ca")) &&
	    dup_path(f, "tls.client_ca", ANY_PATH, &cfg->tls_client_ca, err) < 0)
		return -1;
	return 0;
}

/* ---- tokens: a name and the sha256 of the secret, never the secret ---- */

static const char *const token_keys[] = {"name", "sha256", NULL};

static bool is_token_name(const char *s)
{
	size_t len = strlen(s);

	if (len == 0 || len >= sizeof(((struct sbx_token *)0)->name))
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
	if (!json_is_object(v))
		return sbx_fail(err, "%s: must be an object", where);
	if (sbx_json_check_keys(v, where, token_keys, err) < 0)
		return -1;

	snprintf(where, sizeof(where), "tokens[%zu].name", i);
	if (!(f = json_object_get(v, "name")))
		return sbx_fail(err, "%s: missing", where);
	if (want_string(f, where, &s, err) < 0)
		return -1;
	if (!is_token_name(s))
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

static int parse_tokens(struct sbx_config *cfg, json_t *v, struct sbx_err *err)
{
	if (!json_is_array(v))
		return sbx_fail(err, "tokens: must be an array");
	if (json_array_size(v) > SBX_CONFIG_MAX_TOKENS)
		return sbx_fail(err, "tokens: at most %d entries", SBX_CONFIG_MAX_TOKENS);
	for (size_t i = 0; i < json_array_size(v); i++)
		if (parse_token(cfg, json_array_get(v, i), i, err) < 0)
			return -1;
	return 0;
}

/* ---- input_dirs ---- */

static int parse_input_dirs(struct sbx_config *cfg, json_t *v, struct sbx_err *err)
{
	char where[WHERE_MAX];

	if (!json_is_array(v))
		return sbx_fail(err, "input_dirs: must be an array");
	if (json_array_size(v) > SBX_CONFIG_MAX_INPUT_DIRS)
		return sbx_fail(err, "input_dirs: at most %d entries", SBX_CONFIG_MAX_INPUT_DIRS);
	for (size_t i = 0; i < json_array_size(v); i++) {
		snprintf(where, sizeof(where), "input_dirs[%zu]", i);
		if (dup_path(json_array_get(v, i), where, ABS_PATH, &cfg->input_dirs[i], err) < 0)
			return -1;
		cfg->n_input_dirs = i + 1;
	}
	return 0;
}

/* ---- numbers ---- */

static int parse_u32(json_t *root, const char *key, json_int_t min, json_int_t max, uint32_t *out,
		     struct sbx_err *err)
{
	json_t *v = json_object_get(root, key);
	json_int_t n = 0;

	if (!v)
		return 0;
	if (sbx_json_int(v, key, min, max, &n, err) < 0)
		return -1;
	*out = (uint32_t)n;
	return 0;
}

static int parse_numbers(struct sbx_config *cfg, json_t *root, struct sbx_err *err)
{
	json_t *v;
	json_int_t n = 0;

	if (parse_u32(root, "runs_max", 1, RUNS_MAX_MAX, &cfg->runs_max, err) < 0 ||
	    parse_u32(root, "runs_max_per_identity", 1, RUNS_MAX_MAX, &cfg->runs_max_per_identity,
		      err) < 0 ||
	    parse_u32(root, "workers", 1, WORKERS_MAX, &cfg->workers, err) < 0 ||
	    parse_u32(root, "idle_seconds_default", 1, SBX_RUN_SECONDS_MAX,
		      &cfg->idle_seconds_default, err) < 0 ||
	    parse_u32(root, "expired_keep_seconds", 0, SBX_RUN_SECONDS_MAX,
		      &cfg->expired_keep_seconds, err) < 0)
		return -1;
	/* JSON has no octal: 0660 is written 432. The message says both. */
	if ((v = json_object_get(root, "ipc_mode"))) {
		if (!json_is_integer(v) || json_integer_value(v) < 0 ||
		    json_integer_value(v) > 0777)
			return sbx_fail(err, "ipc_mode: must be an integer 0..511 (octal 0..0777; "
					     "0660 is 432)");
		cfg->ipc_mode = (uint32_t)json_integer_value(v);
	}
	if ((v = json_object_get(root, "max_message_bytes"))) {
		if (sbx_json_int(v, "max_message_bytes", MESSAGE_BYTES_MIN, MESSAGE_BYTES_MAX, &n,
				 err) < 0)
			return -1;
		cfg->max_message_bytes = (uint64_t)n;
	}
	/* An unwritten per-identity cap follows a smaller host-wide one
	 * instead of failing on a number the operator never wrote. */
	return config_follow(root, "runs_max_per_identity", "runs_max_per_identity",
			     &cfg->runs_max_per_identity, cfg->runs_max, "runs_max", err);
}

/* ---- connections ---- */

static const char *const connection_keys[] = {"per_listener",
					      "per_peer",
					      "new_per_peer_per_second",
					      "idle_seconds",
					      "message_seconds",
					      "first_request_seconds",
					      "pending_bytes_per_peer_mb",
					      "pending_bytes_mb",
					      NULL};

static int parse_connections(struct sbx_config *cfg, json_t *v, struct sbx_err *err)
{
	struct sbx_config_connections *c = &cfg->connections;
	struct {
		const char *key;
		json_int_t max;
		uint32_t *out;
	} fields[] = {
	    {"per_listener", CONN_MAX, &c->per_listener},
	    {"per_peer", CONN_MAX, &c->per_peer},
	    {"new_per_peer_per_second", 1000000, &c->new_per_peer_per_second},
	    {"idle_seconds", 86400, &c->idle_seconds},
	    {"message_seconds", 3600, &c->message_seconds},
	    {"first_request_seconds", 3600, &c->first_request_seconds},
	    {"pending_bytes_per_peer_mb", 1 << 20, &c->pending_bytes_per_peer_mb},
	    {"pending_bytes_mb", 1 << 20, &c->pending_bytes_mb},
	};
	char where[WHERE_MAX];
	json_int_t n = 0;
	json_t *f;

	if (!json_is_object(v))
		return sbx_fail(err, "connections: must be an object");
	if (sbx_json_check_keys(v, "connections", connection_keys, err) < 0)
		return -1;
	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
		if (!(f = json_object_get(v, fields[i].key)))
			continue;
		snprintf(where, sizeof(where), "connections.%s", fields[i].key);
		if (sbx_json_int(f, where, 1, fields[i].max, &n, err) < 0)
			return -1;
		*fields[i].out = (uint32_t)n;
	}
	c->per_listener_given = json_object_get(v, "per_listener") != NULL;
	/* As runs_max_per_identity follows runs_max. */
	return config_follow(v, "per_peer", "connections.per_peer", &c->per_peer, c->per_listener,
			     "connections.per_listener", err);
}

/* "subordinate" or "shared" (helper/host_ids.h); whether runs_max runs fit
 * in the subordinate range is checked at start (config_limits.c). */
static int parse_host_uids(struct sbx_config *cfg, json_t *v, struct sbx_err *err)
{
	const char *s = json_string_value(v);
	if (!s || (strcmp(s, "subordinate") && strcmp(s, "shared")))
		return sbx_fail(err,
				"config: host_uids: must be \"subordinate\" (a host uid of "
				"its own for each run) or \"shared\" (sbxd's own uid; weaker)");
	cfg->host_uids_shared = !strcmp(s, "shared");
	return 0;
}

/* ---- the document ---- */

static const char *const top_keys[] = {"listen",
				       "state_dir",
				       "helper",
				       "cgroup_root",
				       "rlimit_fallback",
				       "host_uids",
				       "log",
				       "tls",
				       "tokens",
				       "input_dirs",
				       "insecure",
				       "runs_max",
				       "runs_max_per_identity",
				       "workers",
				       "ipc_mode",
				       "max_message_bytes",
				       "limits_max",
				       "quotas",
				       "log_group",
				       "connections",
				       "egress",
				       "images",
				       "idle_seconds_default",
				       "expired_keep_seconds",
				       NULL};

static int set_defaults(struct sbx_config *cfg, struct sbx_err *err)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->runs_max = DEFAULT_RUNS_MAX;
	cfg->runs_max_per_identity = DEFAULT_RUNS_MAX_PER_IDENTITY;
	cfg->workers = DEFAULT_WORKERS;
	cfg->idle_seconds_default = SBX_IDLE_SECONDS_DEFAULT;
	cfg->expired_keep_seconds = SBX_EXPIRED_KEEP_SECONDS_DEFAULT;
	cfg->ipc_mode = DEFAULT_IPC_MODE;
	cfg->max_message_bytes = DEFAULT_MAX_MESSAGE_BYTES;
	sbx_config_limits_defaults(cfg);
	cfg->connections = (struct sbx_config_connections){
	    .per_listener = DEFAULT_CONN_PER_LISTENER,
	    .per_peer = DEFAULT_CONN_PER_PEER,
	    .new_per_peer_per_second = DEFAULT_CONN_NEW_PER_SECOND,
	    .idle_seconds = DEFAULT_CONN_IDLE_SECONDS,
	    .message_seconds = DEFAULT_CONN_MESSAGE_SECONDS,
	    .first_request_seconds = DEFAULT_CONN_FIRST_SECONDS,
	    .pending_bytes_per_peer_mb = DEFAULT_CONN_PENDING_PEER_MB,
	    .pending_bytes_mb = DEFAULT_CONN_PENDING_MB,
	};
	cfg->state_dir = strdup(DEFAULT_STATE_DIR);
	if (!cfg->state_dir)
		return oom(err);
	return sbx_config_egress_defaults(&cfg->egress, err);
}

static int parse_root(struct sbx_config *cfg, json_t *root, struct sbx_err *err)
{
	json_t *v;

	if (!json_is_object(root))
		return sbx_fail(err, "config: must be a JSON object");
	if (sbx_json_check_keys(root, "", top_keys, err) < 0)
		return -1;
	if ((v = json_object_get(root, "listen")) && parse_listen(cfg, v, err) < 0)
		return -1;
	if ((v = json_object_get(root, "state_dir")) &&
	    dup_path(v, "state_dir", ABS_PATH, &cfg->state_dir, err) < 0)
		return -1;
	if ((v = json_object_get(root, "helper")) &&
	    dup_path(v, "helper", ABS_PATH, &cfg->helper, err) < 0)
		return -1;
	if ((v = json_object_get(root, "cgroup_root")) &&
	    dup_path(v, "cgroup_root", NO_DOTDOT, &cfg->cgroup_root, err) < 0)
		return -1;
	if ((v = json_object_get(root, "rlimit_fallback")) &&
	    sbx_json_bool(v, "rlimit_fallback", &cfg->rlimit_fallback, err) < 0)
		return -1;
	if ((v = json_object_get(root, "host_uids")) && parse_host_uids(cfg, v, err) < 0)
		return -1;
	if ((v = json_object_get(root, "log")) &&
	    dup_path(v, "log", ANY_PATH, &cfg->log_path, err) < 0)
		return -1;
	if ((v = json_object_get(root, "log_group")) &&
	    dup_path(v, "log_group", ANY_PATH, &cfg->log_group, err) < 0)
		return -1;
	if ((v = json_object_get(root, "tls")) && parse_tls(cfg, v, err) < 0)
		return -1;
	if ((v = json_object_get(root, "tokens")) && parse_tokens(cfg, v, err) < 0)
		return -1;
	if ((v = json_object_get(root, "input_dirs")) && parse_input_dirs(cfg, v, err) < 0)
		return -1;
	if ((v = json_object_get(root, "insecure")) &&
	    sbx_json_bool(v, "insecure", &cfg->insecure, err) < 0)
		return -1;
	if (parse_numbers(cfg, root, err) < 0 || sbx_config_parse_limits(cfg, root, err) < 0)
		return -1;
	/* As runs_max_per_identity follows runs_max: an unwritten default
	 * follows a lower ceiling. */
	if (config_follow(root, "idle_seconds_default", "idle_seconds_default",
			  &cfg->idle_seconds_default, cfg->limits_max.idle_seconds,
			  "limits_max.idle_seconds", err) < 0)
		return -1;
	if ((v = json_object_get(root, "connections")) && parse_connections(cfg, v, err) < 0)
		return -1;
	if (sbx_config_parse_egress(cfg, root, err) < 0 ||
	    sbx_config_parse_images(cfg, root, err) < 0)
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

static int read_file(const char *path, char **out, size_t *len, struct sbx_err *err)
{
	_cleanup_free_ char *buf = malloc(CONFIG_BYTES_MAX + 1);
	_cleanup_close_ int fd = -1;

	*len = 0;
	if (!buf)
		return oom(err);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return sbx_fail_errno(err, "%s", path);
	/* One byte past the limit is enough to know the file is too large. */
	while (*len < CONFIG_BYTES_MAX + 1) {
		ssize_t n = read(fd, buf + *len, CONFIG_BYTES_MAX + 1 - *len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return sbx_fail_errno(err, "%s: read", path);
		if (n == 0)
			break;
		*len += (size_t)n;
	}
	if (*len > CONFIG_BYTES_MAX)
		return sbx_fail(err, "%s: larger than %d bytes", path, CONFIG_BYTES_MAX);
	*out = sbx_steal_ptr(buf);
	return 0;
}

static int load_file(const char *path, struct sbx_config *cfg, struct sbx_err *err)
{
	_cleanup_free_ char *buf = NULL;
	json_auto_t *root = NULL;
	json_error_t jerr;
	size_t len;

	if (read_file(path, &buf, &len, err) < 0)
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
	    set_path(f->state_dir, flag_where(where, sizeof(where), "--state-dir", f->state_dir),
		     ABS_PATH, &cfg->state_dir, err) < 0)
		return -1;
	if (f->cgroup_root &&
	    set_path(f->cgroup_root,
		     flag_where(where, sizeof(where), "--cgroup-root", f->cgroup_root), NO_DOTDOT,
		     &cfg->cgroup_root, err) < 0)
		return -1;
	if (f->log && set_path(f->log, flag_where(where, sizeof(where), "--log", f->log), ANY_PATH,
			       &cfg->log_path, err) < 0)
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
	free(cfg->log_path);
	free(cfg->log_group);
	free(cfg->tls_cert);
	free(cfg->tls_key);
	free(cfg->tls_client_ca);
	sbx_config_egress_free(&cfg->egress);
	sbx_config_images_free(&cfg->images);
	/* The token hashes are not secrets, but nothing needs them after. */
	memset(cfg, 0, sizeof(*cfg));
}
