/* SPDX-License-Identifier: Apache-2.0 */
/* Unit test of authentication (server/rpc/rpc_auth.c): the identity each
 * transport and token gives, what is refused and with which message, that
 * a token is matched by its sha256 against every entry (first, last, none,
 * one bit off), and that refusals are audited, rate-limited. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "audit.h"
#include "check.h"
#include "config.h"
#include "rpc_auth.h"

static struct rpc_auth_table cfg;

static void add_token(const char *name, const char *secret)
{
	struct sbx_token *t = &cfg.tokens[cfg.n_tokens++];
	unsigned int len = 0;

	snprintf(t->name, sizeof(t->name), "%s", name);
	if (!EVP_Digest(secret, strlen(secret), t->sha256, &len, EVP_sha256(), NULL) || len != 32)
		abort();
}

static const struct rpc_peer ipc_uid = {
    .scheme = SBX_SCHEME_IPC, .have_uid = true, .uid = 1000, .addr = "uid 1000 pid 7"};
static const struct rpc_peer ipc_nouid = {.scheme = SBX_SCHEME_IPC, .addr = "?"};
static const struct rpc_peer tls_ok = {
    .scheme = SBX_SCHEME_TLS_TCP, .tls_verified = true, .addr = "192.0.2.7:41234"};
static const struct rpc_peer tls_unverified = {.scheme = SBX_SCHEME_TLS_TCP, .addr = "192.0.2.8:1"};
static const struct rpc_peer tcp = {.scheme = SBX_SCHEME_TCP, .addr = "192.0.2.9:2"};

static void ok_as(const char *desc, const struct rpc_peer *peer, const char *token,
		  const char *want)
{
	struct sbx_identity who;
	struct sbx_rpc_status st = {0};
	int rc = rpc_auth(&cfg, peer, token, "/sbx.v1.Sandbox/Health", &who, &st);

	if (!check(rc == 0 && strcmp(who.name, want) == 0, "%s: %s", desc, want))
		printf("#   rc %d, identity \"%s\", %s\n", rc, who.name, st.err.msg);
}

static void refused(const char *desc, const struct rpc_peer *peer, const char *token,
		    const char *want)
{
	struct sbx_identity who;
	struct sbx_rpc_status st = {0};
	int rc = rpc_auth(&cfg, peer, token, "/sbx.v1.Sandbox/Health", &who, &st);

	if (!check(rc < 0 && st.code == SBX__V1__CODE__UNAUTHENTICATED && !who.name[0] &&
		       strcmp(st.err.msg, want) == 0,
		   "refuses %s", desc))
		printf("#   rc %d code %d identity \"%s\"\n#   want: %s\n#    got: %s\n", rc,
		       st.code, who.name, want, st.err.msg);
}

static void test_identities(void)
{
	ok_as("ipc without a token", &ipc_uid, "", "uid:1000");
	ok_as("ipc with NULL credentials", &ipc_uid, NULL, "uid:1000");
	ok_as("ipc with a token: the token wins", &ipc_uid, "secret-alice", "token:alice");
	ok_as("tls+tcp with a token", &tls_ok, "secret-bob", "token:bob");
	ok_as("tcp with a token", &tcp, "secret-alice", "token:alice");
	ok_as("the last token of the table", &tls_ok, "secret-carol", "token:carol");

	refused("an invalid token on ipc", &ipc_uid, "secret-mallory",
		"invalid token in Request.credentials");
	refused("a token that is another's with a byte more", &tls_ok, "secret-alicex",
		"invalid token in Request.credentials");
	refused("tls+tcp without a token", &tls_ok, "",
		"missing token: tls+tcp callers must present a bearer token in "
		"Request.credentials");
	refused("tcp without a token", &tcp, NULL,
		"missing token: tcp callers must present a bearer token in Request.credentials");
	refused("ipc without a peer uid or a token", &ipc_nouid, "",
		"missing token: ipc callers must present a bearer token in Request.credentials");
	refused("an unverified TLS client, even with a valid token", &tls_unverified, "secret-bob",
		"client certificate not verified");
}

static bool operator_of(const struct rpc_peer *peer, const char *token)
{
	struct sbx_identity who = {.name = "stale", .operator= true };
	struct sbx_rpc_status st = {0};

	/* A refusal must leave it false too. */
	(void)rpc_auth(&cfg, peer, token, "/sbx.v1.Sandbox/Drain", &who, &st);
	return who.operator;
}

/* The operator bit comes from the config's operators, by identity name,
 * whatever the transport; a refused caller never has it. */
/* ExportArtifacts hands descriptors to who->local_uid: set on ipc from
 * the kernel's word alone (a token there names the caller, not the uid),
 * never on a transport that may cross hosts. */
static void local_is(const char *desc, const struct rpc_peer *peer, const char *token, bool local,
		     uint32_t uid)
{
	struct sbx_identity who = {.local = !local, .local_uid = 77};
	struct sbx_rpc_status st = {0};

	(void)rpc_auth(&cfg, peer, token, "/sbx.v1.Sandbox/ExportArtifacts", &who, &st);
	check(who.local == local && who.local_uid == uid, "%s: local %d uid %u", desc, local,
	      (unsigned)uid);
}

static void test_local(void)
{
	local_is("ipc, by its uid", &ipc_uid, "", true, 1000);
	local_is("ipc with a token: still the uid the kernel saw", &ipc_uid, "secret-bob", true,
		 1000);
	local_is("ipc without a peer uid", &ipc_nouid, "secret-bob", false, 0);
	local_is("tls with a token", &tls_ok, "secret-bob", false, 0);
	local_is("tcp with a token", &tcp, "secret-bob", false, 0);
}

