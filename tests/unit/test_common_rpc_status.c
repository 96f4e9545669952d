/* SPDX-License-Identifier: Apache-2.0 */
/* Unit test of the shortage mapping (common/rpc_status.c) with real errno
 * cases: an open that fails EMFILE under a lowered RLIMIT_NOFILE becomes
 * UNAVAILABLE naming descriptors and "retry"; a missing file keeps the code
 * the caller chose and its message. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "check.h"
#include "rpc_status.h"

static void test_emfile_is_unavailable(void)
{
	struct {
		struct rlimit old, low;
	} c;
	struct sbx_rpc_status st = {0};
	int fd, lowest;

	if (!check(getrlimit(RLIMIT_NOFILE, &c.old) == 0, "getrlimit"))
		return;
	/* The next descriptor open() would return: the limit just below it. */
	lowest = dup(0);
	if (!check(lowest >= 0, "dup"))
		return;
	close(lowest);
	c.low = c.old;
	c.low.rlim_cur = (rlim_t)lowest;
	if (!check(setrlimit(RLIMIT_NOFILE, &c.low) == 0, "lowering RLIMIT_NOFILE"))
		return;
	fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		sbx_rpc_fail_errno(&st, SBX__V1__CODE__INTERNAL, "/dev/null");
	setrlimit(RLIMIT_NOFILE, &c.old);
	if (!check(fd < 0 && st.err.errnum == EMFILE, "open fails with EMFILE")) {
		if (fd >= 0)
			close(fd);
		return;
	}
	check(sbx_rpc_code_unless_short(&st, SBX__V1__CODE__NOT_FOUND) == -1 &&
		  st.code == SBX__V1__CODE__UNAVAILABLE,
	      "EMFILE becomes UNAVAILABLE, whatever the caller would have said");
	check(strstr(st.err.msg, "short of file descriptors (sbxd's limit)") &&
		  strstr(st.err.msg, "retry") && strstr(st.err.msg, "/dev/null"),
	      "and says what ran short, retry, and what failed: %s", st.err.msg);
}

static void test_other_errors_keep_their_code(void)
{
	struct sbx_rpc_status st = {0};

	check(open("/nonexistent/sbx", O_RDONLY) < 0 &&
		  sbx_rpc_fail_errno(&st, SBX__V1__CODE__INTERNAL, "x") == -1 &&
		  sbx_rpc_code_unless_short(&st, SBX__V1__CODE__NOT_FOUND) == -1 &&
		  st.code == SBX__V1__CODE__NOT_FOUND && strncmp(st.err.msg, "x: ", 3) == 0,
	      "ENOENT keeps the code the caller chose: %s", st.err.msg);
	check(sbx_errno_shortage(ENFILE) && sbx_errno_shortage(ENOMEM) &&
		  sbx_errno_shortage(EAGAIN) && !sbx_errno_shortage(ENOSPC) &&
		  !sbx_errno_shortage(0),
	      "ENFILE, ENOMEM, EAGAIN are shortages; ENOSPC (a quota) and 0 are not");
}

int main(void)
{
	test_emfile_is_unavailable();
	test_other_errors_keep_their_code();
	return check_done();
}
