/* SPDX-License-Identifier: Apache-2.0 */
/* sbx-helper: builds one sandbox and runs untrusted commands in it, as an
 * ordinary user: user namespaces, no setuid, no PAM. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "cleanup.h"
#include "oneshot.h"
#include "phases.h"
#include "policy.h"
#include "realroot.h"
#include "result.h"
#include "run_files.h"
#include "sanitized.h"
#include "slot_userns.h"
#include "util.h"

#define EXIT_SETUP 125

static const char usage[] =
    "usage: sbx-helper run --policy FILE [--data DIR] [--out DIR] [--result FILE]\n"
    "                      [--cgroup-root PATH] [--allow-rlimit-fallback] [--run-files N]\n"
    "                      [--host-uids subordinate|shared] [--host-id-dir DIR]\n"
    "                      [--timings FILE] -- CMD [ARG...]\n"
    "       sbx-helper serve --policy FILE --control-fd N [--data DIR]\n"
    "                      [--image-root DIR --image-root-id DEV:INO]\n"
    "                      [--cgroup-root PATH] [--allow-rlimit-fallback] [--run-files N]\n"
    "                      [--host-uids subordinate|shared] [--host-id-dir DIR]\n"
    "                      [--host-slot UID,GID,LOCK_FD,USERNS_FD]\n"
    "                      [--reader-fd N] [--no-prepare | --prepare-first]\n"
    "       sbx-helper check [--json] [--cgroup-root PATH]\n"
    "       sbx-helper cleanup [--cgroup-root PATH]\n"
    "       sbx-helper policy FILE\n"
    "       sbx-helper slot-userns UID,GID\n"
    "\n"
    "run      create a sandbox from the policy, run CMD in it with this terminal's\n"
    "         stdin/stdout/stderr (in a new session), copy /out into DIR, destroy it.\n"
    "         Exit status: CMD's own; 128+N killed by signal N; 124 script_seconds ran\n"
    "         out; 125 the sandbox could not be set up; 126 not executable; 127 not found.\n"
    "serve    keep the sandbox and take exec requests on the control socket N (sbxd).\n"
    "check    what this host can enforce; exit 0 only if all of it.\n"
    "cleanup  remove run cgroups left by helpers that were killed (sbxd runs it at start).\n"
    "policy   validate a policy; print the effective policy and its digest.\n"
    "slot-userns  (sbxd's) make a user namespace mapping 0 to this uid and the\n"
    "         sandbox user 1000 to UID and GID (newuidmap, newgidmap) and send it on\n"
    "         fd 3, a unix socket; sbxd keeps it for that host uid slot's runs.\n"
    "\n"
    "  --policy FILE            the run policy (JSON; see sbx-policy(5))\n"
    "  --data DIR               mounted read-only at /data (default: empty)\n"
    "  --data-no-symlinks       fail if any component of --data is a symlink (sbxd\n"
    "                           passes a path it checked)\n"
    "  --image-root DIR         serve: the pinned image's tree (sbxd's store passes\n"
    "                           it), read-only as the root's content; opened\n"
    "                           without following links\n"
    "  --image-root-id DEV:INO  serve, with --image-root (required): the st_dev and\n"
    "                           st_ino (decimal) sbxd found for that tree beneath its\n"
    "                           hold; a directory at the path that is not this one\n"
    "                           is refused and nothing is mounted\n"
    "  --out DIR                where /out is copied at the end (regular files and\n"
    "                           directories only; links are never followed)\n"
    "  --result FILE            write what happened as JSON\n"
    "  --timings FILE           run: write when each step of the sandbox happened\n"
    "                           (\"NAME NS\" lines, CLOCK_MONOTONIC; sbx-bench-helper)\n"
    "  --cgroup-root PATH       delegated cgroup subtree, relative to the cgroup mount\n"
    "                           (default: /etc/sbx/cgroup-root, else the caller's own)\n"
    "  --allow-rlimit-fallback  without a delegated cgroup, use rlimits (weaker) instead\n"
    "                           of refusing; the result says so\n"
    "  --run-files N            the run's open files (default 262144): each process of\n"
    "                           the command gets RLIMIT_NOFILE N / limits.pids, at\n"
    "                           most 4096; refused when that is under 16\n"
    "  --host-uids MODE         the host uid the sandbox user runs as: subordinate\n"
    "                           (default) takes one of /etc/subuid's ids for this\n"
    "                           run alone (newuidmap), refused without a range;\n"
    "                           shared is this uid (weaker: every per-uid kernel\n"
    "                           counter is shared with it and its other sandboxes)\n"
    "  --host-id-dir DIR        where the subordinate slots' locks live (default\n"
    "                           ~/.local/state/sbx/host-ids); every helper of one\n"
    "                           user must use the same\n"
    "  --host-slot UID,GID,LOCK_FD,USERNS_FD\n"
    "                           serve, subordinate: the slot sbxd took: its host\n"
    "                           uid and gid, the flock of its file in the\n"
    "                           --host-id-dir, and the user namespace sbxd mapped\n"
    "                           for it (0 to this uid, the sandbox user to the\n"
    "                           slot's); the run's namespace is made in it,\n"
    "                           without newuidmap. Checked, else refused\n"
    "  --reader-fd N            serve: answer sbxd's opens beneath /out on socket N\n"
    "  --no-prepare             serve: make each exec's init at its request, not\n"
    "                           ahead (one process and pid fewer per run, slower\n"
    "                           execs)\n"
    "  --prepare-first          serve: make the first exec's init before Ready,\n"
    "                           not after 10 ms of quiet (sbxd's warm pool: a\n"
    "                           member claimed at once finds it made)\n"
    "  --allow-root             run even as real root (every guarantee is weaker)\n"
    "  -h, --help               this text\n"
    "  --version                print the version\n";

enum {
	OPT_POLICY = 256,
	OPT_DATA,
	OPT_DATA_NO_SYMLINKS,
	OPT_IMAGE_ROOT,
	OPT_IMAGE_ROOT_ID,
	OPT_OUT,
	OPT_RESULT,
	OPT_CGROUP_ROOT,
	OPT_FALLBACK,
	OPT_RUN_FILES,
	OPT_ALLOW_ROOT,
	OPT_CONTROL_FD,
	OPT_JSON,
	OPT_HOST_UIDS,
	OPT_HOST_ID_DIR,
	OPT_HOST_SLOT,
	OPT_READER_FD,
	OPT_NO_PREPARE,
	OPT_PREPARE_FIRST,
	OPT_VERSION,
	OPT_TIMINGS,
	OPT__END /* not an option: option_commands' size */
};

