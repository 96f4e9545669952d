/* SPDX-License-Identifier: Apache-2.0 */
#include "systemd_scope.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <systemd/sd-bus.h>
#include <time.h>
#include <unistd.h>

#include "cgroup.h"
#include "fds.h"
#include "util.h"

/* libsystemd is opened only on this path: every sandbox starts with an exec
 * of sbx-helper, and the library (with its own dependencies) would be mapped
 * into each one whether or not it needs a scope (docs/dev/benchmarks.md). The
 * names are the library's own, so the calls read as sd-bus code. */
static struct {
	void *lib;
	__typeof__(sd_bus_new) *bus_new;
	__typeof__(sd_bus_set_address) *set_address;
	__typeof__(sd_bus_start) *start;
	__typeof__(sd_bus_get_fd) *get_fd;
	__typeof__(sd_bus_open_user) *open_user;
	__typeof__(sd_bus_flush_close_unref) *close_unref;
	__typeof__(sd_bus_close_unref) *drop;
	__typeof__(sd_bus_message_new_method_call) *new_method_call;
	__typeof__(sd_bus_message_append) *append;
	__typeof__(sd_bus_message_open_container) *open_container;
	__typeof__(sd_bus_message_close_container) *close_container;
	__typeof__(sd_bus_call) *call;
	__typeof__(sd_bus_call_method) *call_method;
	__typeof__(sd_bus_message_read) *read;
	__typeof__(sd_bus_get_property_trivial) *get_trivial;
	__typeof__(sd_bus_message_unref) *message_unref;
	__typeof__(sd_bus_error_free) *error_free;
} sd;

static int load_libsystemd(struct sbx_err *err)
{
	if (sd.lib)
		return 0;
	void *lib = dlopen("libsystemd.so.0", RTLD_NOW | RTLD_LOCAL);
	if (!lib)
		return sbx_fail(err, "libsystemd.so.0 cannot be loaded (%s)", dlerror());
#define SYM(field, name)                                                                           \
	do {                                                                                       \
		*(void **)&sd.field = dlsym(lib, name);                                            \
		if (!sd.field) {                                                                   \
			dlclose(lib);                                                              \
			return sbx_fail(err, "libsystemd.so.0 has no %s", name);                   \
		}                                                                                  \
	} while (0)
	SYM(bus_new, "sd_bus_new");
	SYM(set_address, "sd_bus_set_address");
	SYM(start, "sd_bus_start");
	SYM(get_fd, "sd_bus_get_fd");
	SYM(open_user, "sd_bus_open_user");
	SYM(close_unref, "sd_bus_flush_close_unref");
	SYM(drop, "sd_bus_close_unref");
	SYM(new_method_call, "sd_bus_message_new_method_call");
	SYM(append, "sd_bus_message_append");
	SYM(open_container, "sd_bus_message_open_container");
	SYM(close_container, "sd_bus_message_close_container");
	SYM(call, "sd_bus_call");
	SYM(call_method, "sd_bus_call_method");
	SYM(read, "sd_bus_message_read");
	SYM(get_trivial, "sd_bus_get_property_trivial");
	SYM(message_unref, "sd_bus_message_unref");
	SYM(error_free, "sd_bus_error_free");
#undef SYM
	sd.lib = lib;
	return 0;
}

/* The user manager's own socket, as `systemctl --user` reaches it: it needs
 * no session bus (dbus-user-session), which many servers lack. The runtime
 * directory is 0700 and the user's own; a value of XDG_RUNTIME_DIR that
 * would need escaping in a D-Bus address is not used. */
static void private_address(char *addr, size_t size)
{
	const char *rt = getenv("XDG_RUNTIME_DIR");
	char dir[256];
	if (rt && rt[0] == '/' && strlen(rt) < sizeof(dir) &&
	    strspn(rt, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/_-.") ==
		strlen(rt))
		snprintf(dir, sizeof(dir), "%s", rt);
	else
		snprintf(dir, sizeof(dir), "/run/user/%u", (unsigned)geteuid());
	snprintf(addr, size, "unix:path=%s/systemd/private", dir);
}

/* The user's own manager and bus run as the user: a socket another
 * account listens on (an XDG_RUNTIME_DIR or DBUS_SESSION_BUS_ADDRESS that
 * names a directory it can write) would be asked where this process's
 * delegated cgroup is, and answer. */
static int peer_is_self(sd_bus *bus, const char *where, struct sbx_err *err)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);
	int fd = sd.get_fd(bus);
	if (fd < 0 || getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
		return sbx_fail(err, "%s: not a unix socket whose owner can be told", where);
	if (cred.uid != geteuid())
		return sbx_fail(
		    err,
		    "%s is served by uid %u, not by this user's (%u) systemd manager: "
		    "XDG_RUNTIME_DIR or DBUS_SESSION_BUS_ADDRESS names another user's socket",
		    where, (unsigned)cred.uid, (unsigned)geteuid());
	return 0;
}