static void test_operators(void)
{
	snprintf(cfg.operators[0], sizeof(cfg.operators[0]), "token:bob");
	snprintf(cfg.operators[1], sizeof(cfg.operators[1]), "uid:1000");
	cfg.n_operators = 2;
	check(operator_of(&tls_ok, "secret-bob"), "token:bob over TLS is an operator");
	check(operator_of(&ipc_uid, "secret-bob"), "token:bob over ipc too");
	check(operator_of(&ipc_uid, ""), "uid:1000 is an operator");
	check(!operator_of(&ipc_uid, "secret-alice"),
	      "uid:1000 presenting alice's token is alice, not an operator");
	check(!operator_of(&tls_ok, "secret-carol"), "token:carol is not an operator");
	check(!operator_of(&tls_ok, "secret-bobx"), "an invalid token never is");
	check(!operator_of(&tls_unverified, "secret-bob"), "nor an unverified TLS client");
	cfg.n_operators = 0;
	check(!operator_of(&tls_ok, "secret-bob"), "without operators nobody is one");
}

/* A hash one bit off must not match: every byte is compared. */
static void test_one_bit_off(void)
{
	struct rpc_auth_table saved = cfg;

	for (size_t i = 0; i < 32; i += 31) {
		cfg = saved;
		cfg.tokens[0].sha256[i] ^= 0x01;
		refused(i ? "a hash differing in its last bit"
			  : "a hash differing in its first bit",
			&tls_ok, "secret-alice", "invalid token in Request.credentials");
	}
	cfg = saved;
	cfg.n_tokens = 0;
	refused("any token when none is configured", &tls_ok, "secret-alice",
		"invalid token in Request.credentials");
	cfg = saved;
}

static size_t count_lines(const char *path, const char *needle)
{
	char line[4096];
	size_t n = 0;
	FILE *f = fopen(path, "r");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		n += strstr(line, needle) != NULL;
	fclose(f);
	return n;
}

static void test_audit(const char *log)
{
	struct sbx_identity who;
	struct sbx_rpc_status st;
	size_t n;

	check(count_lines(log, "\"event\":\"auth_failure\"") == 0, "no refusal audited yet");
	rpc_auth(&cfg, &tls_ok, "wrong", "/sbx.v1.Sandbox/CreateRun", &who, &st);
	check(count_lines(
		  log,
		  "\"listener\":\"tls+tcp\",\"peer\":\"192.0.2.7:41234\","
		  "\"method\":\"/sbx.v1.Sandbox/CreateRun\",\"reason\":\"invalid token\"") == 1,
	      "a refusal is audited with listener, peer, method and reason");
	check(count_lines(log, "secret") == 0 && count_lines(log, "wrong") == 0,
	      "no token, right or wrong, reaches the log");
	/* A flood within a second or two: at most 20 lines a second. */
	for (int i = 0; i < 200; i++)
		rpc_auth(&cfg, &tcp, "", "/sbx.v1.Sandbox/Health", &who, &st);
	n = count_lines(log, "\"event\":\"auth_failure\"");
	check(n >= 20 && n <= 60, "a flood of 200 refusals is rate-limited (%zu lines)", n);
}

/* A reload builds the table from the new config: a rotated token's old
 * secret is refused by it, the new one accepted, and the changes counted. */
static void test_rotation(void)
{
	struct sbx_config next = {0};
	struct rpc_auth_table *tab;
	struct sbx_identity who;
	struct sbx_rpc_status st = {0};
	unsigned int len = 0;

	next.n_tokens = 2;
	snprintf(next.tokens[0].name, sizeof(next.tokens[0].name), "alice");
	EVP_Digest("secret-alice-2", 14, next.tokens[0].sha256, &len, EVP_sha256(), NULL);
	next.tokens[1] = cfg.tokens[1]; /* bob unchanged; carol removed */
	tab = rpc_auth_table_new(&next);
	if (!check(tab != NULL, "a table from a config"))
		return;
	check(rpc_auth_table_changes(&cfg, tab) == 3,
	      "alice's hash changed (2) and carol removed (1): 3 changes");
	check(rpc_auth_table_changes(tab, tab) == 0, "a table against itself: no change");
	check(rpc_auth(tab, &tls_ok, "secret-alice", "m", &who, &st) < 0 &&
		  st.code == SBX__V1__CODE__UNAUTHENTICATED,
	      "the rotated token's old secret is refused");
	check(rpc_auth(tab, &tls_ok, "secret-alice-2", "m", &who, &st) == 0 &&
		  !strcmp(who.name, "token:alice"),
	      "its new secret is the same identity");
	check(rpc_auth(tab, &tls_ok, "secret-carol", "m", &who, &st) < 0,
	      "a removed token is refused");
	free(tab);
}

int main(void)
{
	char dir[] = "/tmp/sbx-test-auth-XXXXXX";
	char log[sizeof(dir) + 16];
	struct sbx_err err;

	add_token("alice", "secret-alice");
	add_token("bob", "secret-bob");
	add_token("carol", "secret-carol");
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	snprintf(log, sizeof(log), "%s/audit.log", dir);
	if (sbx_audit_open(log, NULL, &err) < 0) {
		fprintf(stderr, "%s\n", err.msg);
		return 1;
	}
	test_local();
	/* First, while the rate limit has seen nothing. */
	test_audit(log);
	test_identities();
	test_one_bit_off();
	test_operators();
	test_rotation();
	sbx_audit_close();
	unlink(log);
	rmdir(dir);
	return check_done();
}