/* The commands that take each option: one given to another is refused by
 * name, not ignored (`check --prepare-first` or `serve --out DIR` would
 * look obeyed). Indexed by OPT_* - OPT_POLICY. */
enum { FOR_RUN = 1, FOR_SERVE = 2, FOR_CHECK = 4, FOR_CLEANUP = 8 };
#define FOR_SANDBOX (FOR_RUN | FOR_SERVE)
#define FOR_ANY	    (FOR_SANDBOX | FOR_CHECK | FOR_CLEANUP)
/* An option left out of the table is 0: taken by no command (refused). */
static const unsigned option_commands[OPT__END - OPT_POLICY] = {
    [OPT_POLICY - OPT_POLICY] = FOR_SANDBOX,
    [OPT_DATA - OPT_POLICY] = FOR_SANDBOX,
    [OPT_DATA_NO_SYMLINKS - OPT_POLICY] = FOR_SANDBOX,
    [OPT_IMAGE_ROOT - OPT_POLICY] = FOR_SERVE,
    [OPT_IMAGE_ROOT_ID - OPT_POLICY] = FOR_SERVE,
    [OPT_OUT - OPT_POLICY] = FOR_RUN,
    [OPT_RESULT - OPT_POLICY] = FOR_RUN,
    [OPT_CGROUP_ROOT - OPT_POLICY] = FOR_ANY,
    [OPT_FALLBACK - OPT_POLICY] = FOR_SANDBOX,
    [OPT_RUN_FILES - OPT_POLICY] = FOR_SANDBOX,
    [OPT_ALLOW_ROOT - OPT_POLICY] = FOR_SANDBOX,
    [OPT_CONTROL_FD - OPT_POLICY] = FOR_SERVE,
    [OPT_JSON - OPT_POLICY] = FOR_CHECK,
    [OPT_HOST_UIDS - OPT_POLICY] = FOR_SANDBOX,
    [OPT_HOST_ID_DIR - OPT_POLICY] = FOR_SANDBOX,
    [OPT_HOST_SLOT - OPT_POLICY] = FOR_SERVE,
    [OPT_READER_FD - OPT_POLICY] = FOR_SERVE,
    [OPT_NO_PREPARE - OPT_POLICY] = FOR_SERVE,
    [OPT_PREPARE_FIRST - OPT_POLICY] = FOR_SERVE,
    [OPT_VERSION - OPT_POLICY] = FOR_ANY, /* prints the version, as the command does */
    [OPT_TIMINGS - OPT_POLICY] = FOR_RUN,
};

