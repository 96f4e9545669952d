/* SPDX-License-Identifier: Apache-2.0 */
/* The egress proxy's records on the wire (runs_egress.h). The proxy keeps
 * its own records (egress.h); the budgets here are of the packed answer,
 * so they are measured on the protobuf messages. */
#include "runs_egress.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

static Sbx__V1__EgressRecord *record_message(const struct sbx_egress_record *r)
{
	Sbx__V1__EgressRecord *m = malloc(sizeof(*m));

	if (!m)
		return NULL;
	sbx__v1__egress_record__init(m);
	m->time_unix_ms = r->time_unix_ms;
	m->port = r->port;
	m->allowed = r->allowed;
	m->bytes_out = r->bytes_out;
	m->bytes_in = r->bytes_in;
	m->connection = r->connection;
	m->lookup_ms = r->lookup_ms;
	m->connect_ms = r->connect_ms;
	m->duration_ms = r->duration_ms;
	m->open = r->open;
	m->status = r->status;
	m->host = strdup(r->host);
	m->reason = strdup(r->reason);
	m->address = strdup(r->address);
	m->method = strdup(r->method);
	if (!m->host || !m->reason || !m->address || !m->method) {
		sbx__v1__egress_record__free_unpacked(m, NULL);
		return NULL;
	}
	return m;
}

/* What one element of a repeated message field takes on the wire at most:
 * its tag (2 bytes covers field numbers up to 2047), its length, its body. */
static size_t element_bytes(const ProtobufCMessage *m)
{
	size_t len = protobuf_c_message_get_packed_size(m), n = 1;

	for (size_t v = len; v >= 0x80; v >>= 7)
		n++;
	return 2 + n + len;
}

static bool is_other(const Sbx__V1__EgressDestination *m)
{
	return !strcmp(m->host, SBX_EGRESS_OTHER_HOST) && m->port == 0;
}

static void fold_into(Sbx__V1__EgressDestination *other, const Sbx__V1__EgressDestination *m)
{
	other->connections += m->connections;
	other->denied += m->denied;
	other->bytes_out += m->bytes_out;
	other->bytes_in += m->bytes_in;
}

/* Keeps the rows of v that fit in budget bytes (those with allowed
 * connections first: what left the box before what was only asked for,
 * each in the order asked) and sums the others into the "(other)" row,
 * made at the end if the run had none. */
static int destinations_fit(Sbx__V1__EgressDestination **v, size_t *n, size_t budget,
			    uint32_t *folded)
{
	/* One more: the "(other)" row it may add. */
	_cleanup_free_ bool *keep = calloc(*n + 1, sizeof(*keep));
	size_t total = 0, used = 0, k = 0;
	Sbx__V1__EgressDestination *other = NULL;

	*folded = 0;
	if (!keep)
		return -1;
	for (size_t i = 0; i < *n; i++)
		total += element_bytes(&v[i]->base);
	if (total <= budget)
		return 0;
	/* Room for the "(other)" row, whatever it sums. */
	budget = budget > EGRESS_OTHER_ROW_MAX ? budget - EGRESS_OTHER_ROW_MAX : 0;
	for (int pass = 0; pass < 2; pass++)
		for (size_t i = 0; i < *n; i++) {
			size_t b = element_bytes(&v[i]->base);

			if ((v[i]->connections > 0) != (pass == 0) || used + b > budget)
				continue;
			if (is_other(v[i]))
				continue;
			keep[i] = true;
			used += b;
		}
	for (size_t i = 0; i < *n; i++)
		if (!keep[i] && is_other(v[i]))
			other = v[i];
	if (!other) {
		/* v has a slot past *n for it (destinations). */
		if (!(other = malloc(sizeof(*other))))
			return -1;
		sbx__v1__egress_destination__init(other);
		if (!(other->host = strdup(SBX_EGRESS_OTHER_HOST))) {
			free(other);
			return -1;
		}
		v[(*n)++] = other;
	}
	for (size_t i = 0; i < *n; i++) {
		if (keep[i] || v[i] == other)
			continue;
		fold_into(other, v[i]);
		sbx__v1__egress_destination__free_unpacked(v[i], NULL);
		(*folded)++;
	}
	for (size_t i = 0; i < *n; i++)
		if (keep[i] && v[i] != other)
			v[k++] = v[i];
	v[k++] = other;
	*n = k;
	return 0;
}

/* The report's destinations as messages, in at most max_bytes
 * (destinations_fit). */
