# rig_gtest_tests(<target> [TEST_PREFIX <prefix>] [TIMEOUT <seconds>] [SHARDS <n>]
#                 [ALWAYS_SHARD] [ISOLATE <gtest pattern>...]
#                 [SANITIZER_SKIP <gtest pattern>...] [ENVIRONMENT <VAR=value>...])
#
# Registers the GoogleTest cases of executable <target> with ctest (label unit).
# By default every case is its own ctest test, <prefix><Suite>.<Case>
# (gtest_discover_tests), with TIMEOUT seconds each.
#
# With RIG_GTEST_SHARDS (on in sanitizer builds) the executable is registered
# as SHARDS tests instead, <prefix or target.>shard-<i>-of-<n>, each one process
# that runs every n-th case (GoogleTest's GTEST_TOTAL_SHARDS / GTEST_SHARD_INDEX).
# An instrumented process takes about 0.2 s to start (the loader relocating
# librig's sanitizer data, LeakSanitizer's exit scan): paid once per case, that
# was a quarter of the sanitizer stage's test time. A failing shard's output
# names its failing cases. The cases that ISOLATE matches (suites that set
# process-wide state, such as the emulated CUDA device made once per process)
# stay one ctest test each, and the shards leave them out.
#
# ALWAYS_SHARD shards in every build: for cases that take milliseconds in a
# process that has already paid a slow start (loading cuDNN, ~0.2 s).
# SANITIZER_SKIP: cases an instrumented build's shards leave out, where the time is
# spent in a library the sanitizers do not see (cuDNN compiling a kernel) and
# other cases already run the same code of ours; every other build runs them.
option(RIG_GTEST_SHARDS "Run each GoogleTest executable as a few shards instead of one ctest test per case" ${RIG_SANITIZE})
include(GoogleTest)

function(rig_gtest_tests target)
  cmake_parse_arguments(ARG "ALWAYS_SHARD" "TEST_PREFIX;TIMEOUT;SHARDS"
                        "ISOLATE;SANITIZER_SKIP;ENVIRONMENT" ${ARGN})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 120)
  endif()
  if(NOT ARG_SHARDS)
    set(ARG_SHARDS 1)
  endif()
  set(_properties LABELS unit TIMEOUT ${ARG_TIMEOUT})
  if(ARG_ENVIRONMENT)
    list(APPEND _properties ENVIRONMENT "${ARG_ENVIRONMENT}")
  endif()
  if(NOT RIG_GTEST_SHARDS AND NOT ARG_ALWAYS_SHARD)
    gtest_discover_tests(${target} TEST_PREFIX "${ARG_TEST_PREFIX}" DISCOVERY_TIMEOUT 60
                         PROPERTIES ${_properties})
    return()
  endif()
  set(_left_out)
  if(ARG_ISOLATE)
    list(JOIN ARG_ISOLATE ":" _isolated)
    gtest_discover_tests(${target} TEST_PREFIX "${ARG_TEST_PREFIX}" DISCOVERY_TIMEOUT 60
                         TEST_FILTER "${_isolated}" PROPERTIES ${_properties})
    list(APPEND _left_out ${ARG_ISOLATE})
  endif()
  if(RIG_SANITIZE AND ARG_SANITIZER_SKIP)
    list(APPEND _left_out ${ARG_SANITIZER_SKIP})
  endif()
  set(_shard_filter)
  if(_left_out)
    list(JOIN _left_out ":" _left_out)
    set(_shard_filter "GTEST_FILTER=-${_left_out}")
  endif()
  set(_prefix "${ARG_TEST_PREFIX}")
  if(NOT _prefix)
    set(_prefix "${target}.")
  endif()
  math(EXPR _last "${ARG_SHARDS} - 1")
  foreach(_index RANGE ${_last})
    math(EXPR _number "${_index} + 1")
    set(_name "${_prefix}shard-${_number}-of-${ARG_SHARDS}")
    add_test(NAME ${_name} COMMAND ${target})
    set(_environment GTEST_TOTAL_SHARDS=${ARG_SHARDS} GTEST_SHARD_INDEX=${_index} ${_shard_filter}
                     ${ARG_ENVIRONMENT})
    # A shard runs many cases: its limit is the stage's, not one case's.
    set_tests_properties(${_name} PROPERTIES LABELS unit TIMEOUT 900
                                             ENVIRONMENT "${_environment}")
  endforeach()
endfunction()