/* "run and serve", "serve", ...: the commands in mask, for a refusal. */
static const char *commands_named(unsigned mask)
{
	static char names[64];
	static const char *const cmd[] = {"run", "serve", "check", "cleanup"};
	size_t n = 0, count = 0, total = (size_t)__builtin_popcount(mask);
	names[0] = '\0';
	for (unsigned i = 0; i < SBX_ARRAY_SIZE(cmd); i++) {
		if (!(mask & (1u << i)))
			continue;
		count++;
		n += (size_t)snprintf(names + n, sizeof(names) - n, "%s%s",
				      count == 1       ? ""
				      : count == total ? " and "
						       : ", ",
				      cmd[i]);
	}
	return names;
}

static const struct option long_opts[] = {
    {"policy", required_argument, NULL, OPT_POLICY},
    {"data", required_argument, NULL, OPT_DATA},
    {"data-no-symlinks", no_argument, NULL, OPT_DATA_NO_SYMLINKS},
    {"image-root", required_argument, NULL, OPT_IMAGE_ROOT},
    {"image-root-id", required_argument, NULL, OPT_IMAGE_ROOT_ID},
    {"out", required_argument, NULL, OPT_OUT},
    {"result", required_argument, NULL, OPT_RESULT},
    {"cgroup-root", required_argument, NULL, OPT_CGROUP_ROOT},
    {"allow-rlimit-fallback", no_argument, NULL, OPT_FALLBACK},
    {"run-files", required_argument, NULL, OPT_RUN_FILES},
    {"allow-root", no_argument, NULL, OPT_ALLOW_ROOT},
    {"control-fd", required_argument, NULL, OPT_CONTROL_FD},
    {"json", no_argument, NULL, OPT_JSON},
    {"host-uids", required_argument, NULL, OPT_HOST_UIDS},
    {"host-id-dir", required_argument, NULL, OPT_HOST_ID_DIR},
    {"host-slot", required_argument, NULL, OPT_HOST_SLOT},
    {"reader-fd", required_argument, NULL, OPT_READER_FD},
    {"no-prepare", no_argument, NULL, OPT_NO_PREPARE},
    {"prepare-first", no_argument, NULL, OPT_PREPARE_FIRST},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, OPT_VERSION},
    {"timings", required_argument, NULL, OPT_TIMINGS},
    {0},
};

