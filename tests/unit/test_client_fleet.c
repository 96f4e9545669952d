/* SPDX-License-Identifier: Apache-2.0 */
/* libsbxclient's several-host parts that need no server: the endpoint
 * list's syntax, run handles, DNS SRV answers (built here byte by byte,
 * with name compression, and broken ones), the placement score, and a
 * fleet of hosts that do not answer (each named in the error).
 *
 * With --drive it is instead one long-lived fleet handle that sbxd.fleet
 * drives over a pipe while it changes the DNS records (see drive()). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "sbxclient.h"

static void endpoints(void)
{
	char *v[8];
	size_t n = 0;
	struct sbx_err err;

	check(sbx_endpoints_split(" tls+tcp://a:1, tls+tcp://b:2 ,dns+srv://_sbx._tcp.x.test", v, 8,
				  &n, &err) == 0 &&
		  n == 3 && !strcmp(v[0], "tls+tcp://a:1") && !strcmp(v[1], "tls+tcp://b:2") &&
		  !strcmp(v[2], "dns+srv://_sbx._tcp.x.test"),
	      "a comma list with spaces splits into three");
	n += 0;
	check(sbx_endpoints_split("ipc:///run/x.sock", v, 8, &n, &err) == 0 && n == 4,
	      "a second list counts on");
	sbx_endpoints_free(v, n);
	n = 0;
	check(sbx_endpoints_split("tls+tcp://a:1,,tls+tcp://b:2", v, 8, &n, &err) < 0 &&
		  strstr(err.msg, "empty entry") && n == 0,
	      "an empty entry is refused: %s", err.msg);
	check(sbx_endpoints_split("http://a:1", v, 8, &n, &err) < 0 &&
		  strstr(err.msg, "http://a:1"),
	      "an unknown scheme is refused naming it: %s", err.msg);
	check(sbx_endpoints_split("dns+srv://sbx.test", v, 8, &n, &err) < 0 &&
		  strstr(err.msg, "_SERVICE._tcp"),
	      "dns+srv needs _service._tcp.NAME: %s", err.msg);
	check(sbx_endpoints_split("dns+srv://_sbx._tcp.a..b", v, 8, &n, &err) < 0,
	      "a name with an empty label is refused");
	check(sbx_endpoints_split("tls+tcp://a:1,tls+tcp://b:1,tls+tcp://c:1", v, 2, &n, &err) <
		      0 &&
		  strstr(err.msg, "more than 2"),
	      "more endpoints than room are refused: %s", err.msg);

	char name[SBX_HOST_MAX];
	sbx_host_name_of("tls+tcp://h1.test:7443", name, sizeof(name));
	check(!strcmp(name, "h1.test:7443"), "a tls+tcp host is named HOST:PORT: %s", name);
	sbx_host_name_of("ipc:///run/sbx/sbxd.sock", name, sizeof(name));
	check(!strcmp(name, "ipc:///run/sbx/sbxd.sock"), "an ipc host by its URL");

	struct sbx_run_ref r;
	check(sbx_run_ref_parse("r-abc@h1.test:7443", &r, &err) == 0 &&
		  !strcmp(r.run_id, "r-abc") && !strcmp(r.host, "h1.test:7443"),
	      "RUN@HOST:PORT splits");
	check(sbx_run_ref_parse("r-abc", &r, &err) == 0 && !r.host[0], "a bare id has no host");
	check(sbx_run_ref_parse("@h:1", &r, &err) < 0, "an empty id is refused");
	check(sbx_run_ref_parse("r@", &r, &err) < 0, "an empty host is refused");
	check(sbx_run_ref_parse("r@a@b", &r, &err) < 0, "two @ are refused");
}

/* A DNS message builder: header, one question, answers. */
struct msg {
	unsigned char b[1024];
	size_t n;
};

static void put16(struct msg *m, unsigned v)
{
	m->b[m->n++] = (unsigned char)(v >> 8);
	m->b[m->n++] = (unsigned char)v;
}

static void put32(struct msg *m, unsigned v)
{
	put16(m, v >> 16);
	put16(m, v & 0xffff);
}

