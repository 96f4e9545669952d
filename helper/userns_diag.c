/* SPDX-License-Identifier: Apache-2.0 */
#include "userns_diag.h"

#include <string.h>

/* The profile's name (packaging/apparmor/sbx-helper): a process it confines
 * has the label "sbx-helper" (flags=(unconfined) shows as
 * "sbx-helper (unconfined)"). */
static bool confined_by_our_profile(const char *label)
{
	size_t n = strlen("sbx-helper");
	return !strncmp(label, "sbx-helper", n) && (label[n] == '\0' || label[n] == ' ');
}

/* The knobs are tested from the bluntest down: a zero namespace count or
 * Debian's switch refuse everyone, whatever AppArmor says; AppArmor's
 * restriction only refuses a process no profile grants `userns`. */
struct sbx_userns_verdict sbx_userns_diagnose(const struct sbx_userns_host *h)
{
	if (h->works)
		return (struct sbx_userns_verdict){"ok", NULL};
	if (!strcmp(h->max_user_namespaces, "0"))
		return (struct sbx_userns_verdict){
		    "max_user_namespaces",
		    "user namespaces are disabled (user.max_user_namespaces=0): as root, "
		    "sysctl -w user.max_user_namespaces=15000, and put "
		    "user.max_user_namespaces=15000 in /etc/sysctl.d/ to keep it"};
	if (!strcmp(h->unprivileged_clone, "0"))
		return (struct sbx_userns_verdict){
		    "unprivileged_userns_clone",
		    "unprivileged user namespaces are disabled (Debian's "
		    "kernel.unprivileged_userns_clone=0): as root, sysctl -w "
		    "kernel.unprivileged_userns_clone=1, and put it in /etc/sysctl.d/ to keep it"};
	if (!strcmp(h->apparmor_restrict, "1") && !confined_by_our_profile(h->apparmor_label))
		return (struct sbx_userns_verdict){
		    "apparmor_restrict_unprivileged_userns",
		    "AppArmor restricts unprivileged user namespaces "
		    "(kernel.apparmor_restrict_unprivileged_userns=1, Ubuntu 23.10+) and no "
		    "profile grants them to sbx-helper: install packaging/apparmor/sbx-helper "
		    "as /etc/apparmor.d/sbx-helper (cmake --install does) with sbx-helper at a "
		    "path it names (/usr/libexec/sbx, /usr/local/libexec/sbx, /usr/lib/sbx), "
		    "then as root: apparmor_parser -r /etc/apparmor.d/sbx-helper"};
	return (struct sbx_userns_verdict){
	    "unknown", "a kernel with user namespaces (CONFIG_USER_NS) that lets this user create "
		       "them and mount in them (a container or seccomp policy may forbid it)"};
}
