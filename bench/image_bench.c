/* SPDX-License-Identifier: Apache-2.0 */
/* sbx-bench-image: the image store against umoci, and a run in a pinned
 * image against one in `host`, each next to its peer in the same run:
 *
 *   import   `sbxd image import NAME:TAG --oci-layout L` into a fresh store
 *            next to `umoci unpack --rootless --image L` into a fresh bundle,
 *            alternating; wall time (p50, p90) and the bytes on disk of what
 *            each left (st_blocks, links not followed)
 *   start-up CreateRun + Exec(/bin/true) + Wait + Teardown with the image
 *            pinned, next to the same with "host", alternating (p50, p90)
 *
 * The OCI layout L is made first from a rootfs tar (the one build.sh
 * --keep-tar leaves) with umoci: init, new, unpack --rootless, the tar
 * extracted into the bundle, repack, gc: one gzip layer, as a registry
 * would serve it. sbxd runs privately (ipc listener, state in a temporary
 * directory removed at the end). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "bench_sbxd.h"
#include "bench_scratch.h"
#include "bench_util.h"
#include "sbxclient.h"
#include "util.h"

#define PROG		 "sbx-bench-image"
#define MIB		 (1024.0 * 1024.0)
#define IMAGE_NAME	 "recon-runtime:bench"
#define LAYOUT_REF	 "bench"
#define START_TIMEOUT_MS 15000
#define STOP_TIMEOUT_MS	 30000
#define CALL_TIMEOUT_MS	 60000

static pid_t sbxd_pid = -1;
static bool cleaning;
static char *const child_env[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", NULL};

/* ------------------------------------------------------------ children */

/* Makes a tree we own removable (umoci and the store keep read-only
 * directories read-only), then removes it. */
static void remove_tree(const char *dir)
{
	char *chmod_argv[] = {"chmod", "-R", "u+rwX", (char *)dir, NULL};
	char *rm_argv[] = {"rm", "-rf", "--one-file-system", (char *)dir, NULL};

	if (access(dir, F_OK) != 0)
		return;
	bench_run_ok("chmod", chmod_argv, child_env, NULL, NULL);
	bench_run_ok("rm", rm_argv, child_env, NULL, NULL);
}

static void stop_sbxd(void)
{
	bench_stop_child(&sbxd_pid, "sbxd", STOP_TIMEOUT_MS);
}

static void cleanup(void)
{
	if (cleaning)
		return;
	cleaning = true;
	stop_sbxd();
	if (bench_scratch_dir()[0])
		remove_tree(bench_scratch_dir());
	bench_scratch_remove();
}

/* ------------------------------------------------------------ disk use */

static uint64_t tree_bytes;

static int add_blocks(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
	(void)path;
	(void)ftw;
	if (type != FTW_NS)
		tree_bytes += (uint64_t)sb->st_blocks * 512;
	return 0;
}

/* Bytes on disk under dir (blocks, so sparse files and small files count as
 * the file system stores them); links are not followed. */
static uint64_t disk_bytes(const char *dir)
{
	tree_bytes = 0;
	if (nftw(dir, add_blocks, 32, FTW_PHYS | FTW_MOUNT) < 0)
		bench_die_errno("walk %s", dir);
	return tree_bytes;
}

/* ------------------------------------------------------------ the layout */

