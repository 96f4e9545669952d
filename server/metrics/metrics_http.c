/* SPDX-License-Identifier: Apache-2.0 */
/* The metrics listener: nng's own HTTP server (libnng's supplemental
 * http, nng_http_server_hold) with one handler, GET /metrics. nng answers
 * 404 for another path and 405 for another method on /metrics itself, and
 * HEAD as GET without the body.
 *
 * What nng 1.5.2's server bounds and what it does not: a request head
 * must fit its 8 KiB read buffer (else 400), a body is refused (the
 * handler collects none); it bounds neither the connections it holds nor
 * how long one may sit idle. Those are the connection guard's
 * (server/rpc/conn_guard.c: a handful of connections, each shut down
 * after a fixed lifetime; docs/operator/metrics.md), which sees this
 * listener's accepts as it sees the RPC listeners'. The handler runs on
 * nng's thread and never blocks: the exposition is made from atomics and
 * the collectors' quick samples (metrics.c), in one allocation of at most
 * SBX_METRICS_TEXT_MAX. */
#include "metrics.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nng/nng.h>
#include <nng/supplemental/http/http.h>

#include "nng_err.h"

struct sbx_metrics_http {
	nng_http_server *server;
	bool started;
	int port;
	char url[128];
};

static void scrape(nng_aio *aio)
{
	nng_http_res *res = NULL;
	size_t len = 0;
	char *text = sbx_metrics_render(&len);
	int rv;

	if (!text) {
		sbx_metrics_add(SBX_M_SCRAPE_REFUSED, 0, 1);
		rv = nng_http_res_alloc_error(&res, NNG_HTTP_STATUS_SERVICE_UNAVAILABLE);
	} else if ((rv = nng_http_res_alloc(&res)) == 0 &&
		   (rv = nng_http_res_set_header(
			res, "Content-Type", "text/plain; version=0.0.4; charset=utf-8")) == 0) {
		rv = nng_http_res_copy_data(res, text, len);
	}
	free(text);
	if (rv != 0) {
		if (res)
			nng_http_res_free(res);
		nng_aio_finish(aio, rv); /* nng closes the connection */
		return;
	}
	nng_aio_set_output(aio, 0, res);
	nng_aio_finish(aio, 0);
}

int sbx_metrics_http_start(const char *listen, struct sbx_metrics_http **out, struct sbx_err *err)
{
	struct sbx_metrics_http *h;
	nng_http_handler *handler = NULL;
	nng_url *url = NULL;
	nng_sockaddr sa;
	char spec[96];
	int rv;

	*out = NULL;
	if (snprintf(spec, sizeof(spec), "http://%s", listen) >= (int)sizeof(spec))
		return sbx_fail(err, "metrics.listen: too long");
	if (!(h = calloc(1, sizeof(*h))))
		return sbx_fail_errnum(err, ENOMEM, "metrics");
	if ((rv = nng_url_parse(&url, spec)) != 0) {
		free(h);
		return sbx_fail_nng(err, rv, "metrics.listen %s", listen);
	}
	rv = nng_http_server_hold(&h->server, url);
	nng_url_free(url);
	if (rv != 0) {
		free(h);
		return sbx_fail_nng(err, rv, "metrics.listen %s", listen);
	}
	if ((rv = nng_http_handler_alloc(&handler, "/metrics", scrape)) != 0 ||
	    (rv = nng_http_handler_set_method(handler, "GET")) != 0 ||
	    (rv = nng_http_handler_collect_body(handler, false, 0)) != 0 ||
	    (rv = nng_http_server_add_handler(h->server, handler)) != 0) {
		if (handler)
			nng_http_handler_free(handler);
		sbx_metrics_http_stop(h);
		return sbx_fail_nng(err, rv, "metrics.listen %s: its handler", listen);
	}
	if ((rv = nng_http_server_start(h->server)) != 0) {
		sbx_metrics_http_stop(h);
		return sbx_fail_nng(err, rv, "metrics.listen %s", listen);
	}
	h->started = true;
	if ((rv = nng_http_server_get_addr(h->server, &sa)) != 0) {
		sbx_metrics_http_stop(h);
		return sbx_fail_nng(err, rv, "metrics.listen %s: its address", listen);
	}
	/* nng keeps the port in network byte order. */
	h->port = sa.s_family == NNG_AF_INET6 ? ntohs(sa.s_in6.sa_port) : ntohs(sa.s_in.sa_port);
	snprintf(spec, sizeof(spec), "%s", listen);
	char *colon = strrchr(spec, ':');

	if (colon)
		*colon = '\0';
	snprintf(h->url, sizeof(h->url), "http://%s:%d/metrics", spec, h->port);
	*out = h;
	return 0;
}

int sbx_metrics_http_port(const struct sbx_metrics_http *h)
{
	return h ? h->port : 0;
}

const char *sbx_metrics_http_url(const struct sbx_metrics_http *h)
{
	return h ? h->url : "";
}

void sbx_metrics_http_stop(struct sbx_metrics_http *h)
{
	if (!h)
		return;
	if (h->started)
		nng_http_server_stop(h->server);
	/* The last release frees the server and its handlers. */
	nng_http_server_release(h->server);
	free(h);
}