static void put_name(struct msg *m, const char *dotted)
{
	while (*dotted) {
		const char *dot = strchr(dotted, '.');
		size_t len = dot ? (size_t)(dot - dotted) : strlen(dotted);
		m->b[m->n++] = (unsigned char)len;
		memcpy(m->b + m->n, dotted, len);
		m->n += len;
		dotted += len + (dot ? 1 : 0);
	}
	m->b[m->n++] = 0;
}

static void header(struct msg *m, unsigned rcode, unsigned an)
{
	m->n = 0;
	put16(m, 0x1234);
	put16(m, 0x8180 | rcode);
	put16(m, 1);
	put16(m, an);
	put16(m, 0);
	put16(m, 0);
	put_name(m, "_sbx._tcp.sbx.test"); /* at offset 12 */
	put16(m, 33);
	put16(m, 1);
}

/* An SRV answer whose owner points back at the question (0xc00c). */
static void srv(struct msg *m, unsigned ttl, unsigned prio, unsigned port, const char *target,
		bool compress_target)
{
	put16(m, 0xc00c);
	put16(m, 33);
	put16(m, 1);
	put32(m, ttl);
	size_t rdlen_at = m->n;
	put16(m, 0);
	put16(m, prio);
	put16(m, 10);
	put16(m, port);
	if (compress_target) { /* "h3." + the question's "sbx.test" (offset 12 + 10) */
		m->b[m->n++] = 2;
		memcpy(m->b + m->n, "h3", 2);
		m->n += 2;
		put16(m, 0xc000 | 22);
	} else {
		put_name(m, target);
	}
	size_t rdlen = m->n - rdlen_at - 2;
	m->b[rdlen_at] = (unsigned char)(rdlen >> 8);
	m->b[rdlen_at + 1] = (unsigned char)rdlen;
}

static void srv_answers(void)
{
	struct sbx_srv_record r[8];
	size_t n = 0;
	struct sbx_err err;
	struct msg m;

	header(&m, 0, 4);
	srv(&m, 30, 0, 7443, "h1.sbx.test", false);
	srv(&m, 5, 1, 7444, NULL, true);
	srv(&m, 30, 0, 0, "h2.sbx.test", false); /* port 0: no host */
	srv(&m, 30, 0, 7445, "", false);	 /* ".": no service */
	check(sbx_srv_parse(m.b, m.n, r, 8, &n, &err) == 0 && n == 2,
	      "two usable records of four (%s)", n == 0 ? err.msg : "");
	check(n == 2 && !strcmp(r[0].target, "h1.sbx.test") && r[0].port == 7443 && r[0].ttl == 30,
	      "the first: target, port, ttl");
	check(n == 2 && !strcmp(r[1].target, "h3.sbx.test") && r[1].port == 7444 && r[1].ttl == 5 &&
		  r[1].priority == 1,
	      "a compressed target is expanded: %s", n == 2 ? r[1].target : "");
	check(sbx_srv_parse(m.b, m.n, r, 1, &n, &err) < 0 && strstr(err.msg, "more than 1"),
	      "more records than room is an error: %s", err.msg);
	check(sbx_srv_parse(m.b, m.n - 3, r, 8, &n, &err) < 0 && strstr(err.msg, "cut short"),
	      "a cut answer is refused: %s", err.msg);
	for (size_t cut = 0; cut < m.n; cut++)
		(void)sbx_srv_parse(m.b, cut, r, 8, &n, &err); /* never reads past: ASan */
	check(true, "every prefix of an answer parses or fails");

	header(&m, 3, 0);
	check(sbx_srv_parse(m.b, m.n, r, 8, &n, &err) < 0 && strstr(err.msg, "NXDOMAIN"),
	      "NXDOMAIN is named: %s", err.msg);
	header(&m, 0, 1);
	size_t at = m.n;
	srv(&m, 30, 0, 7443, "h1.sbx.test", false);
	m.b[at] = 0xc0; /* owner pointer to itself: a loop */
	m.b[at + 1] = (unsigned char)at;
	check(sbx_srv_parse(m.b, m.n, r, 8, &n, &err) < 0, "a compression loop is refused");
}

