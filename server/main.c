/* SPDX-License-Identifier: Apache-2.0 */
/* sbxd: the Sandbox RPC service. Reads its configuration, cleans up after a
 * crashed predecessor, listens. SIGHUP reloads the configuration (what can
 * change without touching a run) and reopens the audit log. SIGTERM or
 * SIGINT drains: new runs are refused, the runs already there go on until
 * their callers tear them down, they are swept, or drain_seconds pass; then
 * what is left is torn down, the socket closes and sbxd exits 0. A second
 * SIGTERM or SIGINT tears every run down at once. */
#include "chunk_malloc.h"
#include "realroot.h"
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "audit.h"
#include "clock.h"
#include "config.h"
#include "egress.h"
#include "listen_url.h"
#include "metrics.h"
#include "nng_epipe.h"
#include "rpc.h"
#include "runs.h"
#include "util.h"

/* clang-format off */
static const char usage[] =
	"usage: sbxd [--config FILE] [--listen URL]... [--state-dir DIR] [--cgroup-root PATH]\n"
	"            [--log FILE] [--allow-root]\n"
	"       sbxd image [--config FILE] [--state-dir DIR] import|list|inspect|rm ...\n"
	"\n"
	"The sbx Sandbox service: runs untrusted commands in sandboxes for callers on\n"
	"this host (ipc://) and others (tls+tcp://, mutual TLS plus a bearer token).\n"
	"Flags override the configuration file.\n"
	"\n"
	"Signals: SIGTERM or SIGINT drains (no new runs; runs already there go on\n"
	"until they end or drain_seconds pass, then are torn down) and exits 0; a\n"
	"second one stops at once. SIGHUP re-reads the configuration file (tokens,\n"
	"TLS files, limits, quotas; other keys need a restart) and reopens the log.\n"
	"\n"
	"  --config FILE       JSON configuration (see sbxd.json(5))\n"
	"  --listen URL        ipc://PATH, tls+tcp://HOST:PORT or tcp://HOST:PORT (needs\n"
	"                      insecure: true); repeatable; replaces the file's list\n"
	"                      (default: ipc:///run/sbx/sbxd.sock)\n"
	"  --state-dir DIR     per-run state (default: /var/lib/sbx)\n"
	"  --cgroup-root PATH  delegated cgroup subtree, passed to sbx-helper\n"
	"  --log FILE          the audit log, JSON lines (default: stderr)\n"
	"  --allow-root        run even as real root (every guarantee is weaker)\n"
	"  -h, --help          this text\n"
	"  --version           print the version\n"
	"\n"
	"sbxd image manages the image store policies pin their images in (see\n"
	"sbxd image --help).\n";
/* clang-format on */

enum {
	OPT_CONFIG = 256,
	OPT_LISTEN,
	OPT_STATE_DIR,
	OPT_CGROUP_ROOT,
	OPT_LOG,
	OPT_ALLOW_ROOT,
	OPT_VERSION
};

/* clang-format off */
static const struct option long_opts[] = {
	{"config", required_argument, NULL, OPT_CONFIG},
	{"listen", required_argument, NULL, OPT_LISTEN},
	{"state-dir", required_argument, NULL, OPT_STATE_DIR},
	{"cgroup-root", required_argument, NULL, OPT_CGROUP_ROOT},
	{"log", required_argument, NULL, OPT_LOG},
	{"allow-root", no_argument, NULL, OPT_ALLOW_ROOT},
	{"help", no_argument, NULL, 'h'},
	{"version", no_argument, NULL, OPT_VERSION},
	{0},
};
/* clang-format on */

struct flags {
	const char *config;
	struct sbx_config_flags settings; /* over the file's */
	bool allow_root;
};

