/* SPDX-License-Identifier: Apache-2.0 */
/* sbx-no-packet PROGRAM [ARG...]: runs PROGRAM, and everything it starts,
 * where socket(AF_PACKET, ...) fails with EPERM, as on a kernel without
 * packet sockets or under a security module that refuses them: a seccomp
 * filter, inherited by every child (hence no_new_privs: setuid programs
 * such as newuidmap no longer work under it; sbxd must use host_uids
 * shared). sbxd.egress_deny runs sbxd under it to see egress deny's
 * connect watch missing on every exec. */
#include <errno.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <seccomp.h>

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: sbx-no-packet PROGRAM [ARG...]\n");
		return 2;
	}
	scmp_filter_ctx f = seccomp_init(SCMP_ACT_ALLOW);
	if (!f ||
	    seccomp_rule_add(f, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socket), 1,
			     SCMP_A0(SCMP_CMP_EQ, AF_PACKET, 0)) < 0 ||
	    prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || seccomp_load(f) < 0) {
		perror("sbx-no-packet: seccomp");
		return 1;
	}
	seccomp_release(f);
	execv(argv[1], argv + 1);
	perror("sbx-no-packet: exec");
	return 127;
}
