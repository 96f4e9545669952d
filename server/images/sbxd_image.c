/* SPDX-License-Identifier: Apache-2.0 */
/* sbxd-image, which `sbxd image` runs: import, list, inspect and rm on the
 * image store, with the store's place and bounds taken from sbxd's own
 * configuration (so that the store sbxd resolves policies in is the one
 * written here). stdout carries only the result (the pinned reference, the
 * list, the JSON); progress and errors go to stderr. There is no RPC for
 * it: import needs the files on this host anyway, and the RPC has no
 * administrator identity to allow it to (Health lists the store's pins).
 * A program of its own so that sbxd does not link libarchive. */

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "config.h"
#include "images.h"
#include "images_internal.h"
#include "path.h"
#include "util.h"

/* clang-format off */
static const char usage_main[] =
	"usage: sbxd image [--config FILE] [--state-dir DIR] [--images-dir DIR] COMMAND ...\n"
	"\n"
	"The image store: pinned root file systems that policies name as\n"
	"name:tag@sha256:<hex>. Run it as the user sbxd runs as (the store's owner).\n"
	"\n"
	"  import NAME:TAG SOURCE   unpack an image into the store; prints its pin\n"
	"  list [--json]            the store's images\n"
	"  inspect REF              an image's record (JSON)\n"
	"  rm [--untag] REF         remove a tag (and the tree once no tag names it)\n"
	"\n"
	"  --config FILE      sbxd's configuration (state_dir, images.*)\n"
	"  --state-dir DIR    sbxd's state directory (the store is DIR/images)\n"
	"  --images-dir DIR   the store itself (default: config images.dir, else\n"
	"                     <state_dir>/images)\n"
	"  -h, --help         this text; COMMAND --help: the command's\n"
	"\n"
	"REF is name:tag, name:tag@sha256:<hex> or sha256:<hex>. Exit status: 0, 1 on\n"
	"an error, 2 on a usage error.\n";

static const char usage_import[] =
	"usage: sbxd image [OPTIONS] import NAME:TAG SOURCE [LIMITS]\n"
	"\n"
	"Unpacks an image into the store once (the same content again is reused)\n"
	"and prints its pinned reference, NAME:TAG@sha256:<hex>, alone on stdout;\n"
	"progress goes to stderr. NAME:TAG then names that digest.\n"
	"\n"
	"SOURCE, one of:\n"
	"  --oci-layout DIR [--ref REF]      an OCI image layout directory\n"
	"  --oci-archive FILE [--ref REF]    a tar of one (skopeo copy oci-archive:)\n"
	"  --docker-archive FILE [--ref REF] docker save / podman save\n"
	"  --rootfs DIR                      a root file system directory\n"
	"  --rootfs-tar FILE                 a tar of one (plain, gzip or zstd)\n"
	"The digest of an OCI or docker image is its manifest's sha256 (what skopeo\n"
	"inspect shows); that of a rootfs is its canonical tree hash (sbxd-image(8)). --ref\n"
	"picks a manifest of an index by its ref.name annotation.\n"
	"\n"
	"LIMITS (default: config images.max_*, else the built-in bounds):\n"
	"  --max-entries N      tar entries, all layers (1000000)\n"
	"  --max-bytes N        bytes of file content (17179869184)\n"
	"  --max-file-bytes N   bytes of one file (4294967296)\n";

static const char usage_list[] =
	"usage: sbxd image [OPTIONS] list [--json]\n"
	"\n"
	"The store's images, one a line: REF, DIGEST (short), SIZE, IMPORTED (UTC).\n"
	"A tree no tag names shows as sha256:<hex>: live runs still hold it, or the\n"
	"next import or rm removes it.\n"
	"  --json   a JSON array of {ref, digest, size_bytes, imported_unix_ms, kind}\n";

static const char usage_inspect[] =
	"usage: sbxd image [OPTIONS] inspect REF\n"
	"\n"
	"Prints the image's record as JSON: its digest, source, the image's own\n"
	"config (Env, WorkingDir, User: shown, never applied to a run), layers,\n"
	"what unpacking did, every tag naming it, and its rootfs path.\n";