__attribute__((format(printf, 2, 3))) static int fail(int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("sbxd: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	return code;
}

/* The error that stops sbxd, as its last word. */
static int fail_with(const struct sbx_err *err)
{
	fprintf(stderr, "sbxd: %s\n", err->msg);
	return 1;
}

/* 0: parsed; 1: exit 0 now (--help, --version); 2: usage error. */
static int parse_flags(int argc, char **argv, struct flags *f)
{
	int c;

	while ((c = getopt_long(argc, argv, "h", long_opts, NULL)) != -1) {
		switch (c) {
		case OPT_CONFIG:
			f->config = optarg;
			break;
		case OPT_LISTEN:
			if (f->settings.n_listen == SBX_CONFIG_MAX_LISTEN) {
				fail(2, "at most %d --listen", SBX_CONFIG_MAX_LISTEN);
				return 2;
			}
			f->settings.listen[f->settings.n_listen++] = optarg;
			break;
		case OPT_STATE_DIR:
			f->settings.state_dir = optarg;
			break;
		case OPT_CGROUP_ROOT:
			f->settings.cgroup_root = optarg;
			break;
		case OPT_LOG:
			f->settings.log = optarg;
			break;
		case OPT_ALLOW_ROOT:
			f->allow_root = true;
			break;
		case 'h':
			fputs(usage, stdout);
			return 1;
		case OPT_VERSION:
			puts("sbxd " SBX_VERSION);
			return 1;
		default:
			fail(2, "bad option; see sbxd --help");
			return 2;
		}
	}
	if (optind < argc) {
		fail(2, "unexpected argument '%s'; see sbxd --help", argv[optind]);
		return 2;
	}
	return 0;
}

/* Waits up to ms (-1: for ever) for SIGTERM, SIGINT or SIGHUP; 0 when
 * none came. They are blocked in every thread (the mask was set before any
 * was created), so only this thread sees them. */
static int wait_signal(const sigset_t *sigs, int64_t ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
	int sig;

	for (;;) {
		sig = ms < 0 ? sigwaitinfo(sigs, NULL) : sigtimedwait(sigs, NULL, &ts);
		if (sig > 0)
			return sig;
		if (errno == EAGAIN)
			return 0;
		/* EINTR: again (a whole new wait: a few of them only stretch it) */
	}
}

static void audit_lifecycle(const char *event, struct sbx_rpc *rpc)
{
	json_t *fields = json_pack("{s:s}", "version", SBX_VERSION);
	json_t *urls = json_array();

	for (size_t i = 0; rpc && urls && sbx_rpc_listener_url(rpc, i); i++)
		json_array_append_new(urls, json_string(sbx_rpc_listener_url(rpc, i)));
	if (fields && rpc)
		json_object_set(fields, "listen", urls);
	json_decref(urls);
	sbx_audit(event, NULL, NULL, NULL, fields);
}

/* The egress proxy, or NULL: a proxy that cannot start (its resolver's
 * files unreadable) leaves sbxd serving every policy but allowlists, which
 * CreateRun refuses with the reason, also written to the log here. */
static struct sbx_egress *start_egress(const struct sbx_config *cfg, struct sbx_err *why)
{
	struct sbx_egress *eg = NULL;

	if (sbx_egress_start(&cfg->egress, &eg, why) == 0)
		return eg;
	fprintf(stderr, "sbxd: egress proxy: %s; policies with an allowlist are refused\n",
		why->msg);
	sbx_audit("egress_unavailable", NULL, NULL, NULL, json_pack("{s:s}", "error", why->msg));
	return NULL;
}

static void collect_audit(void *arg)
{
	(void)arg;
	sbx_metrics_set(SBX_M_AUDIT_LOST, 0, (int64_t)sbx_audit_lost());
}

/* The metrics listener (config metrics.listen), after the RPC side, whose
 * connection guard bounds its connections too; *out stays NULL when the
 * config has none. A listener asked for that cannot start stops sbxd. */
static int start_metrics(const struct sbx_config *cfg, struct sbx_rpc *rpc,
			 struct sbx_metrics_http **out, struct sbx_err *err)
{
	*out = NULL;
	if (!cfg->metrics.listen)
		return 0;
	if (sbx_metrics_collector(collect_audit, NULL) < 0 ||
	    sbx_metrics_collector(sbx_rpc_collect, rpc) < 0)
		return sbx_fail(err, "metrics: too many collectors");
	if (sbx_metrics_http_start(cfg->metrics.listen, out, err) < 0)
		return -1;
	if (sbx_rpc_guard_metrics(sbx_metrics_http_port(*out), err) < 0)
		return -1;
	fprintf(stderr, "sbxd: metrics on %s%s\n", sbx_metrics_http_url(*out),
		cfg->metrics.allow_remote ? " (allow_remote: plain HTTP, no authentication)" : "");
	return 0;
}

static void stop_metrics(struct sbx_metrics_http *m)
{
	sbx_metrics_http_stop(m);
	sbx_metrics_collectors_clear();
}

/* What a running sbxd is made of, for the signals to act on. */
struct daemon {
	const struct sbx_config *cfg; /* as started: what rpc and runs were built from */
	const struct flags *f;	      /* the same file and flags are read on SIGHUP */
	struct sbx_rpc *rpc;
	struct sbx_runs *runs;
	char *log_path, *log_group; /* the audit log in force (a reload may move it) */
	uint32_t drain_seconds;
};

/* After a drain's timeout tore runs down, callers woken by it may still
 * ask about them: they are answered (FAILED_PRECONDITION naming the drain)
 * this long before the socket closes. */
#define DRAIN_LINGER_MS 1000
/* A drain says how many runs are left at most this often, and when it
 * changes. */
#define DRAIN_REPORT_MS 30000

static bool same_str(const char *a, const char *b)
{
	return a == b || (a && b && !strcmp(a, b));
}

/* The audit log opened again, at next's path when a reload moves it: after
 * logrotate renamed it, lines go to a new file. Appends "log" to changed
 * when it moved. */
static void reopen_log(struct daemon *d, const struct sbx_config *next, char *changed, size_t size)
{
	const char *path = next ? next->log_path : d->log_path;
	const char *group = next ? next->log_group : d->log_group;
	bool moved = !same_str(path, d->log_path) || !same_str(group, d->log_group);
	char *p = NULL, *g = NULL;
	struct sbx_err err;
	size_t len;

	if (moved && ((path && !(p = strdup(path))) || (group && !(g = strdup(group))))) {
		free(p);
		fprintf(stderr, "sbxd: reload: log %s: out of memory; the log stays at %s\n",
			path ? path : "stderr", d->log_path ? d->log_path : "stderr");
		moved = false;
		path = d->log_path;
		group = d->log_group;
	}
	if (sbx_audit_open(path, group, &err) < 0) {
		fprintf(stderr, "sbxd: reload: reopening the audit log: %s; it stays as it was\n",
			err.msg);
		free(p);
		free(g);
		return;
	}
	if (!moved)
		return;
	free(d->log_path);
	free(d->log_group);
	d->log_path = p;
	d->log_group = g;
	len = strlen(changed);
	if (len < size)
		snprintf(changed + len, size - len, "%slog", len ? ", " : "");
}

/* SIGHUP: the config file read again with the same flags on top. An
 * invalid one changes nothing (but the audit log is still reopened, as
 * log rotation needs); a valid one is applied where it can be without
 * touching a run, and what needs a restart is named. Runs are never
 * touched. Each reload is bounded work (a file, the TLS files); signals
 * that arrive during one are one pending SIGHUP, so a flood of them is a
 * few reloads in a row, each answering every caller meanwhile. */
static void reload(struct daemon *d)
{
	const char *file = d->f->config ? d->f->config : "(no file: defaults and flags)";
	char changed[1024] = "", restart[512];
	struct sbx_config next;
	struct sbx_err err;
	size_t n;

	if (sbx_config_load(d->f->config, &next, &err) < 0 ||
	    sbx_config_apply_flags(&next, &d->f->settings, &err) < 0) {
		reopen_log(d, NULL, changed, sizeof(changed));
		fprintf(stderr,
			"sbxd: SIGHUP: reload of %s refused, the running config stays: %s\n", file,
			err.msg);
		sbx_audit("config_reload_refused", NULL, NULL, NULL,
			  json_pack("{s:s, s:s}", "config", file, "error", err.msg));
		return;
	}
	reopen_log(d, &next, changed, sizeof(changed));
	if (sbx_rpc_reload(d->rpc, &next, changed, sizeof(changed), &err) < 0) {
		fprintf(stderr,
			"sbxd: SIGHUP: reload of %s refused, the running config stays: %s\n", file,
			err.msg);
		sbx_audit("config_reload_refused", NULL, NULL, NULL,
			  json_pack("{s:s, s:s}", "config", file, "error", err.msg));
		sbx_config_free(&next);
		return;
	}
	sbx_runs_reload(d->runs, &next, changed, sizeof(changed));
	sbx_audit_set_identity_rate(next.quotas.audit_identity_kb_per_s * 1024);
	if (next.drain_seconds != d->drain_seconds) {
		size_t len = strlen(changed);

		d->drain_seconds = next.drain_seconds;
		if (len < sizeof(changed))
			snprintf(changed + len, sizeof(changed) - len, "%sdrain_seconds",
				 len ? ", " : "");
	}
	n = sbx_config_restart_keys(d->cfg, &next, restart, sizeof(restart));
	if (n)
		fprintf(stderr,
			"sbxd: SIGHUP: %s changed in %s but need%s a restart; sbxd keeps them as "
			"it started\n",
			restart, file, n == 1 ? "s" : "");
	fprintf(stderr, "sbxd: SIGHUP: reloaded %s: %s\n", file,
		changed[0] ? changed : "nothing changed");
	sbx_audit("config_reloaded", NULL, NULL, NULL,
		  json_pack("{s:s, s:s, s:s}", "config", file, "changed", changed, "needs_restart",
			    restart));
	sbx_config_free(&next);
}

/* SIGTERM or SIGINT came: no new runs; those there go on until they are
 * gone or drain_seconds pass, SIGHUP still reloads, and another SIGTERM
 * or SIGINT ends it at once. Returns how it ended: "complete", "timeout"
 * (the rest torn down, their owners told why) or "signal". */
static const char *drain(struct daemon *d, const sigset_t *sigs, int sig)
{
	int64_t start = sbx_mono_ms(), last_report = start;
	unsigned n = sbx_runs_count(d->runs), reported = n;

	sbx_runs_stop_accepting(d->runs);
	fprintf(stderr,
		"sbxd: SIG%s: draining: CreateRun is refused; %u runs left, waiting up to %u s "
		"(drain_seconds) for them to end; SIG%s again stops at once\n",
		sigabbrev_np(sig), n, d->drain_seconds, sigabbrev_np(sig));
	sbx_audit("sbxd_draining", NULL, NULL, NULL,
		  json_pack("{s:s, s:s, s:I, s:I}", "version", SBX_VERSION, "signal",
			    sigabbrev_np(sig), "runs", (json_int_t)n, "drain_seconds",
			    (json_int_t)d->drain_seconds));
	while ((n = sbx_runs_count(d->runs)) > 0) {
		int64_t now = sbx_mono_ms(), left = start + (int64_t)d->drain_seconds * 1000 - now;

		if (n != reported || now - last_report >= DRAIN_REPORT_MS) {
			fprintf(stderr, "sbxd: draining: %u runs left, %lld s to go\n", n,
				(long long)(left > 0 ? (left + 999) / 1000 : 0));
			reported = n;
			last_report = now;
		}
		if (left <= 0) {
			fprintf(stderr,
				"sbxd: draining: drain_seconds (%u s) passed; tearing down the %u "
				"runs left (their manifests go to the audit log)\n",
				d->drain_seconds, n);
			sbx_audit("sbxd_drain_timeout", NULL, NULL, NULL,
				  json_pack("{s:I, s:I}", "drain_seconds",
					    (json_int_t)d->drain_seconds, "runs", (json_int_t)n));
			sbx_runs_teardown_all(d->runs, "drain");
			/* Their callers, woken by the teardown, learn why. */
			for (int64_t until = sbx_mono_ms() + DRAIN_LINGER_MS;
			     (left = until - sbx_mono_ms()) > 0;)
				if ((sig = wait_signal(sigs, left)) != 0 && sig != SIGHUP)
					break;
			return "timeout";
		}
		sig = wait_signal(sigs, left < 1000 ? left : 1000);
		if (sig == SIGHUP) {
			reload(d);
		} else if (sig) {
			fprintf(stderr,
				"sbxd: SIG%s during the drain: tearing down the %u runs left now\n",
				sigabbrev_np(sig), n);
			sbx_audit("sbxd_drain_cut", NULL, NULL, NULL,
				  json_pack("{s:s, s:I}", "signal", sigabbrev_np(sig), "runs",
					    (json_int_t)n));
			sbx_runs_teardown_all(d->runs, "shutdown");
			return "signal";
		}
	}
	fprintf(stderr, "sbxd: draining: no runs left\n");
	return "complete";
}

static int serve(struct sbx_config *cfg, const struct flags *f, const sigset_t *sigs)
{
	struct sbx_err err, egress_why = {0};
	struct daemon d = {.cfg = cfg, .f = f, .drain_seconds = cfg->drain_seconds};
	struct sbx_metrics_http *metrics;
	struct sbx_egress *egress;
	const char *how;
	int sig;

	sbx_metrics_init(SBX_VERSION);
	if (sbx_audit_open(cfg->log_path, cfg->log_group, &err) < 0)
		return fail_with(&err);
	if ((cfg->log_path && !(d.log_path = strdup(cfg->log_path))) ||
	    (cfg->log_group && !(d.log_group = strdup(cfg->log_group)))) {
		free(d.log_path);
		sbx_audit_close();
		return fail(1, "out of memory");
	}
	sbx_audit_set_identity_rate(cfg->quotas.audit_identity_kb_per_s * 1024);
	/* Before the listeners: no run can ask for it before it is there. Its
	 * descriptors are what the RPC side and the runs leave (rpc.h). */
	sbx_rpc_fit_exec_fds(cfg);
	cfg->egress.fd_reserve = sbx_rpc_fd_need(cfg);
	egress = start_egress(cfg, &egress_why);
	d.runs = sbx_runs_init(cfg, &err);
	if (!d.runs) {
		sbx_egress_stop(egress);
		sbx_audit_close();
		free(d.log_path);
		free(d.log_group);
		return fail_with(&err);
	}
	sbx_runs_set_egress(d.runs, egress, egress_why.msg);
	d.rpc = sbx_rpc_start(cfg, d.runs, &err);
	if (!d.rpc) {
		sbx_runs_shutdown(d.runs);
		sbx_egress_stop(egress);
		sbx_audit_close();
		free(d.log_path);
		free(d.log_group);
		return fail_with(&err);
	}
	for (size_t i = 0; sbx_rpc_listener_url(d.rpc, i); i++) {
		const char *url = sbx_rpc_listener_url(d.rpc, i);

		fprintf(stderr, "sbxd: listening on %s\n", url);
		if (sbx_listen_url_scheme(url, NULL) == SBX_SCHEME_TCP)
			fprintf(stderr,
				"sbxd: warning: %s is plain TCP (insecure: true): "
				"tokens and data cross the network unencrypted\n",
				url);
	}
	if (start_metrics(cfg, d.rpc, &metrics, &err) < 0) {
		stop_metrics(metrics);
		/* No run yet, nothing to drain; sbxd exits either way, so a
		 * close that hung (-1) changes nothing. */
		(void)sbx_rpc_stop(d.rpc);
		sbx_runs_shutdown(d.runs);
		sbx_egress_stop(egress);
		sbx_audit_close();
		free(d.log_path);
		free(d.log_group);
		return fail_with(&err);
	}
	audit_lifecycle("sbxd_started", d.rpc);

	while ((sig = wait_signal(sigs, -1)) == SIGHUP)
		reload(&d);
	/* Callers keep being answered while the runs go (CreateRun with
	 * UNAVAILABLE); then the socket closes and the handlers still running
	 * finish before their state is freed. */
	how = drain(&d, sigs, sig);
	/* Scraped through the drain (operators watch it), stopped before the
	 * RPC side its collector reads goes (a reload leaves the listener as
	 * it is: a new metrics.listen needs a restart). */
	stop_metrics(metrics);
	if (sbx_rpc_stop(d.rpc) < 0)
		fprintf(stderr, "sbxd: closing the RPC socket hung (a known nng 1.5.2 bug); every "
				"run is gone, exiting without freeing it\n");
	sbx_runs_shutdown(d.runs);
	/* After the runs: each closed its egress in its teardown, and the last
	 * reference to a run (which frees its place in the proxy) is gone. */
	sbx_egress_stop(egress);
	sbx_audit("sbxd_stopped", NULL, NULL, NULL,
		  json_pack("{s:s, s:s}", "version", SBX_VERSION, "drain", how));
	sbx_audit_close();
	free(d.log_path);
	free(d.log_group);
	fprintf(stderr, "sbxd: stopped (drain %s)\n", how);
	return 0;
}

/* `sbxd image ...` is sbxd-image, installed (and built) next to sbxd: it
 * links libarchive and what that pulls in (libxml2, ICU, libstdc++), which
 * the service never needs. argv[1] ("image") becomes its argv[0]. */
static int exec_image(char **argv)
{
	char self[PATH_MAX], path[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	char *slash;

	if (n < 0)
		return fail(1, "image: finding sbxd's own directory: readlink /proc/self/exe: %s",
			    strerror(errno));
	self[n] = '\0';
	slash = strrchr(self, '/');
	if (!slash)
		return fail(1, "image: /proc/self/exe is not a path: %s", self);
	*slash = '\0';
	if (snprintf(path, sizeof(path), "%s/sbxd-image", self) >= (int)sizeof(path))
		return fail(1, "image: %s/sbxd-image: path too long", self);
	argv[1] = path;
	execv(path, argv + 1);
	return fail(1, "image: running %s: %s (sbxd image is sbxd-image, installed next to sbxd)",
		    path, strerror(errno));
}

int main(int argc, char **argv)
{
	struct flags f = {0};
	struct sbx_config cfg;
	struct rlimit rl;
	struct sbx_err err;
	sigset_t stop;
	int rc;

	/* A command of its own, with its own flags: before sbxd's. */
	if (argc > 1 && !strcmp(argv[1], "image"))
		return exec_image(argv);
	sbx_malloc_reuse_chunks();
	/* But a request's message (up to max_message_bytes, 4 MiB) gets its own
	 * mmap, so the memory partial ones held goes back to the system when
	 * they are dropped; 1 MiB chunks still stay in the heap. */
	mallopt(M_MMAP_THRESHOLD, 2 << 20);
	rc = parse_flags(argc, argv, &f);
	if (rc)
		return rc == 1 ? 0 : 2;
	if (sbx_is_real_root() && !f.allow_root)
		return fail(1, "refusing to run as real root: root weakens every guarantee of the "
			       "sandbox; run as an unprivileged user (or pass --allow-root)");

	/* Before any thread exists, so that every thread inherits it: the
	 * stop and reload signals are taken only by serve's waits, and a peer that hangs up
	 * is an EPIPE, not a death. */
	sigemptyset(&stop);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &stop, NULL);
	signal(SIGPIPE, SIG_IGN);
	/* Started with SIGCHLD ignored (which exec keeps), the kernel would
	 * reap sbxd's helpers by itself: their exit statuses lost, and a pid
	 * sbxd still means to wait for or signal could name another process
	 * (reviews 35, 37). */
	signal(SIGCHLD, SIG_DFL);
	/* A file size limit (RLIMIT_FSIZE) fails the write with EFBIG, as a
	 * full disk does, instead of killing sbxd. */
	signal(SIGXFSZ, SIG_IGN);

	/* Connections and runs both need descriptors: take all we may have
	 * (the RPC layer checks that its caps leave runs their reserve). */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			return fail(1, "raising RLIMIT_NOFILE to its hard limit %llu: %s",
				    (unsigned long long)rl.rlim_max, strerror(errno));
	}
	/* Without it one connect+close stops a listener for good. */
	if (sbx_nng_epipe_check(&err) < 0)
		return fail_with(&err);
	if (sbx_config_load(f.config, &cfg, &err) < 0)
		return fail_with(&err);
	if (sbx_config_apply_flags(&cfg, &f.settings, &err) < 0) {
		sbx_config_free(&cfg);
		return fail_with(&err);
	}
	rc = serve(&cfg, &f, &stop);
	sbx_config_free(&cfg);
	return rc;
}