__attribute__((format(printf, 2, 3))) static int fail(int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("sbx-helper: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	return code;
}

static bool is_dir(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* One decimal number of DEV:INO, up to `stop` (':' or the end): no sign,
 * no blanks, nothing past the type's range. */
static bool parse_id_part(const char *s, char stop, const char **end, uintmax_t max, uintmax_t *out)
{
	uintmax_t v = 0;
	const char *p = s;
	for (; *p >= '0' && *p <= '9'; p++) {
		unsigned d = (unsigned)(*p - '0');
		if (v > (max - d) / 10)
			return false;
		v = v * 10 + d;
	}
	if (p == s || *p != stop)
		return false;
	*end = p;
	*out = v;
	return true;
}

/* --image-root-id DEV:INO, as sbxd formats it ("%ju:%ju"). */
static bool parse_image_id(const char *s, struct sbx_image_root *img)
{
	uintmax_t dev, ino;
	const char *p;
	if (!parse_id_part(s, ':', &p, (dev_t)-1, &dev) ||
	    !parse_id_part(p + 1, '\0', &p, (ino_t)-1, &ino))
		return false;
	img->dev = (dev_t)dev;
	img->ino = (ino_t)ino;
	return true;
}

static int policy_cmd(int argc, char **argv)
{
	if (argc != 2)
		return fail(2, "%s", "usage: sbx-helper policy FILE");
	struct sbx_err err;
	SbxPolicy *p = sbx_policy_load(argv[1], &err);
	if (!p)
		return fail(1, "%s", err.msg);
	char digest[65];
	char *json = sbx_policy_to_json(p);
	int rc = sbx_policy_digest(p, digest, &err);
	if (rc == 0 && json)
		printf("%s\ndigest sha256:%s\n", json, digest);
	free(json);
	sbx_policy_free(p);
	return rc == 0 ? 0 : fail(1, "%s", err.msg);
}

/* /dev/null on each of descriptors 0, 1 and 2 that is closed; nothing
 * opened when none is (a host without a usable /dev/null still runs). */
static int stdio_open(void)
{
	for (int fd = 0; fd < 3; fd++) {
		if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF)
			continue;
		int null = open("/dev/null", O_RDWR);
		if (null < 0)
			return -1;
		if (null != fd) { /* a lower one was closed and is taken by now */
			close(null);
			errno = EBADF;
			return -1;
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	sbx_phase_mark(SBX_PHASE_MAIN);
	/* Started with stdin, stdout or stderr closed, the helper would give
	 * their numbers to the first descriptors it opens (its signalfd, pid
	 * 1's control socket), and its relays would write the sandbox's
	 * output into them (review: a sandbox's stdout reached pid 1's
	 * control socket). Each closed one is /dev/null instead. */
	if (stdio_open() < 0)
		return fail(EXIT_SETUP, "open /dev/null for a closed stdin, stdout or stderr: %s",
			    strerror(errno));
	/* A peer that went away (pid 1, a closed stdout) is an error to
	 * handle where it happens, never a reason to die. */
	signal(SIGPIPE, SIG_IGN);
	if (argc < 2)
		return fail(2, "%s", "missing command; see sbx-helper --help");
	const char *cmd = argv[1];
	if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
		fputs(usage, stdout);
		return 0;
	}
	if (!strcmp(cmd, "--version")) {
		puts("sbx-helper " SBX_VERSION);
		return 0;
	}
	if (!strcmp(cmd, "policy"))
		return policy_cmd(argc - 1, argv + 1);
	if (!strcmp(cmd, "slot-userns")) {
		if (argc == 3 && (!strcmp(argv[2], "--help") || !strcmp(argv[2], "-h"))) {
			fputs(usage, stdout);
			return 0;
		}
		if (argc != 3)
			return fail(2, "%s",
				    "usage: sbx-helper slot-userns UID,GID (fd 3: a socket)");
		return sbx_slot_userns_main(argv[2], 3);
	}
	bool run = !strcmp(cmd, "run"), serve = !strcmp(cmd, "serve"),
	     check = !strcmp(cmd, "check"), cleanup = !strcmp(cmd, "cleanup");
	if (!run && !serve && !check && !cleanup)
		return fail(2, "unknown command '%s'; see sbx-helper --help", cmd);
	int usage_exit = run ? EXIT_SETUP : 2;
	unsigned this_cmd = run ? FOR_RUN : serve ? FOR_SERVE : check ? FOR_CHECK : FOR_CLEANUP;

	struct sbx_helper_opts o = {.control_fd = -1, .reader_fd = -1};
	bool allow_root = false, json = false, image_id = false;
	uint64_t run_files = SBX_RUN_FILES_DEFAULT;
	int c;
	optind = 2;
	int at = -1;
	while ((c = getopt_long(argc, argv, "+h", long_opts, &at)) != -1) {
		/* -h and getopt's '?' and ':' are no long option's. */
		unsigned takes =
		    c >= OPT_POLICY && c < OPT__END ? option_commands[c - OPT_POLICY] : FOR_ANY;
		if (!takes)
			return fail(usage_exit, "--%s is no command's option", long_opts[at].name);
		if (!(takes & this_cmd))
			return fail(usage_exit, "--%s is for %s, not %s", long_opts[at].name,
				    commands_named(takes), cmd);
		at = -1;
		switch (c) {
		case OPT_POLICY:
			o.policy_path = optarg;
			break;
		case OPT_DATA:
			o.data_dir = optarg;
			break;
		case OPT_DATA_NO_SYMLINKS:
			o.data_no_symlinks = true;
			break;
		case OPT_IMAGE_ROOT:
			o.image_root.path = optarg;
			break;
		case OPT_IMAGE_ROOT_ID:
			if (!parse_image_id(optarg, &o.image_root))
				return fail(usage_exit,
					    "--image-root-id %s: must be DEV:INO (two decimal "
					    "numbers)",
					    optarg);
			image_id = true;
			break;
		case OPT_OUT:
			o.out_dir = optarg;
			break;
		case OPT_RESULT:
			o.result_path = optarg;
			break;
		case OPT_TIMINGS:
			o.timings_path = optarg;
			break;
		case OPT_CGROUP_ROOT:
			o.cgroup_root = optarg;
			break;
		case OPT_FALLBACK:
			o.rlimit_fallback = true;
			break;
		case OPT_RUN_FILES: {
			char *end;
			errno = 0;
			unsigned long long n = strtoull(optarg, &end, 10);
			if (errno || end == optarg || *end || optarg[0] == '-')
				return fail(usage_exit, "--run-files %s: must be a number", optarg);
			run_files = n;
			break;
		}
		case OPT_ALLOW_ROOT:
			allow_root = true;
			break;
		case OPT_CONTROL_FD:
		case OPT_READER_FD: {
			char *end;
			long fd = strtol(optarg, &end, 10);
			const char *name = c == OPT_CONTROL_FD ? "control-fd" : "reader-fd";
			if (*end || fd < 3 || fd > 65535)
				return fail(usage_exit, "--%s %s: must be an fd number >= 3", name,
					    optarg);
			*(c == OPT_CONTROL_FD ? &o.control_fd : &o.reader_fd) = (int)fd;
			break;
		}
		case OPT_HOST_UIDS: {
			int m = sbx_host_ids_mode_parse(optarg);
			if (m < 0)
				return fail(usage_exit,
					    "--host-uids %s: must be subordinate or shared",
					    optarg);
			o.host_ids = (enum sbx_host_ids_mode)m;
			break;
		}
		case OPT_HOST_ID_DIR:
			o.host_id_dir = optarg;
			break;
		case OPT_HOST_SLOT:
			if (sbx_host_ids_given_parse(optarg, &o.slot) < 0)
				return fail(usage_exit,
					    "--host-slot %s: must be UID,GID,LOCK_FD,USERNS_FD "
					    "(ids above 0, fds 3 or more)",
					    optarg);
			o.slot_given = true;
			break;
		case OPT_JSON:
			json = true;
			break;
		case OPT_NO_PREPARE:
			o.no_prepare = true;
			break;
		case OPT_PREPARE_FIRST:
			o.prepare_first = true;
			break;
		case 'h':
			fputs(usage, stdout);
			return 0;
		case OPT_VERSION:
			puts("sbx-helper " SBX_VERSION);
			return 0;
		default:
			return fail(usage_exit, "%s", "bad option; see sbx-helper --help");
		}
	}
	o.argv = argv + optind;
	if ((check || cleanup) && o.argv[0])
		return fail(2, "%s: takes no argument ('%s'); see sbx-helper --help", cmd,
			    o.argv[0]);
	if (check)
		return sbx_check_main(o.cgroup_root, json);
	if (cleanup)
		return sbx_cleanup_main(o.cgroup_root);

	if (run && !o.argv[0])
		return fail(usage_exit, "%s", "run: missing command after --");
	if (serve && (o.argv[0] || o.control_fd < 0))
		return fail(usage_exit, "%s", "serve: needs --control-fd N and no command");
	if (o.no_prepare && o.prepare_first)
		return fail(usage_exit, "%s",
			    "--prepare-first makes an exec's init ahead, --no-prepare none: "
			    "give one of them");
	if (o.slot_given && o.host_ids != SBX_HOST_IDS_SUBORDINATE)
		return fail(usage_exit, "%s",
			    "--host-slot is for serve with --host-uids subordinate (sbxd's "
			    "slots)");
	if (!o.policy_path)
		return fail(usage_exit, "%s", "missing --policy FILE");
	/* The path alone is not the tree sbxd holds (docs/operator/images.md): the
	 * identity goes with it, always. */
	if (!o.image_root.path != !image_id)
		return fail(usage_exit, "%s",
			    "serve: --image-root and --image-root-id DEV:INO go together");
	if (o.image_root.path && (o.image_root.path[0] != '/' || !is_dir(o.image_root.path)))
		return fail(usage_exit, "--image-root %s: not an absolute path to a directory",
			    o.image_root.path);
	if (o.data_dir && !is_dir(o.data_dir))
		return fail(usage_exit, "--data %s: not a directory", o.data_dir);
	if (o.out_dir) {
		struct stat st;
		if (stat(o.out_dir, &st) == 0 && !S_ISDIR(st.st_mode))
			return fail(usage_exit, "--out %s: exists and is not a directory",
				    o.out_dir);
	}
	if (sbx_is_real_root() && !allow_root)
		return fail(usage_exit, "%s",
			    "refusing to run as real root: root weakens every guarantee of the "
			    "sandbox; run as an unprivileged user (or pass --allow-root)");

	struct sbx_err err;
	SbxPolicy *policy = sbx_policy_load(o.policy_path, &err);
	if (!policy) {
		if (run && o.result_path) {
			/* A script reading --result must learn why nothing ran. */
			struct sbx_result res = {.exit_reason = "setup_failed",
						 .exit_code = EXIT_SETUP,
						 .cgroup = "none",
						 .message = err.msg};
			struct sbx_err rerr;
			if (sbx_result_write(o.result_path, &res, &rerr) < 0)
				fputs(rerr.msg, stderr);
		}
		return fail(usage_exit, "%s", err.msg);
	}
	/* RLIMIT_NOFILE is per process and a run has up to pids of them: the
	 * run's budget of the host's file table, divided. */
	o.nofile = sbx_nofile_per_process(run_files, policy->limits->pids);
	if (!o.nofile) {
		uint32_t pids = policy->limits->pids;
		sbx_policy_free(policy);
		return fail(usage_exit,
			    "--run-files %llu: limits.pids %u processes would get fewer than %d "
			    "open files each; lower pids or raise the run's files",
			    (unsigned long long)run_files, pids, SBX_NOFILE_MIN);
	}
	int rc = run ? sbx_oneshot_run(&o, policy) : sbx_serve(&o, policy);
	/* The run is over and everything it needed removed: end without
	 * freeing the policy or running exit()'s handlers and the libraries'
	 * destructors. Their writes land on heap and data pages this process
	 * shares copy-on-write with its forks (sbxd's /out reader lives on
	 * after us), each copied first, on the Teardown's path: ~0.4 ms of
	 * ~30 page copies here for memory the kernel frees anyway. A
	 * sanitized build frees and returns, so that LeakSanitizer checks
	 * at exit (sanitized.h). */
	if (!SBX_SANITIZED) {
		fflush(NULL);
		_exit(rc);
	}
	sbx_policy_free(policy);
	return rc;
}