static void scores(void)
{
	struct sbx_host_load idle = {.serving = true,
				     .allowed_cpu_millis = 4000,
				     .allowed_memory_mb = 4000,
				     .runs_max = 10,
				     .run_slots_free = 10,
				     .identity_run_slots_free = 8};
	struct sbx_host_load busy = idle;
	busy.committed_cpu_millis = 3000;
	busy.committed_memory_mb = 1000;
	busy.run_slots_free = 7;
	check(sbx_placement_score(&idle) < sbx_placement_score(&busy),
	      "an idle host scores better");

	struct sbx_host_load pending = idle;
	pending.pending = 5;
	check(sbx_placement_score(&pending) > sbx_placement_score(&idle),
	      "this client's own pending creates count");
	struct sbx_host_load draining = idle;
	draining.serving = false;
	check(sbx_placement_score(&draining) < 0, "a draining host cannot take a run");
	struct sbx_host_load full = idle;
	full.run_slots_free = 0;
	check(sbx_placement_score(&full) < 0, "a host without a slot cannot");
	struct sbx_host_load mine_full = idle;
	mine_full.identity_run_slots_free = 2;
	mine_full.pending = 2;
	check(sbx_placement_score(&mine_full) < 0, "nor one where this identity has none left");
	struct sbx_host_load memory = idle;
	memory.committed_memory_mb = 3900;
	memory.run_slots_free = 9;
	struct sbx_host_load slots = idle;
	slots.run_slots_free = 5;
	slots.committed_memory_mb = 100;
	check(sbx_placement_score(&memory) > sbx_placement_score(&slots),
	      "the fullest resource decides (memory 97%% vs slots 60%%)");
	struct sbx_host_load unknown = {
	    .serving = true, .run_slots_free = 3, .identity_run_slots_free = 3, .runs_max = 4};
	check(sbx_placement_score(&unknown) >= 0, "no capacity numbers: slots alone");
}

static void dead_hosts(void)
{
	const char *eps[] = {"ipc:///nonexistent/sbx-a.sock,ipc:///nonexistent/sbx-b.sock",
			     "ipc:///nonexistent/sbx-c.sock"};
	struct sbx_client_opts o = {.timeout_ms = 2000, .retries = -1};
	struct sbx_err err;
	struct sbx_rpc_status st;
	struct sbx_run_ref ref;
	sbx_fleet *f = sbx_fleet_open(eps, 2, &o, NULL, &err);

	check(f != NULL, "a fleet of three opens without dialing");
	if (!f)
		return;
	const char *names[8];
	size_t n = sbx_fleet_hosts(f, names, 8, &st);
	check(n == 3, "three hosts listed");
	Sbx__V1__CreateRunRequest req = SBX__V1__CREATE_RUN_REQUEST__INIT;
	req.policy_json = "{\"image\": \"host\"}";
	Sbx__V1__CreateRunResponse *r = sbx_fleet_create_run(f, &req, &ref, &st);
	check(!r && st.code == SBX__V1__CODE__UNAVAILABLE, "nobody answers: UNAVAILABLE (%s)",
	      st.err.msg);
	check(strstr(st.err.msg, "sbx-a.sock") && strstr(st.err.msg, "sbx-b.sock") &&
		  strstr(st.err.msg, "sbx-c.sock"),
	      "the error names every host asked");
	sbx_client *c = sbx_fleet_client(f, "ipc:///nonexistent/sbx-b.sock", &st);
	check(c && !strcmp(sbx_client_endpoint(c), "ipc:///nonexistent/sbx-b.sock"),
	      "a handle's host gets that host's client");
	Sbx__V1__StatusResponse *s = c ? sbx_status(c, "r-1", &st) : NULL;
	check(!s && st.code == SBX__V1__CODE__UNAVAILABLE && strstr(st.err.msg, "sbx-b.sock"),
	      "a call for a run on a dead host is UNAVAILABLE naming it: %s", st.err.msg);
	sbx_fleet_close(f);
}

/* A black hole on loopback: a listener that never accepts, whose backlog
 * is full, so that the kernel drops further SYNs and a connect hangs. */
