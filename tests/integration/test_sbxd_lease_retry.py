# SPDX-License-Identifier: Apache-2.0
"""A teardown that runs short (a shortage: here sbxd out of descriptors) is
tried again by the sweeper, without anyone calling, until it ends."""
import os
import resource
import unittest

from sbxrpc import sandbox_pb2 as pb
from test_sbxd_lease import LeaseTestCase, events, wait_for


class UnfinishedTeardownRetried(LeaseTestCase):
    CONFIG = {"expired_keep_seconds": 600}

    def test_the_sweeper_finishes_a_teardown_that_ran_short(self):
        """runs_teardown.c unfinished(): a teardown that cannot remove the
        run's directory keeps the run registered (its runs_max slot, its
        directory, its disk charge) for its owner's next Teardown. An owner
        that never calls again left it so forever. The sweeper now tries it
        again after 5 s (doubling to 60 s): the directory goes and the
        teardown line (with the manifest, nobody took it) is written."""
        run = self.c.create().run_id
        self.c.wait(run, self.c.exec(run, "echo x > /out/a"))
        rundir = os.path.join(self.srv.state, "runs", run)
        self.assertTrue(os.path.isdir(rundir))
        pid = self.srv.proc.pid
        # No descriptor above those sbxd holds: the teardown gets the one
        # its control socket frees, and removing the directory needs two.
        old = self.srv.limit_fds_to_held()
        try:
            code, msg, _ = self.c.call("Teardown", pb.TeardownRequest(run_id=run),
                                       pb.TeardownResponse)
        finally:
            resource.prlimit(pid, resource.RLIMIT_NOFILE, old)
        self.assertNotEqual(code, "OK", "the shortage was not made")
        self.assertIn("call Teardown again", msg)
        self.assertTrue(events(self.srv, "teardown_error", run))
        self.assertTrue(os.path.isdir(rundir))
        # Nobody calls again: the sweeper's retry ends it.
        td = wait_for(lambda: events(self.srv, "teardown", run), 12, 0.5)
        self.assertEqual(len(td), 1, "the unfinished teardown was never tried again")
        self.assertEqual(td[0]["reason"], "unfinished")
        self.assertEqual([a["path"] for a in td[0]["manifest"]["artifacts"]], ["a"])
        self.assertFalse(os.path.exists(rundir))
        self.assertEqual(self.c.state(run)[0], "NOT_FOUND")


if __name__ == "__main__":
    unittest.main()
