/* SPDX-License-Identifier: Apache-2.0 */
/* `sbx-helper check`'s verdict on user namespaces (helper/userns_diag.c)
 * for the hosts people run, fed as the sysctls and AppArmor label check
 * reads: each failure names its own cause and fix. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "userns_diag.h"

static struct sbx_userns_verdict verdict(bool works, const char *max, const char *clone,
					 const char *restrict_, const char *label)
{
	struct sbx_userns_host h = {works, max, clone, restrict_, label};
	return sbx_userns_diagnose(&h);
}

static bool is(struct sbx_userns_verdict v, const char *reason, const char *in_fix)
{
	if (strcmp(v.reason, reason) != 0)
		return false;
	return in_fix ? v.fix && strstr(v.fix, in_fix) : !v.fix;
}

int main(void)
{
	/* This host and the hosts where it works. */
	check(is(verdict(true, "96362", "", "", ""), "ok", NULL), "works: ok, no fix");
	check(is(verdict(true, "15000", "1", "1", "sbx-helper (unconfined)"), "ok", NULL),
	      "Ubuntu 24.04 with the profile loaded: ok");
	check(is(verdict(true, "15000", "", "1", "unconfined"), "ok", NULL),
	      "a working test wins over the sysctls (root, or a kernel that lets it)");

	/* Disabled outright. */
	check(is(verdict(false, "0", "", "", ""), "max_user_namespaces",
		 "sysctl -w user.max_user_namespaces=15000"),
	      "user.max_user_namespaces=0 names its sysctl");
	check(is(verdict(false, "0", "0", "1", "unconfined"), "max_user_namespaces",
		 "user.max_user_namespaces"),
	      "a zero count is named first, whatever else is set");
	check(is(verdict(false, "15000", "0", "", ""), "unprivileged_userns_clone",
		 "sysctl -w kernel.unprivileged_userns_clone=1"),
	      "Debian's kernel.unprivileged_userns_clone=0 names its sysctl");
	check(is(verdict(false, "15000", "0", "1", "unconfined"), "unprivileged_userns_clone",
		 "unprivileged_userns_clone=1"),
	      "Debian's switch before AppArmor's restriction");

	/* Ubuntu 23.10+ and 24.04. */
	const char *aa_fix = "apparmor_parser -r /etc/apparmor.d/sbx-helper";
	check(is(verdict(false, "15000", "1", "1", "unconfined"),
		 "apparmor_restrict_unprivileged_userns", aa_fix),
	      "restricted and unconfined: install and load the profile");
	check(is(verdict(false, "15000", "", "1", ""), "apparmor_restrict_unprivileged_userns",
		 aa_fix),
	      "restricted, no label readable: the profile");
	check(is(verdict(false, "15000", "", "1", "unprivileged_userns"),
		 "apparmor_restrict_unprivileged_userns", "/etc/apparmor.d/sbx-helper"),
	      "moved into Ubuntu's unprivileged_userns profile: ours is what grants userns");
	check(is(verdict(false, "15000", "", "1", "sbx-helper-old (enforce)"),
		 "apparmor_restrict_unprivileged_userns", aa_fix),
	      "another profile whose name starts like ours is not ours");
	check(is(verdict(false, "15000", "", "1", "sbx-helper (unconfined)"), "unknown",
		 "CONFIG_USER_NS"),
	      "our profile attached and still failing: not the restriction");
	check(is(verdict(false, "15000", "", "0", "unconfined"), "unknown", "CONFIG_USER_NS"),
	      "the restriction off: not AppArmor");
	check(is(verdict(false, "", "", "", ""), "unknown", "CONFIG_USER_NS"),
	      "no knob at all (a kernel without user namespaces)");
	return check_done();
}