static void make_layout(const char *tar, const char *layout)
{
	char image[PATH_MAX + 16], bundle[PATH_MAX], rootfs[PATH_MAX];

	snprintf(image, sizeof(image), "%s:%s", layout, LAYOUT_REF);
	bench_scratch_path(bundle, sizeof(bundle), "layout-bundle");
	bench_scratch_path(rootfs, sizeof(rootfs), "layout-bundle/rootfs");
	char *init[] = {"umoci", "init", "--layout", (char *)layout, NULL};
	char *new[] = {"umoci", "new", "--image", image, NULL};
	char *unpack[] = {"umoci", "unpack", "--rootless", "--image", image, bundle, NULL};
	/* -p: the tar's modes, not ours minus the umask; device nodes cannot be
	 * made unprivileged (and the store skips them anyway) */
	char *extract[] = {
	    "tar", "-C", rootfs, "-xpf", (char *)tar, "--exclude=./dev/*", "--no-same-owner", NULL};
	char *repack[] = {"umoci", "repack", "--image", image, bundle, NULL};
	char *gc[] = {"umoci", "gc", "--layout", (char *)layout, NULL};

	bench_note("making an OCI layout from %s with umoci", tar);
	double t0 = bench_now_ms();
	bench_run_ok("umoci init", init, child_env, NULL, NULL);
	bench_run_ok("umoci new", new, child_env, NULL, NULL);
	bench_run_ok("umoci unpack (empty image)", unpack, child_env, NULL, NULL);
	bench_run_ok("tar -x", extract, child_env, NULL, NULL);
	bench_run_ok("umoci repack", repack, child_env, NULL, NULL);
	bench_run_ok("umoci gc", gc, child_env, NULL, NULL);
	remove_tree(bundle);
	bench_note("layout %s: %.1f MiB, made in %.1f s", layout, disk_bytes(layout) / MIB,
		   (bench_now_ms() - t0) / 1e3);
}

/* ------------------------------------------------------------ import vs umoci */

struct series {
	double *ms;
	double *bytes;
	size_t n;
};

static void series_init(struct series *s, size_t n)
{
	s->ms = calloc(n, sizeof(double));
	s->bytes = calloc(n, sizeof(double));
	s->n = 0;
	if (!s->ms || !s->bytes)
		bench_die("out of memory");
}

/* `sbxd image --state-dir S import` of the layout into a fresh state
 * directory; the pin it printed into pin (when non-NULL). */
static double import_once(const char *sbxd, const char *state, const char *layout, char *pin,
			  size_t pin_size, uint64_t *bytes)
{
	char out[PATH_MAX], images[PATH_MAX + 8];
	char *argv[] = {(char *)sbxd, "image",	      "--state-dir",  (char *)state, "import",
			IMAGE_NAME,   "--oci-layout", (char *)layout, "--ref",	     LAYOUT_REF,
			NULL};

	if (mkdir(state, 0700) < 0 && errno != EEXIST)
		bench_die_errno("mkdir %s", state);
	bench_scratch_path(out, sizeof(out), "import.stdout");
	double ms = bench_run_ok("sbxd image import", argv, child_env, NULL, out);
	snprintf(images, sizeof(images), "%s/images", state);
	*bytes = disk_bytes(images);
	if (pin) {
		FILE *f = fopen(out, "re");
		if (!f || !fgets(pin, (int)pin_size, f))
			bench_die("sbxd image import printed no pin");
		fclose(f);
		pin[strcspn(pin, "\n")] = '\0';
	}
	return ms;
}

static double umoci_once(const char *layout, const char *bundle, uint64_t *bytes)
{
	char image[PATH_MAX + 16];
	char *argv[] = {"umoci", "unpack", "--rootless", "--image", image, (char *)bundle, NULL};

	snprintf(image, sizeof(image), "%s:%s", layout, LAYOUT_REF);
	double ms = bench_run_ok("umoci unpack", argv, child_env, NULL, NULL);
	*bytes = disk_bytes(bundle);
	return ms;
}

static void bench_import(const char *sbxd, const char *layout, long n, struct series *imp,
			 struct series *umo)
{
	series_init(imp, (size_t)n);
	series_init(umo, (size_t)n);
	bench_note("import into a fresh store vs umoci unpack --rootless, x %ld, alternating", n);
	for (long i = 0; i < n; i++) {
		char state[PATH_MAX], bundle[PATH_MAX];
		uint64_t b;

		bench_check_interrupt();
		bench_scratch_path(state, sizeof(state), "import-state");
		bench_scratch_path(bundle, sizeof(bundle), "umoci-bundle");
		/* Alternate which goes first, so neither always meets the other's
		 * page cache. */
		for (int k = 0; k < 2; k++) {
			if ((k == 0) == (i % 2 == 0)) {
				imp->ms[imp->n] = import_once(sbxd, state, layout, NULL, 0, &b);
				imp->bytes[imp->n++] = (double)b;
				remove_tree(state);
			} else {
				umo->ms[umo->n] = umoci_once(layout, bundle, &b);
				umo->bytes[umo->n++] = (double)b;
				remove_tree(bundle);
			}
		}
		bench_note("import %ld/%ld: sbxd %.0f ms, umoci %.0f ms", i + 1, n,
			   imp->ms[imp->n - 1], umo->ms[umo->n - 1]);
	}
}

