# SPDX-License-Identifier: Apache-2.0
# Documentation drift tests (tests/docs/): the man pages against the
# programs' --help, the tests table against ctest, and the docs' links.
# Python, as the integration tests; they start no sandbox, so they run
# beside anything.
set(SBX_DOCS_TEST_DIR ${CMAKE_CURRENT_SOURCE_DIR}/docs)

# One test per page whose program prints --help: docs.man_options.<page>.
set(SBX_MAN_CHECKED sbx-helper.1)
if(SBX_WITH_SERVER)
  list(APPEND SBX_MAN_CHECKED sbxctl.1 sbxd.8 sbxd-image.8)
endif()
foreach(page ${SBX_MAN_CHECKED})
  add_test(NAME docs.man_options.${page}
           COMMAND ${SBX_PYTHON} ${SBX_DOCS_TEST_DIR}/man_options.py ${page})
  set_tests_properties(docs.man_options.${page} PROPERTIES ENVIRONMENT "${SBX_TEST_ENV}"
                       TIMEOUT 60)
endforeach()

# docs/dev/testing.md's table covers every test ctest knows.
add_test(NAME docs.tests_table
         COMMAND ${SBX_PYTHON} ${SBX_DOCS_TEST_DIR}/tests_table.py ${PROJECT_BINARY_DIR})
set_tests_properties(docs.tests_table PROPERTIES ENVIRONMENT "${SBX_TEST_ENV}" TIMEOUT 60)

add_test(NAME docs.links COMMAND ${SBX_PYTHON} ${SBX_DOCS_TEST_DIR}/links.py)
set_tests_properties(docs.links PROPERTIES ENVIRONMENT "${SBX_TEST_ENV}" TIMEOUT 60)

# Generated reference pages against their sources (tests/docs/generated.py):
# the config key tables, the policy's ranges, sandbox.proto's comments.
set(SBX_GENERATED_PAGES policy api)
if(SBX_WITH_SERVER)
  list(APPEND SBX_GENERATED_PAGES config metrics)
endif()
# The Python client's reference, from its docstrings (needs its generated classes).
if(TARGET sbx_python_client)
  list(APPEND SBX_GENERATED_PAGES python)
endif()
foreach(page ${SBX_GENERATED_PAGES})
  add_test(NAME docs.${page}_reference
           COMMAND ${SBX_PYTHON} ${SBX_DOCS_TEST_DIR}/generated.py ${page} ${PROJECT_BINARY_DIR})
  set_tests_properties(docs.${page}_reference PROPERTIES ENVIRONMENT "${SBX_TEST_ENV}" TIMEOUT 60)
endforeach()

# The Kubernetes manifests and the Nomad job, parsed and checked offline
# (tests/packaging/deployment.py; python3-yaml).
add_test(NAME packaging.deployment
         COMMAND ${SBX_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/packaging/deployment.py)
set_tests_properties(packaging.deployment PROPERTIES ENVIRONMENT "${SBX_TEST_ENV}" TIMEOUT 60)
