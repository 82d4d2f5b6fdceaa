# cmake -DCOMMAND=... -DARGS="a|b" -DEXPECTED_EXIT=N -DPATTERN=regex -P expect_exit.cmake
# Fails unless COMMAND ARGS exits with EXPECTED_EXIT and its stdout + stderr match PATTERN.
string(REPLACE "|" ";" ARGS "${ARGS}")
execute_process(COMMAND ${COMMAND} ${ARGS}
                RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT "${status}" STREQUAL "${EXPECTED_EXIT}")
  message(FATAL_ERROR "exit code ${status}, expected ${EXPECTED_EXIT}")
endif()
if(NOT "${out}${err}" MATCHES "${PATTERN}")
  message(FATAL_ERROR "output does not match: ${PATTERN}")
endif()