static const char usage_rm[] =
	"usage: sbxd image [OPTIONS] rm [--untag] REF\n"
	"\n"
	"Removes name:tag (or, given sha256:<hex>, every tag naming that digest);\n"
	"the tree goes once no tag names it. An image a live run uses is refused\n"
	"and nothing changes.\n"
	"  --untag   remove the tag(s) even while live runs use the image: no new\n"
	"            run can take it from then on, the runs that hold it keep it,\n"
	"            and its tree is removed by the first import or rm after the\n"
	"            last of them has ended\n"
	"Every import and rm removes the trees no tag names that no run holds\n"
	"(left by --untag, by a retag while a run held the old tree, or by a crash).\n";
/* clang-format on */

enum {
	OPT_CONFIG = 256,
	OPT_STATE_DIR,
	OPT_IMAGES_DIR,
	OPT_OCI_LAYOUT,
	OPT_OCI_ARCHIVE,
	OPT_DOCKER_ARCHIVE,
	OPT_ROOTFS,
	OPT_ROOTFS_TAR,
	OPT_REF,
	OPT_MAX_ENTRIES,
	OPT_MAX_BYTES,
	OPT_MAX_FILE_BYTES,
	OPT_JSON,
	OPT_UNTAG,
};

/* In the enum's order: long_opts[c - OPT_CONFIG] is option c. */
/* clang-format off */
static const struct option long_opts[] = {
	{"config", required_argument, NULL, OPT_CONFIG},
	{"state-dir", required_argument, NULL, OPT_STATE_DIR},
	{"images-dir", required_argument, NULL, OPT_IMAGES_DIR},
	{"oci-layout", required_argument, NULL, OPT_OCI_LAYOUT},
	{"oci-archive", required_argument, NULL, OPT_OCI_ARCHIVE},
	{"docker-archive", required_argument, NULL, OPT_DOCKER_ARCHIVE},
	{"rootfs", required_argument, NULL, OPT_ROOTFS},
	{"rootfs-tar", required_argument, NULL, OPT_ROOTFS_TAR},
	{"ref", required_argument, NULL, OPT_REF},
	{"max-entries", required_argument, NULL, OPT_MAX_ENTRIES},
	{"max-bytes", required_argument, NULL, OPT_MAX_BYTES},
	{"max-file-bytes", required_argument, NULL, OPT_MAX_FILE_BYTES},
	{"json", no_argument, NULL, OPT_JSON},
	{"untag", no_argument, NULL, OPT_UNTAG},
	{"help", no_argument, NULL, 'h'},
	{0},
};
/* clang-format on */

/* In the order of OPT_OCI_LAYOUT..OPT_ROOTFS_TAR. */
static const enum img_source_kind source_kinds[] = {
    IMG_FROM_OCI_LAYOUT, IMG_FROM_OCI_ARCHIVE, IMG_FROM_DOCKER_ARCHIVE,
    IMG_FROM_ROOTFS_DIR, IMG_FROM_ROOTFS_TAR,
};

struct args {
	const char *config, *state_dir, *images_dir;
	const char *source, *ref;
	int kind; /* enum img_source_kind, -1: none given */
	int n_sources;
	uint64_t max[3]; /* --max-entries, --max-bytes, --max-file-bytes; 0: not given */
	bool json, untag, help, import_only;
	const char *pos[4];
	int n_pos;
};

__attribute__((format(printf, 1, 2))) static int usage_error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("sbxd image: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputs("\n\n", stderr);
	va_end(ap);
	fputs(usage_main, stderr);
	return 2;
}

static int error_exit(const struct sbx_err *err)
{
	fprintf(stderr, "sbxd image: error: %s\n", err->msg);
	return 1;
}

static int parse_count(const char *flag, const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-' || v == 0)
		return usage_error("--%s %s: must be a positive integer", flag, s);
	*out = v;
	return 0;
}

