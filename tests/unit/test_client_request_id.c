/* SPDX-License-Identifier: Apache-2.0 */
/* Which calls of libsbxclient carry a request id, and that the tries of one
 * call share it: sbxd deduplicates by it (a retried Teardown gets the first
 * manifest), so Signal and Teardown must send one like CreateRun, PutInput
 * and Exec, and the calls that only read need none. Against a stand-in
 * server on an ipc socket that records each request. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>

#include "check.h"
#include "sbxclient.h"

#define MAX_SEEN 16

struct seen {
	char method[64];
	char request_id[80];
};

static struct seen seen[MAX_SEEN];
static int n_seen;
static int unavailable_left; /* answer this many requests UNAVAILABLE first */
static nng_socket rep;

static void *serve(void *arg)
{
	(void)arg;
	for (;;) {
		nng_msg *m;
		if (nng_recvmsg(rep, &m, 0) != 0)
			return NULL;
		Sbx__V1__Request *r =
		    sbx__v1__request__unpack(NULL, nng_msg_len(m), nng_msg_body(m));
		nng_msg_free(m);
		Sbx__V1__Response resp = SBX__V1__RESPONSE__INIT;
		if (r && n_seen < MAX_SEEN) {
			snprintf(seen[n_seen].method, sizeof(seen[n_seen].method), "%s",
				 r->method ? r->method : "");
			snprintf(seen[n_seen].request_id, sizeof(seen[n_seen].request_id), "%s",
				 r->request_id ? r->request_id : "");
			n_seen++;
		}
		sbx__v1__request__free_unpacked(r, NULL);
		if (unavailable_left > 0) {
			unavailable_left--;
			resp.code = SBX__V1__CODE__UNAVAILABLE;
			resp.message = "try again";
		}
		size_t len = sbx__v1__response__get_packed_size(&resp);
		if (nng_msg_alloc(&m, len) != 0)
			return NULL;
		sbx__v1__response__pack(&resp, nng_msg_body(m));
		if (nng_sendmsg(rep, m, 0) != 0)
			nng_msg_free(m);
	}
}

static void free_msg(void *m)
{
	if (m)
		protobuf_c_message_free_unpacked(m, NULL);
}

int main(void)
{
	char dir[] = "/tmp/sbx-test-request-id-XXXXXX";
	char url[128];
	struct sbx_err err;
	struct sbx_rpc_status st;
	pthread_t thread;

	if (!mkdtemp(dir))
		return 1;
	snprintf(url, sizeof(url), "ipc://%s/s.sock", dir);
	if (nng_rep0_open(&rep) != 0 || nng_listen(rep, url, NULL, 0) != 0 ||
	    pthread_create(&thread, NULL, serve, NULL) != 0)
		return 1;
	struct sbx_client_opts o = {.endpoint = url, .timeout_ms = 5000};
	sbx_client *c = sbx_client_open(&o, &err);
	if (!check(c != NULL, "client opens %s", url))
		return check_done();

	free_msg(sbx_health(c, &st));
	free_msg(sbx_status(c, "r1", &st));
	free_msg(sbx_signal(c, "r1", "e1", 9, &st));
	free_msg(sbx_teardown(c, "r1", &st));
	check(n_seen == 4, "four calls, four requests (%d)", n_seen);
	check(n_seen > 0 && !*seen[0].request_id, "Health carries no request id");
	check(n_seen > 1 && !*seen[1].request_id, "Status carries no request id");
	check(n_seen > 2 && strlen(seen[2].request_id) == 32, "Signal carries a request id (%s)",
	      seen[2].request_id);
	check(n_seen > 3 && strlen(seen[3].request_id) == 32, "Teardown carries a request id (%s)",
	      seen[3].request_id);
	check(n_seen > 3 && strcmp(seen[2].request_id, seen[3].request_id), "each call its own id");

	/* UNAVAILABLE is retried: both tries of one Teardown send one id. */
	n_seen = 0;
	unavailable_left = 1;
	void *r = sbx_teardown(c, "r1", &st);
	check(r != NULL && st.code == SBX__V1__CODE__OK,
	      "a Teardown answered UNAVAILABLE once "
	      "succeeds on the retry (%s)",
	      st.err.msg);
	free_msg(r);
	check(n_seen == 2 && *seen[0].request_id &&
		  !strcmp(seen[0].request_id, seen[1].request_id) &&
		  !strcmp(seen[0].method, "/sbx.v1.Sandbox/Teardown"),
	      "its two tries carry the same request id (%s, %s)", seen[0].request_id,
	      n_seen > 1 ? seen[1].request_id : "-");

	/* A caller's own id is sent as given. */
	n_seen = 0;
	Sbx__V1__SignalRequest sreq = SBX__V1__SIGNAL_REQUEST__INIT;
	struct sbx_call_opts co = {.request_id = "my-signal-1"};
	ProtobufCMessage *resp = NULL;
	sreq.run_id = "r1";
	sreq.exec_id = "e1";
	sreq.signal = 15;
	sbx_client_call_opts(c, "/sbx.v1.Sandbox/Signal", &sreq.base,
			     &sbx__v1__signal_response__descriptor, &resp, &co, &st);
	free_msg(resp);
	check(n_seen == 1 && !strcmp(seen[0].request_id, "my-signal-1"),
	      "sbx_call_opts.request_id is sent as given (%s)", seen[0].request_id);

	sbx_client_close(c);
	nng_close(rep);
	pthread_join(thread, NULL);
	char sock[160];
	snprintf(sock, sizeof(sock), "%s/s.sock", dir);
	unlink(sock);
	rmdir(dir);
	return check_done();
}