static int destinations(const struct sbx_egress_report *rep, size_t max_bytes,
			Sbx__V1__EgressDestination ***out, size_t *n, uint32_t *folded)
{
	/* One slot more: an "(other)" row made by folding. */
	Sbx__V1__EgressDestination **v = calloc(rep->n_totals + 1, sizeof(*v));

	*out = v;
	*n = 0;
	*folded = 0;
	if (!v)
		return -1;
	for (size_t i = 0; i < rep->n_totals; i++) {
		const struct sbx_egress_total *t = &rep->totals[i];
		Sbx__V1__EgressDestination *m = malloc(sizeof(*m));

		if (!m)
			return -1;
		sbx__v1__egress_destination__init(m);
		v[(*n)++] = m;
		if (!(m->host = strdup(t->host)))
			return -1;
		m->port = t->port;
		m->connections = t->connections;
		m->denied = t->denied;
		m->bytes_out = t->bytes_out;
		m->bytes_in = t->bytes_in;
	}
	return destinations_fit(v, n, max_bytes, folded);
}

static int status_fill(const struct sbx_egress_report *rep, Sbx__V1__StatusResponse *resp,
		       size_t max_bytes)
{
	size_t used = 0;
	char **alerts;

	/* The destinations first, in half of the budget; the records in
	 * what they leave. */
	if (destinations(rep, max_bytes / 2, &resp->egress_destinations,
			 &resp->n_egress_destinations, &resp->egress_destinations_folded) < 0)
		return -1;
	for (size_t i = 0; i < resp->n_egress_destinations; i++)
		used += element_bytes(&resp->egress_destinations[i]->base);
	resp->egress = calloc(rep->n_records ? rep->n_records : 1, sizeof(*resp->egress));
	if (!resp->egress)
		return -1;
	/* The newest first, while they fit; placed oldest first below. */
	for (size_t i = 0; i < rep->n_records; i++) {
		Sbx__V1__EgressRecord *m = record_message(&rep->records[rep->n_records - 1 - i]);
		size_t b;

		if (!m)
			return -1;
		b = element_bytes(&m->base);
		if (used + b > max_bytes) {
			sbx__v1__egress_record__free_unpacked(m, NULL);
			break;
		}
		used += b;
		resp->egress[resp->n_egress++] = m;
	}
	for (size_t i = 0; i < resp->n_egress / 2; i++) {
		Sbx__V1__EgressRecord *t = resp->egress[i];

		resp->egress[i] = resp->egress[resp->n_egress - 1 - i];
		resp->egress[resp->n_egress - 1 - i] = t;
	}
	resp->egress_records_dropped = rep->records_dropped + (rep->n_records - resp->n_egress);
	alerts = realloc(resp->alerts, (resp->n_alerts + rep->n_alerts + 1) * sizeof(char *));
	if (!alerts)
		return -1;
	resp->alerts = alerts;
	for (size_t i = 0; i < rep->n_alerts; i++) {
		if (!(alerts[resp->n_alerts] = strdup(rep->alerts[i])))
			return -1;
		resp->n_alerts++;
	}
	return 0;
}

int runs_egress_status(struct sbx_egress_run *er, Sbx__V1__StatusResponse *resp, size_t max_bytes,
		       struct sbx_err *err)
{
	struct sbx_egress_report rep;
	int rc;

	if (sbx_egress_run_report(er, &rep, err) < 0)
		return sbx_fail_errnum(err, ENOMEM, "egress status");
	rc = status_fill(&rep, resp, max_bytes);
	sbx_egress_report_free(&rep);
	return rc < 0 ? sbx_fail_errnum(err, ENOMEM, "egress status") : 0;
}

int runs_egress_destinations(struct sbx_egress_run *er, size_t max_bytes,
			     Sbx__V1__EgressDestination ***out, size_t *n, uint32_t *folded,
			     struct sbx_err *err)
{
	struct sbx_egress_report rep;
	int rc;

	*out = NULL;
	*n = 0;
	*folded = 0;
	if (sbx_egress_run_report(er, &rep, err) < 0)
		return sbx_fail_errnum(err, ENOMEM, "egress destinations");
	rc = destinations(&rep, max_bytes, out, n, folded);
	sbx_egress_report_free(&rep);
	if (rc < 0) {
		for (size_t i = 0; *out && i < *n; i++)
			sbx__v1__egress_destination__free_unpacked((*out)[i], NULL);
		free(*out);
		*out = NULL;
		*n = 0;
		return sbx_fail_errnum(err, ENOMEM, "egress destinations");
	}
	return 0;
}
