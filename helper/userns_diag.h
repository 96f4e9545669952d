/* SPDX-License-Identifier: Apache-2.0 */
/* Why this user cannot make the sandbox's namespaces, and what fixes it:
 * the decision `sbx-helper check` reports, apart from the reading of the
 * host so that a unit test can feed it any host. */
#ifndef SBX_HELPER_USERNS_DIAG_H
#define SBX_HELPER_USERNS_DIAG_H

#include <stdbool.h>

/* What check read. Each sysctl is its file's first line, "" when the file
 * is absent (the kernel lacks the knob). */
struct sbx_userns_host {
	bool works;			 /* the namespaces were made and a mount in them worked */
	const char *max_user_namespaces; /* user.max_user_namespaces */
	const char *unprivileged_clone;	 /* kernel.unprivileged_userns_clone (Debian) */
	const char *apparmor_restrict;	 /* kernel.apparmor_restrict_unprivileged_userns */
	const char *apparmor_label;	 /* this process's AppArmor label, "" if none */
};

struct sbx_userns_verdict {
	/* "ok", "max_user_namespaces", "unprivileged_userns_clone",
	 * "apparmor_restrict_unprivileged_userns" or "unknown". */
	const char *reason;
	const char *fix; /* NULL when ok */
};

struct sbx_userns_verdict sbx_userns_diagnose(const struct sbx_userns_host *host);

#endif