static int connect_user_manager(sd_bus **bus, char *where, size_t size, struct sbx_err *err)
{
	private_address(where, size);
	int r = sd.bus_new(bus);
	if (r >= 0)
		r = sd.set_address(*bus, where);
	if (r >= 0)
		r = sd.start(*bus);
	if (r >= 0) {
		if (peer_is_self(*bus, where, err) == 0)
			return 0;
		/* Not flushed: a flush waits for the stranger to finish the
		 * authentication, as long as it likes. */
		*bus = sd.drop(*bus);
		return -1;
	}
	int first = -r;
	if (*bus)
		*bus = sd.close_unref(*bus);
	r = sd.open_user(bus);
	if (r >= 0) {
		snprintf(where, size, "the session bus");
		if (peer_is_self(*bus, where, err) == 0)
			return 0;
		*bus = sd.drop(*bus);
		return -1;
	}
	return sbx_fail(err,
			"no systemd user manager answers (%s: %s; session bus: %s): `sudo "
			"loginctl enable-linger %u` starts one for this user",
			where, strerror(first), strerror(-r), (unsigned)geteuid());
}

static int append_properties(sd_bus_message *m)
{
	char desc[64];
	snprintf(desc, sizeof(desc), "sbx-helper (pid %d)", (int)getpid());
	int r = sd.open_container(m, 'a', "(sv)");
	if (r >= 0)
		r = sd.append(m, "(sv)", "PIDs", "au", 1, (uint32_t)getpid());
	/* The point of the scope: the cgroup below it is this user's to
	 * divide into the run's cgroups, with memory, pids and cpu. */
	if (r >= 0)
		r = sd.append(m, "(sv)", "Delegate", "b", 1);
	if (r >= 0)
		r = sd.append(m, "(sv)", "Description", "s", desc);
	/* A scope whose processes were killed ends "failed": still collected. */
	if (r >= 0)
		r = sd.append(m, "(sv)", "CollectMode", "s", "inactive-or-failed");
	if (r >= 0)
		r = sd.close_container(m);
	/* No auxiliary units. */
	if (r >= 0)
		r = sd.append(m, "a(sa(sv))", 0);
	return r;
}

static int start_unit(sd_bus *bus, const char *unit, const char *where, struct sbx_err *err)
{
	sd_bus_message *m = NULL, *reply = NULL;
	sd_bus_error e = SD_BUS_ERROR_NULL;
	int r = sd.new_method_call(bus, &m, "org.freedesktop.systemd1", "/org/freedesktop/systemd1",
				   "org.freedesktop.systemd1.Manager", "StartTransientUnit");
	if (r >= 0)
		r = sd.append(m, "ss", unit, "fail");
	if (r >= 0)
		r = append_properties(m);
	if (r < 0) {
		sd.message_unref(m);
		return sbx_fail(err, "StartTransientUnit: building the call: %s", strerror(-r));
	}
	r = sd.call(bus, m, (uint64_t)SBX_SCOPE_WAIT_MS * 1000, &e, &reply);
	if (r < 0)
		sbx_fail(err, "the systemd user manager (%s) refused scope %s: %s", where, unit,
			 e.message ? e.message : strerror(-r));
	sd.error_free(&e);
	sd.message_unref(reply);
	sd.message_unref(m);
	return r < 0 ? -1 : 0;
}