static void set_source(struct args *a, int kind, const char *path)
{
	a->kind = kind;
	a->source = path;
	a->n_sources++;
	a->import_only = true;
}

/* One pass over every flag (they may come before or after the command);
 * which ones the command takes is checked after. */
static int parse_args(int argc, char **argv, struct args *a)
{
	int c;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", long_opts, NULL)) != -1) {
		switch (c) {
		case OPT_CONFIG:
			a->config = optarg;
			break;
		case OPT_STATE_DIR:
			a->state_dir = optarg;
			break;
		case OPT_IMAGES_DIR:
			a->images_dir = optarg;
			break;
		case OPT_OCI_LAYOUT:
		case OPT_OCI_ARCHIVE:
		case OPT_DOCKER_ARCHIVE:
		case OPT_ROOTFS:
		case OPT_ROOTFS_TAR:
			set_source(a, source_kinds[c - OPT_OCI_LAYOUT], optarg);
			break;
		case OPT_REF:
			a->ref = optarg;
			a->import_only = true;
			break;
		case OPT_MAX_ENTRIES:
		case OPT_MAX_BYTES:
		case OPT_MAX_FILE_BYTES:
			a->import_only = true;
			if (parse_count(long_opts[c - OPT_CONFIG].name, optarg,
					&a->max[c - OPT_MAX_ENTRIES]))
				return 2;
			break;
		case OPT_JSON:
			a->json = true;
			break;
		case OPT_UNTAG:
			a->untag = true;
			break;
		case 'h':
			a->help = true;
			break;
		default:
			if (optopt)
				return usage_error("bad option -%c", optopt);
			return usage_error("bad option '%s'", argv[optind - 1]);
		}
	}
	for (int i = optind; i < argc; i++) {
		if (a->n_pos == (int)SBX_ARRAY_SIZE(a->pos))
			return usage_error("unexpected argument '%s'", argv[i]);
		a->pos[a->n_pos++] = argv[i];
	}
	return 0;
}

/* The command's own checks; the text of its usage in *usage. */
static const struct command {
	const char *name, *usage;
	int n_pos;	  /* the command and its arguments */
	const char *args; /* what they are, for a usage error */
} commands[] = {
    {"import", usage_import, 2, "NAME:TAG and a SOURCE flag"},
    {"list", usage_list, 1, "no argument"},
    {"inspect", usage_inspect, 2, "one REF"},
    {"rm", usage_rm, 2, "one REF"},
};

static int check_args(const struct args *a, const char **usage)
{
	const struct command *c = NULL;

	*usage = usage_main;
	if (!a->n_pos)
		return a->help ? 0 : usage_error("a command is needed (import, list, inspect, rm)");
	for (size_t i = 0; i < SBX_ARRAY_SIZE(commands); i++)
		if (!strcmp(a->pos[0], commands[i].name))
			c = &commands[i];
	if (!c)
		return usage_error("unknown command '%s'", a->pos[0]);
	*usage = c->usage;
	if (a->help)
		return 0;
	if (a->n_pos != c->n_pos)
		return usage_error("%s takes %s", c->name, c->args);
	if (a->json && strcmp(c->name, "list"))
		return usage_error("--json is a flag of list");
	if (a->untag && strcmp(c->name, "rm"))
		return usage_error("--untag is a flag of rm");
	if (strcmp(c->name, "import"))
		return a->import_only ? usage_error("source, --ref and limit flags are import's")
				      : 0;
	if (a->n_sources != 1)
		return usage_error("import takes exactly one of --oci-layout, --oci-archive, "
				   "--docker-archive, --rootfs, --rootfs-tar");
	if (a->ref && (a->kind == IMG_FROM_ROOTFS_DIR || a->kind == IMG_FROM_ROOTFS_TAR))
		return usage_error("--ref picks a manifest of an OCI or docker source");
	return 0;
}

/* sbxd's configuration with the flags over it: the store's directory and an
 * import's bounds. */