/* ------------------------------------------------------------ sbxd */

static void start_sbxd(const char *sbxd, const char *helper, const char *state, char *endpoint,
		       size_t size)
{
	char config[PATH_MAX], audit[PATH_MAX], log[PATH_MAX];

	bench_scratch_path(config, sizeof(config), "sbxd.json");
	bench_scratch_path(audit, sizeof(audit), "audit.log");
	bench_scratch_path(log, sizeof(log), "sbxd.stderr");
	if ((size_t)snprintf(endpoint, size, "ipc://%s/sbxd.sock", bench_scratch_dir()) >= size)
		bench_die("socket path too long");
	json_t *cfg = json_pack("{s:[s], s:s, s:s, s:s}", "listen", endpoint, "state_dir", state,
				"helper", helper, "log", audit);
	if (!cfg || json_dump_file(cfg, config, JSON_INDENT(2)) < 0)
		bench_die_errno("write %s", config);
	json_decref(cfg);

	char *argv[] = {(char *)sbxd, "--config", config, NULL};
	bench_note("starting %s --config %s", sbxd, config);
	sbxd_pid = bench_spawn(argv, child_env, log);
	bench_sbxd_wait(endpoint, &sbxd_pid, log, START_TIMEOUT_MS);
}

static void call_failed(const char *call, const char *image, const struct sbx_rpc_status *st)
    __attribute__((noreturn));
static void call_failed(const char *call, const char *image, const struct sbx_rpc_status *st)
{
	if (bench_interrupted)
		bench_die("interrupted (during %s)", call);
	bench_die("%s (image %s) failed: %s: %s", call, image, sbx_code_name(st->code),
		  st->err.msg);
}

/* One run's life with image: CreateRun, Exec(/bin/true), Wait, Teardown. */
static double cycle(sbx_client *c, const char *image)
{
	static char *argv_true[] = {"/bin/true", NULL};
	Sbx__V1__CreateRunRequest cr = SBX__V1__CREATE_RUN_REQUEST__INIT;
	Sbx__V1__ExecRequest er = SBX__V1__EXEC_REQUEST__INIT;
	struct sbx_rpc_status st;
	char policy[512];

	snprintf(policy, sizeof(policy),
		 "{\"image\":\"%s\",\"limits\":{\"script_seconds\":30,\"memory_mb\":256}}", image);
	cr.policy_json = policy;
	double t0 = bench_now_ms();
	Sbx__V1__CreateRunResponse *run = sbx_create_run(c, &cr, &st);
	if (!run)
		call_failed("CreateRun", image, &st);
	er.run_id = run->run_id;
	er.argv = argv_true;
	er.n_argv = 1;
	Sbx__V1__ExecResponse *e = sbx_exec(c, &er, &st);
	if (!e)
		call_failed("Exec", image, &st);
	Sbx__V1__WaitResponse *w = sbx_wait_end(c, run->run_id, e->exec_id, &st);
	if (!w)
		call_failed("Wait", image, &st);
	if (w->status->reason != SBX__V1__EXIT_REASON__EXITED || w->status->exit_code != 0)
		bench_die("/bin/true in %s ended %s (exit code %d)", image,
			  sbx_exit_reason_name(w->status->reason), w->status->exit_code);
	Sbx__V1__TeardownResponse *t = sbx_teardown(c, run->run_id, &st);
	if (!t)
		call_failed("Teardown", image, &st);
	double ms = bench_now_ms() - t0;
	sbx__v1__teardown_response__free_unpacked(t, NULL);
	sbx__v1__wait_response__free_unpacked(w, NULL);
	sbx__v1__exec_response__free_unpacked(e, NULL);
	sbx__v1__create_run_response__free_unpacked(run, NULL);
	return ms;
}

