/* SPDX-License-Identifier: Apache-2.0 */
/* Unit test of /etc/subuid parsing (common/subids.c): both spellings of the
 * user (name and uid), several ranges in file order, what shadow's tools
 * skip (comments, malformed lines, empty ranges, ids past 32 bits), and the
 * slot arithmetic across ranges that sbx-helper takes host uids by. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "subids.h"

static const char text[] = "# a comment\n"
			   "alice:100000:65536\n"
			   "bob:165536:65536\n"
			   "999:300000:10\n"
			   "sbx-test:400000:5\n"
			   "sbx-test:not-a-number:5\n"
			   "sbx-test:500000:0\n"
			   "sbx-test:4294967290:100\n"
			   "sbx-test:600000\n"
			   "\n";

int main(void)
{
	char path[] = "/tmp/sbx-test-subids-XXXXXX";
	int fd = mkstemp(path);
	if (fd < 0 || write(fd, text, sizeof(text) - 1) != (ssize_t)(sizeof(text) - 1)) {
		perror("temp file");
		return 1;
	}
	close(fd);
	struct sbx_subids s;
	struct sbx_err err;

	check(sbx_subids_read(path, "sbx-test", 999, &s, &err) == 0, "read");
	check(s.n == 2, "by name and by uid, malformed and empty lines skipped: %zu ranges", s.n);
	check(s.n == 2 && s.r[0].start == 300000 && s.r[0].count == 10 && s.r[1].start == 400000 &&
		  s.r[1].count == 5,
	      "ranges in file order");
	check(s.total == 15, "total %llu", (unsigned long long)s.total);
	check(sbx_subids_nth(&s, 0) == 300000, "slot 0 is the first id");
	check(sbx_subids_nth(&s, 9) == 300009, "slot 9 the first range's last");
	check(sbx_subids_nth(&s, 10) == 400000, "slot 10 the second range's first");
	check(sbx_subids_nth(&s, 15) == UINT64_MAX, "past the ranges: none");

	check(sbx_subids_read(path, "alice", 1000, &s, &err) == 0 && s.n == 1 &&
		  s.r[0].start == 100000 && s.total == 65536,
	      "alice");
	check(sbx_subids_read(path, "carol", 1002, &s, &err) == 0 && s.n == 0 && s.total == 0,
	      "no entry: no ranges, no error");
	check(sbx_subids_read("/nonexistent/subuid", "alice", 1000, &s, &err) == 0 && s.n == 0,
	      "no file: no ranges, no error");
	unlink(path);
	return check_done();
}