static int settings(const struct args *a, char **dir, struct img_limits *lim)
{
	struct sbx_config cfg;
	struct sbx_config_flags f = {.state_dir = a->state_dir};
	struct sbx_err err;
	const char *why;
	int rc = 0;

	if (a->images_dir && (why = sbx_path_problem(a->images_dir, PATH_MAX, SBX_PATH_ABSOLUTE)))
		return usage_error("--images-dir %s: %s", a->images_dir, why);
	if (sbx_config_load(a->config, &cfg, &err) < 0)
		return error_exit(&err);
	if (sbx_config_apply_flags(&cfg, &f, &err) < 0)
		rc = usage_error("%s", err.msg);
	img_limits_default(lim);
	if (cfg.images.max_entries)
		lim->max_entries = cfg.images.max_entries;
	if (cfg.images.max_bytes)
		lim->max_bytes = cfg.images.max_bytes;
	if (cfg.images.max_file_bytes)
		lim->max_file_bytes = cfg.images.max_file_bytes;
	if (a->max[0])
		lim->max_entries = a->max[0];
	if (a->max[1])
		lim->max_bytes = a->max[1];
	if (a->max[2])
		lim->max_file_bytes = a->max[2];
	if (rc == 0 && a->images_dir)
		*dir = strdup(a->images_dir);
	else if (rc == 0 && cfg.images.dir)
		*dir = strdup(cfg.images.dir);
	else if (rc == 0 && asprintf(dir, "%s/images", cfg.state_dir) < 0)
		*dir = NULL;
	sbx_config_free(&cfg);
	if (rc == 0 && !*dir) {
		fputs("sbxd image: error: out of memory\n", stderr);
		rc = 1;
	}
	return rc;
}

__attribute__((format(printf, 2, 3))) static void progress_line(void *arg, const char *fmt, ...)
{
	va_list ap;

	(void)arg;
	va_start(ap, fmt);
	fputs("sbxd image: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

static int finish_stdout(void)
{
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, "sbxd image: error: writing stdout: %s\n", strerror(errno));
		return 1;
	}
	return 0;
}

static int cmd_import(struct img_store *s, const struct args *a, const struct img_limits *lim)
{
	struct img_progress pr = {.line = progress_line};
	struct img_import_req req = {
	    .name_tag = a->pos[1],
	    .kind = (enum img_source_kind)a->kind,
	    .path = a->source,
	    .ref = a->ref,
	    .limits = *lim,
	};
	struct img_import_result res;
	struct sbx_err err;

	if (img_import(s, &req, &pr, &res, &err) < 0)
		return error_exit(&err);
	puts(res.pinned);
	return finish_stdout();
}

static void human_size(char *buf, size_t size, double bytes)
{
	static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	size_t u = 0;

	while (bytes >= 1024 && u + 1 < SBX_ARRAY_SIZE(units))
		bytes /= 1024, u++;
	snprintf(buf, size, u ? "%.1f %s" : "%.0f %s", bytes, units[u]);
}

static void print_table(json_t *list)
{
	size_t i, w = strlen("REF");
	json_t *e;

	json_array_foreach(list, i, e)
	{
		const char *ref = json_string_value(json_object_get(e, "ref"));
		const char *at = strchr(ref, '@');
		size_t len = at ? (size_t)(at - ref) : strlen(ref);

		if (len > w)
			w = len;
	}
	printf("%-*s  %-19s  %10s  %s\n", (int)w, "REF", "DIGEST", "SIZE", "IMPORTED");
	json_array_foreach(list, i, e)
	{
		const char *ref = json_string_value(json_object_get(e, "ref"));
		const char *digest = json_string_value(json_object_get(e, "digest"));
		const char *at = strchr(ref, '@');
		json_int_t ms = json_integer_value(json_object_get(e, "imported_unix_ms"));
		char size[32], when[32] = "-";
		time_t t = (time_t)(ms / 1000);
		struct tm tm;

		human_size(size, sizeof(size),
			   (double)json_integer_value(json_object_get(e, "size_bytes")));
		if (ms > 0 && gmtime_r(&t, &tm))
			strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%SZ", &tm);
		printf("%-*.*s  %.19s  %10s  %s\n", (int)w, at ? (int)(at - ref) : (int)strlen(ref),
		       ref, digest, size, when);
	}
}

