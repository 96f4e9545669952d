/* SPDX-License-Identifier: Apache-2.0 */
/* Which keys a reload (SIGHUP) cannot apply: those that shape what sbxd
 * built at start (listeners, the state directory, the helper and its
 * flags, worker threads, the connection guard's tables, the egress proxy,
 * the image store, the run registry's size, the metrics listener). sbxd names them in a "needs
 * a restart" line and otherwise keeps what it started with. */
#include "config.h"

#include <stdio.h>
#include <string.h>

static bool same_str(const char *a, const char *b)
{
	return a == b || (a && b && !strcmp(a, b));
}

static bool same_egress(const struct sbx_config_egress *a, const struct sbx_config_egress *b)
{
	if (!same_str(a->hosts_file, b->hosts_file) || !same_str(a->resolv_conf, b->resolv_conf) ||
	    a->head_seconds != b->head_seconds || a->lookup_seconds != b->lookup_seconds ||
	    a->connect_seconds != b->connect_seconds || a->idle_seconds != b->idle_seconds ||
	    a->connections_per_run != b->connections_per_run ||
	    a->connections_max != b->connections_max || a->records_per_run != b->records_per_run ||
	    a->accepts_per_run_per_second != b->accepts_per_run_per_second ||
	    a->accepts_per_identity_per_second != b->accepts_per_identity_per_second ||
	    a->n_destinations != b->n_destinations)
		return false;
	for (size_t i = 0; i < a->n_destinations; i++) {
		const struct sbx_egress_destination *x = &a->destinations[i],
						    *y = &b->destinations[i];

		if (!same_str(x->host, y->host) || x->port != y->port ||
		    x->bytes_per_second != y->bytes_per_second ||
		    x->connections_per_minute != y->connections_per_minute ||
		    x->max_concurrent != y->max_concurrent)
			return false;
	}
	return true;
}

static bool same_connections(const struct sbx_config_connections *a,
			     const struct sbx_config_connections *b)
{
	return a->per_listener == b->per_listener && a->per_peer == b->per_peer &&
	       a->new_per_peer_per_second == b->new_per_peer_per_second &&
	       a->idle_seconds == b->idle_seconds && a->message_seconds == b->message_seconds &&
	       a->first_request_seconds == b->first_request_seconds &&
	       a->pending_bytes_per_peer_mb == b->pending_bytes_per_peer_mb &&
	       a->pending_bytes_mb == b->pending_bytes_mb;
}

static bool same_list(char *const *a, size_t na, char *const *b, size_t nb)
{
	if (na != nb)
		return false;
	for (size_t i = 0; i < na; i++)
		if (!same_str(a[i], b[i]))
			return false;
	return true;
}

static void add(char *out, size_t size, size_t *n, const char *key)
{
	size_t len = strlen(out);

	(*n)++;
	if (len < size)
		snprintf(out + len, size - len, "%s%s", len ? ", " : "", key);
}

size_t sbx_config_restart_keys(const struct sbx_config *now, const struct sbx_config *next,
			       char *out, size_t size)
{
	size_t n = 0;

	if (size)
		out[0] = '\0';
	if (!same_list(now->listen, now->n_listen, next->listen, next->n_listen))
		add(out, size, &n, "listen");
	if (!same_str(now->state_dir, next->state_dir))
		add(out, size, &n, "state_dir");
	if (!same_str(now->helper, next->helper))
		add(out, size, &n, "helper");
	if (!same_str(now->cgroup_root, next->cgroup_root))
		add(out, size, &n, "cgroup_root");
	if (now->rlimit_fallback != next->rlimit_fallback)
		add(out, size, &n, "rlimit_fallback");
	if (now->host_uids_shared != next->host_uids_shared)
		add(out, size, &n, "host_uids");
	if (!same_str(now->host_id_dir, next->host_id_dir))
		add(out, size, &n, "host_id_dir");
	if (!same_list(now->input_dirs, now->n_input_dirs, next->input_dirs, next->n_input_dirs))
		add(out, size, &n, "input_dirs");
	if (now->insecure != next->insecure)
		add(out, size, &n, "insecure");
	if (now->same_host_export != next->same_host_export)
		add(out, size, &n, "same_host_export");
	if (now->same_host_record_ms != next->same_host_record_ms)
		add(out, size, &n, "same_host_record_ms");
	if (now->same_host_call_ms != next->same_host_call_ms)
		add(out, size, &n, "same_host_call_ms");
	if (now->same_host_import != next->same_host_import)
		add(out, size, &n, "same_host_import");
	if (now->exec_prepare != next->exec_prepare)
		add(out, size, &n, "exec_prepare");
	if (now->runs_max != next->runs_max)
		add(out, size, &n, "runs_max");
	if (now->workers != next->workers)
		add(out, size, &n, "workers");
	if (now->exec_fds_per_run != next->exec_fds_per_run)
		add(out, size, &n, "exec_fds_per_run");
	if (now->ipc_mode != next->ipc_mode)
		add(out, size, &n, "ipc_mode");
	if (now->max_message_bytes != next->max_message_bytes)
		add(out, size, &n, "max_message_bytes");
	if (!same_connections(&now->connections, &next->connections))
		add(out, size, &n, "connections");
	if (!same_egress(&now->egress, &next->egress))
		add(out, size, &n, "egress");
	if (!same_str(now->images.dir, next->images.dir) ||
	    now->images.allow_unpinned != next->images.allow_unpinned ||
	    now->images.max_entries != next->images.max_entries ||
	    now->images.max_bytes != next->images.max_bytes ||
	    now->images.max_file_bytes != next->images.max_file_bytes)
		add(out, size, &n, "images");
	if (!same_str(now->metrics.listen, next->metrics.listen) ||
	    now->metrics.allow_remote != next->metrics.allow_remote)
		add(out, size, &n, "metrics");
	return n;
}