static void black_hole(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	int l = socket(AF_INET, SOCK_STREAM, 0), fill[4];
	char url[64];

	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 0) < 0 ||
	    getsockname(l, (struct sockaddr *)&a, &len) < 0) {
		check(false, "a listener for the black hole");
		return;
	}
	for (int i = 0; i < 4; i++) { /* fills the backlog; later SYNs are dropped */
		fill[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
		(void)connect(fill[i], (struct sockaddr *)&a, sizeof(a));
	}
	snprintf(url, sizeof(url), "tcp://127.0.0.1:%u", ntohs(a.sin_port));
	struct sbx_client_opts o = {
	    .endpoint = url, .timeout_ms = 60000, .connect_timeout_ms = 300, .retries = 2};
	struct sbx_err err;
	struct sbx_rpc_status st;
	sbx_client *c = sbx_client_open(&o, &err);
	Sbx__V1__HealthResponse *h = c ? sbx_health(c, &st) : NULL;
	check(!h && st.code == SBX__V1__CODE__UNAVAILABLE && strstr(st.err.msg, "within 300 ms") &&
		  strstr(st.err.msg, "connect timeout"),
	      "a host that never completes a connect is UNAVAILABLE after the connect timeout, "
	      "not the call's: %s",
	      st.err.msg);
	sbx_client_close(c);
	for (int i = 0; i < 4; i++)
		close(fill[i]);
	close(l);
}

/* One sbx_fleet for the process's life, driven a line at a time from
 * stdin, one answer line each on stdout:
 *   hosts            -> "hosts NAME..." (sbx_fleet_hosts)
 *   create POLICY    -> "run RUN_ID@HOST" (sbx_fleet_create_run)
 *   status HANDLE    -> "ok RUN_ID" (Status on the handle's host)
 *   teardown HANDLE  -> "ok RUN_ID" (Teardown there)
 * a failure as "error CODE MESSAGE". The token comes from $SBX_TOKEN. */
static int drive(const char *endpoint, const char *ca, const char *cert, const char *key)
{
	struct sbx_client_opts o = {
	    .tls_ca = ca, .tls_cert = cert, .tls_key = key, .token = getenv("SBX_TOKEN")};
	struct sbx_err err;
	sbx_fleet *f = sbx_fleet_open(&endpoint, 1, &o, NULL, &err);
	char line[8192];

	if (!f) {
		fprintf(stderr, "test_client_fleet: %s\n", err.msg);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	while (fgets(line, sizeof(line), stdin)) {
		struct sbx_rpc_status st = {0};
		struct sbx_run_ref ref = {0};
		char *arg = strchr(line, ' ');

		line[strcspn(line, "\n")] = '\0';
		if (arg)
			*arg++ = '\0';
		if (!strcmp(line, "hosts")) {
			const char *names[SBX_FLEET_MAX_HOSTS];
			size_t n = sbx_fleet_hosts(f, names, SBX_FLEET_MAX_HOSTS, &st);
			printf("hosts");
			for (size_t i = 0; i < n; i++)
				printf(" %s", names[i]);
			printf("\n");
			continue;
		}
		if (!strcmp(line, "create") && arg) {
			Sbx__V1__CreateRunRequest cr = SBX__V1__CREATE_RUN_REQUEST__INIT;
			cr.policy_json = arg;
			Sbx__V1__CreateRunResponse *r = sbx_fleet_create_run(f, &cr, &ref, &st);
			if (r) {
				printf("run %s@%s\n", ref.run_id, ref.host);
				sbx__v1__create_run_response__free_unpacked(r, NULL);
			} else {
				printf("error %s %s\n", sbx_code_name(st.code), st.err.msg);
			}
			continue;
		}
		bool status = !strcmp(line, "status");
		if ((!status && strcmp(line, "teardown")) || !arg ||
		    sbx_run_ref_parse(arg, &ref, &st.err) < 0 || !ref.host[0]) {
			printf("error INVALID_ARGUMENT %s: hosts, create POLICY, status HANDLE "
			       "or teardown HANDLE expected\n",
			       line);
			continue;
		}
		sbx_client *c = sbx_fleet_client(f, ref.host, &st);
		ProtobufCMessage *m = NULL;
		if (c)
			m = status ? (ProtobufCMessage *)sbx_status(c, ref.run_id, &st)
				   : (ProtobufCMessage *)sbx_teardown(c, ref.run_id, &st);
		if (m) {
			printf("ok %s\n", ref.run_id);
			protobuf_c_message_free_unpacked(m, NULL);
		} else {
			printf("error %s %s\n", sbx_code_name(st.code), st.err.msg);
		}
	}
	sbx_fleet_close(f);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 6 && !strcmp(argv[1], "--drive"))
		return drive(argv[2], argv[3], argv[4], argv[5]);
	endpoints();
	srv_answers();
	scores();
	dead_hosts();
	black_hole();
	return check_done();
}