/* The job that moves us is queued by the call and runs after its reply. */
static int wait_until_inside(const char *unit, const char *where, struct sbx_err *err)
{
	size_t ulen = strlen(unit);
	for (int waited = 0; waited < SBX_SCOPE_WAIT_MS; waited += 5) {
		char own[2048];
		size_t n;
		if (sbx_cgroup_own_v2(own, sizeof(own)) == 0 && (n = strlen(own)) > ulen &&
		    own[n - ulen - 1] == '/' && strcmp(own + n - ulen, unit) == 0)
			return 0;
		nanosleep(&(struct timespec){0, 5000000}, NULL);
	}
	return sbx_fail(err,
			"the systemd user manager (%s) started scope %s but did not move this "
			"process into it within %d ms (a process outside the user's session needs "
			"the system manager's help: is dbus running?)",
			where, unit, SBX_SCOPE_WAIT_MS);
}

/* Whether this process has one pid only: the manager reads PIDs in its own
 * pid namespace, so a helper in a nested one (a toolbox-style container
 * sharing the user's manager) would name an unrelated process of the user. */
static bool pid_is_managers(void)
{
	char buf[8192];
	if (sbx_read_at(AT_FDCWD, "/proc/self/status", buf, sizeof(buf)) < 0)
		return false;
	const char *p = strstr(buf, "\nNSpid:");
	if (!p)
		return true; /* before Linux 4.1: no nesting to tell */
	p += strlen("\nNSpid:");
	unsigned pids = 0;
	for (const char *end = strchr(p, '\n'); p < end && *p; pids++) {
		p += strspn(p, " \t");
		if (p >= end)
			break;
		p += strcspn(p, " \t\n");
	}
	return pids == 1;
}

int sbx_systemd_scope_start(char *unit, size_t size, struct sbx_err *err)
{
	uint32_t rnd = 0;
	if (!pid_is_managers())
		return sbx_fail(err, "this process is in a nested pid namespace, whose pids the "
				     "systemd user manager cannot name");
	if (load_libsystemd(err) < 0)
		return sbx_err_prefix(err, "a delegated systemd scope");
	if (getrandom(&rnd, sizeof(rnd), 0) != sizeof(rnd))
		return sbx_fail_errno(err, "getrandom");
	snprintf(unit, size, "sbx-helper-%d-%08x.scope", (int)getpid(), rnd);
	sd_bus *bus = NULL;
	char where[320];
	if (connect_user_manager(&bus, where, sizeof(where), err) < 0)
		return -1;
	int rc = start_unit(bus, unit, where, err);
	sd.close_unref(bus);
	if (rc < 0)
		return -1;
	return wait_until_inside(unit, where, err);
}

/* Delegate= of the unit that holds this process, as its manager says. */
static bool unit_delegates(sd_bus *bus)
{
	static const char *const iface[] = {"org.freedesktop.systemd1.Scope",
					    "org.freedesktop.systemd1.Service"};
	sd_bus_message *reply = NULL;
	sd_bus_error e = SD_BUS_ERROR_NULL;
	const char *path = NULL;
	int yes = 0;
	/* Pid 0: the manager names the caller by the connection's credentials,
	 * in its own pid namespace. getpid() in a nested one would name
	 * another process of the manager's, maybe one of a delegated unit
	 * (review 27). */
	int r = sd.call_method(bus, "org.freedesktop.systemd1", "/org/freedesktop/systemd1",
			       "org.freedesktop.systemd1.Manager", "GetUnitByPID", &e, &reply, "u",
			       (uint32_t)0);
	if (r >= 0)
		r = sd.read(reply, "o", &path);
	sd.error_free(&e);
	/* A scope's or a service's property; any other kind delegates nothing. */
	for (size_t i = 0; r >= 0 && i < SBX_ARRAY_SIZE(iface) && !yes; i++) {
		if (sd.get_trivial(bus, "org.freedesktop.systemd1", path, iface[i], "Delegate", &e,
				   'b', &yes) < 0)
			yes = 0;
		sd.error_free(&e);
	}
	sd.message_unref(reply);
	return yes != 0;
}

bool sbx_systemd_unit_delegates(void)
{
	struct sbx_err ignored;
	sd_bus *bus = NULL;
	char where[320];
	if (load_libsystemd(&ignored) < 0 ||
	    connect_user_manager(&bus, where, sizeof(where), &ignored) < 0)
		return false;
	bool yes = unit_delegates(bus);
	sd.close_unref(bus);
	return yes;
}