static int cmd_list(struct img_store *s, const struct args *a)
{
	json_auto_t *list = NULL;
	struct sbx_err err;

	if (s && img_store_list(s, &list, &err) < 0)
		return error_exit(&err);
	if (!list && !(list = json_array())) {
		fputs("sbxd image: error: out of memory\n", stderr);
		return 1;
	}
	if (a->json) {
		/* ASCII (\uXXXX past it), like inspect's */
		if (json_dumpf(list, stdout, JSON_INDENT(2) | JSON_ENSURE_ASCII) < 0) {
			(void)finish_stdout(); /* says why */
			return 1;
		}
		putchar('\n');
	} else
		print_table(list);
	return finish_stdout();
}

static int cmd_inspect(struct img_store *s, const char *ref)
{
	json_auto_t *doc = NULL;
	struct sbx_err err;

	if (img_store_inspect(s, ref, &doc, &err) < 0)
		return error_exit(&err);
	/* The image's config is its author's text, shown to a reviewer:
	 * ASCII only, so a C1 control (U+009B is CSI to some terminals) or a
	 * bidi override (U+202E) in Env or User shows as \uXXXX instead of
	 * acting on the terminal or reordering what the reviewer reads. */
	if (json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_ENSURE_ASCII) < 0) {
		(void)finish_stdout(); /* says why */
		return 1;
	}
	putchar('\n');
	return finish_stdout();
}

static int cmd_rm(struct img_store *s, const char *ref, bool untag)
{
	char kept[IMG_DIGEST_LEN + 1] = "";
	struct sbx_err err;

	if ((untag ? img_store_untag(s, ref, kept, &err) : img_store_rm(s, ref, &err)) < 0)
		return error_exit(&err);
	if (kept[0])
		fprintf(stderr,
			"sbxd image: removed the tags of %s; %s stays while live runs use it (no "
			"new run can take it) and is removed by the first import or rm after "
			"they end\n",
			ref, kept);
	else
		fprintf(stderr, "sbxd image: removed %s\n", ref);
	return 0;
}

/* argv[0] is "sbxd-image" or whatever `sbxd image` passed; exit status 0,
 * 1 (an error) or 2 (usage). */
int main(int argc, char **argv)
{
	struct args a = {.kind = -1};
	_cleanup_free_ char *dir = NULL;
	_cleanup_img_store_ struct img_store *s = NULL;
	struct img_limits lim;
	const char *usage, *cmd;
	struct sbx_err err;
	int rc;

	if ((rc = parse_args(argc, argv, &a)) || (rc = check_args(&a, &usage)))
		return rc;
	if (a.help) {
		fputs(usage, stdout);
		return finish_stdout();
	}
	if ((rc = settings(&a, &dir, &lim)))
		return rc;
	cmd = a.pos[0];
	/* Only import makes the store; the others read what is there (an
	 * absent store lists as empty). */
	if (img_store_open(dir, !strcmp(cmd, "import"), &s, &err) < 0) {
		if (err.errnum == ENOENT && !strcmp(cmd, "list"))
			return cmd_list(NULL, &a);
		if (err.errnum == ENOENT)
			fprintf(stderr,
				"sbxd image: error: %s: not in the image store %s (there is "
				"none)\n",
				a.pos[1], dir);
		return err.errnum == ENOENT ? 1 : error_exit(&err);
	}
	if (!strcmp(cmd, "import"))
		return cmd_import(s, &a, &lim);
	if (!strcmp(cmd, "list"))
		return cmd_list(s, &a);
	if (!strcmp(cmd, "inspect"))
		return cmd_inspect(s, a.pos[1]);
	return cmd_rm(s, a.pos[1], a.untag);
}