static void bench_startup(const char *endpoint, const char *pin, long n, struct series *img,
			  struct series *host)
{
	sbx_client *c = bench_client_open(endpoint, CALL_TIMEOUT_MS, 0);

	series_init(img, (size_t)n);
	series_init(host, (size_t)n);
	bench_note("CreateRun+Exec(/bin/true)+Wait+Teardown x %ld in %s and in host, alternating",
		   n, pin);
	for (int i = 0; i < 2; i++) { /* warm-up */
		cycle(c, pin);
		cycle(c, "host");
	}
	for (long i = 0; i < n; i++) {
		bench_check_interrupt();
		if (i % 2 == 0) {
			img->ms[img->n++] = cycle(c, pin);
			host->ms[host->n++] = cycle(c, "host");
		} else {
			host->ms[host->n++] = cycle(c, "host");
			img->ms[img->n++] = cycle(c, pin);
		}
		if ((i + 1) % 10 == 0 || i + 1 == n)
			bench_note("start-up %ld/%ld", i + 1, n);
	}
	sbx_client_close(c);
}

/* ------------------------------------------------------------ output */

static double ratio(double a, double b)
{
	return b > 0 ? a / b : 0;
}

static void print_results(const struct series *imp, const struct series *umo,
			  const struct series *img, const struct series *host, double layout_mib,
			  const char *pin)
{
	struct bench_host h;
	double ip = bench_pct(imp->ms, imp->n, 50), up = bench_pct(umo->ms, umo->n, 50);
	double ib = bench_pct(imp->bytes, imp->n, 50), ub = bench_pct(umo->bytes, umo->n, 50);
	double sp = bench_pct(img->ms, img->n, 50), hp = bench_pct(host->ms, host->n, 50);

	bench_probe_host(&h);
	printf("image: %s (OCI layout %.1f MiB, one gzip layer)\n", pin, layout_mib);
	printf("%-34s %-10s %-10s %-10s %s\n", "measure", "p50", "p90", "disk", "ratio (p50)");
	printf("%-34s %-10.0f %-10.0f %-10.1f\n", "sbxd image import (ms, MiB)", ip,
	       bench_pct(imp->ms, imp->n, 90), ib / MIB);
	printf("%-34s %-10.0f %-10.0f %-10.1f time %.2f, disk %.2f\n",
	       "umoci unpack --rootless (ms, MiB)", up, bench_pct(umo->ms, umo->n, 90), ub / MIB,
	       ratio(ip, up), ratio(ib, ub));
	printf("%-34s %-10.1f %-10.1f\n", "start-up, pinned image (ms)", sp,
	       bench_pct(img->ms, img->n, 90));
	printf("%-34s %-10.1f %-10.1f %-10s %.2f\n", "start-up, host (ms)", hp,
	       bench_pct(host->ms, host->n, 90), "", ratio(sp, hp));
	printf("(ratios: sbxd import / umoci unpack, pinned image / host; start-up is\n"
	       " CreateRun + Exec(/bin/true) + Wait + Teardown over ipc)\n");
	printf("counts: %zu imports, %zu umoci unpacks, %zu + %zu start-ups\n", imp->n, umo->n,
	       img->n, host->n);
	printf("host: %s, cgroup %s%s, %ld CPUs, load %.2f %.2f %.2f\n", h.kernel, h.cgroup,
	       h.hybrid ? " (hybrid)" : "", h.cpus, h.load[0], h.load[1], h.load[2]);
}

