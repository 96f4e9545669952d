# SPDX-License-Identifier: Apache-2.0
# The arrows between rooms (HACKING.md), checked from the sources'
# #include lines (tests/layout/): the build's include paths enforce them for
# what compiles, this names the file and header that break one. Python and
# no sandbox, so it runs beside anything.
add_test(NAME layout.includes
         COMMAND ${SBX_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/layout/includes.py)
set_tests_properties(layout.includes PROPERTIES ENVIRONMENT "${SBX_TEST_ENV}" TIMEOUT 60)

# The fuzz targets built are the ones packaging/fuzz.sh runs, each with a
# seed corpus (tests/layout/fuzz_targets.py).
add_test(NAME layout.fuzz_targets
         COMMAND ${SBX_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/layout/fuzz_targets.py)
set_tests_properties(layout.fuzz_targets PROPERTIES ENVIRONMENT "${SBX_TEST_ENV}" TIMEOUT 60)

# sbx-helper starts no thread and switches to no stack it did not map: its
# code probes every 64 KiB, which a thread's one-page guard does not cover
# (helper/stack.h; tests/layout/helper_single_threaded.py).
add_test(NAME layout.helper_single_threaded
         COMMAND ${SBX_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/layout/helper_single_threaded.py
                 $<TARGET_FILE:sbx-helper>)
set_tests_properties(layout.helper_single_threaded PROPERTIES TIMEOUT 60)
