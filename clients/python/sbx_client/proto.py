# SPDX-License-Identifier: Apache-2.0
"""The protobuf classes of proto/sbx/v1, generated at build time into
sbx_client/_pb (gen_proto.py; CMake puts them in the build tree, pip in the
installed package)."""
try:
    from ._pb import policy_pb2, sandbox_pb2  # noqa: F401
except ImportError as e:  # pragma: no cover - a packaging mistake
    raise ImportError("sbx_client: the generated protobuf classes (sbx_client/_pb) are missing: "
                      "install with pip, or build the tree (cmake --build) and put "
                      "<build>/clients/python on sys.path: %s" % e) from e

SERVICE = "/sbx.v1.Sandbox/"