/* ------------------------------------------------------------ main */

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: %s --rootfs-tar FILE [--sbxd PATH] [--helper PATH] [--imports N]\n"
		"       [--cycles N] [--quick] [--help]\n"
		"\n"
		"The image store against umoci, and start-up in a pinned image against host:\n"
		"  an OCI layout is made from FILE with umoci (init, new, unpack --rootless,\n"
		"  the tar extracted, repack); then `sbxd image import --oci-layout` into a\n"
		"  fresh store and `umoci unpack --rootless` of the same layout, alternating\n"
		"  (wall time, bytes on disk); then CreateRun+Exec(/bin/true)+Wait+Teardown\n"
		"  with the imported image pinned and with host, alternating, through a\n"
		"  private sbxd. Prints p50/p90 and the ratios.\n"
		"\n"
		"  --rootfs-tar FILE  the rootfs tar (packaging/images/recon-runtime/build.sh\n"
		"                     --keep-tar FILE leaves one)\n"
		"  --sbxd PATH        sbxd (default: ../server/sbxd next to this program)\n"
		"  --helper PATH      sbx-helper (default: ../helper/sbx-helper)\n"
		"  --imports N        import/unpack pairs (default 5; 1..100)\n"
		"  --cycles N         start-up pairs (default 40; 1..10000)\n"
		"  --quick            --imports 2 --cycles 8\n"
		"  -h, --help         this text\n",
		PROG);
}

int main(int argc, char **argv)
{
	enum { OPT_TAR = 256, OPT_SBXD, OPT_HELPER, OPT_IMPORTS, OPT_CYCLES, OPT_QUICK };
	static const struct option opts[] = {
	    {"rootfs-tar", required_argument, NULL, OPT_TAR},
	    {"sbxd", required_argument, NULL, OPT_SBXD},
	    {"helper", required_argument, NULL, OPT_HELPER},
	    {"imports", required_argument, NULL, OPT_IMPORTS},
	    {"cycles", required_argument, NULL, OPT_CYCLES},
	    {"quick", no_argument, NULL, OPT_QUICK},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	const char *tar = NULL, *sbxd = NULL, *helper = NULL;
	char sbxd_buf[PATH_MAX], helper_buf[PATH_MAX], tar_buf[PATH_MAX];
	long imports = 5, cycles = 40;
	int opt;

	bench_prog = PROG;
	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case OPT_TAR:
			tar = optarg;
			break;
		case OPT_SBXD:
			sbxd = optarg;
			break;
		case OPT_HELPER:
			helper = optarg;
			break;
		case OPT_IMPORTS:
			imports = bench_parse_count("--imports", optarg, 1, 100);
			break;
		case OPT_CYCLES:
			cycles = bench_parse_count("--cycles", optarg, 1, 10000);
			break;
		case OPT_QUICK:
			imports = 2;
			cycles = 8;
			break;
		default:
			return bench_option_other(opt, usage);
		}
	}
	int rc = bench_no_operands(argc, argv, optind, usage);
	if (rc || opt == 'h')
		return rc;
	if (!tar) {
		bench_note("--rootfs-tar FILE is required");
		usage(stderr);
		return 2;
	}
	bench_refuse_root(argv[0], "sbx-helper refuses to run as real root");
	bench_find_sbxd_helper(&sbxd, sbxd_buf, &helper, helper_buf, sizeof(sbxd_buf));
	bench_make_absolute(&sbxd, sbxd_buf, sizeof(sbxd_buf));
	bench_make_absolute(&helper, helper_buf, sizeof(helper_buf));
	bench_make_absolute(&tar, tar_buf, sizeof(tar_buf));

	bench_on_signals(bench_on_signal);
	bench_scratch_make();
	if (atexit(cleanup) != 0)
		bench_die("atexit failed");
	bench_note("temporary directory %s", bench_scratch_dir());

	char layout[PATH_MAX], state[PATH_MAX], endpoint[PATH_MAX + 8], pin[256];
	struct series imp, umo, img, host;
	uint64_t b;

	bench_scratch_path(layout, sizeof(layout), "layout");
	make_layout(tar, layout);
	double layout_mib = disk_bytes(layout) / MIB;
	bench_import(sbxd, layout, imports, &imp, &umo);

	bench_scratch_path(state, sizeof(state), "state");
	import_once(sbxd, state, layout, pin, sizeof(pin), &b);
	bench_note("imported %s for the runs", pin);
	start_sbxd(sbxd, helper, state, endpoint, sizeof(endpoint));
	bench_startup(endpoint, pin, cycles, &img, &host);
	stop_sbxd();

	print_results(&imp, &umo, &img, &host, layout_mib, pin);
	return 0;
}
