# SPDX-License-Identifier: Apache-2.0
"""The build step pyproject.toml cannot say: the generated protobuf classes
(sbx_client/_pb) of proto/sbx/v1.

- From an sdist (packaging/build-python.sh makes it): sbx_client/_pb is in
  it, generated when the sdist was made; it is packaged as it is and no
  protoc is needed (the sdist carries its protos too, in proto/).
- From the sbx tree (pip install clients/python): protoc writes _pb into
  the build, never into the source tree; the protos are found at
  ../../proto or $SBX_PROTO_DIR, protoc on PATH or $PROTOC."""
import os
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_proto  # noqa: E402

PREBUILT = os.path.isfile(os.path.join(HERE, "sbx_client", "_pb", "sandbox_pb2.py"))


class BuildWithProto(build_py):
    def run(self):
        super().run()
        if not self.dry_run and not PREBUILT:
            gen_proto.generate(os.path.join(self.build_lib, "sbx_client"))


setup(cmdclass={"build_py": BuildWithProto},
      packages=["sbx_client"] + (["sbx_client._pb"] if PREBUILT else []),
      package_data={"sbx_client": ["py.typed"]})
