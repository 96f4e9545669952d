# SPDX-License-Identifier: Apache-2.0
"""The build step pyproject.toml cannot say: protoc writes sbx_client/_pb
(the classes of proto/sbx/v1) into the build, never into the source tree.
The protos are found at ../../proto (this directory inside the sbx tree) or
at $SBX_PROTO_DIR; protoc on PATH or $PROTOC."""
import os
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_proto  # noqa: E402


class BuildWithProto(build_py):
    def run(self):
        super().run()
        if not self.dry_run:
            gen_proto.generate(os.path.join(self.build_lib, "sbx_client"))


setup(cmdclass={"build_py": BuildWithProto})
