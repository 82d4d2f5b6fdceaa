# cmake -DCOMMAND=... -DARGS="a|b" -DEXPECTED_EXIT=N -DPATTERN=regex [-DFORBID=regex]
#       [-DSTDOUT_JSON=ON] -P expect_exit.cmake
# Fails unless COMMAND ARGS exits with EXPECTED_EXIT and its stdout + stderr match PATTERN (and,
# when given, do not match FORBID; with STDOUT_JSON, stdout alone must parse as JSON).
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
if(DEFINED FORBID AND NOT FORBID STREQUAL "" AND "${out}${err}" MATCHES "${FORBID}")
  message(FATAL_ERROR "output matches what it must not: ${FORBID}")
endif()
if(STDOUT_JSON)
  string(JSON length ERROR_VARIABLE json_error LENGTH "${out}")
  if(json_error)
    message(FATAL_ERROR "stdout is not JSON: ${json_error}")
  endif()
  message("stdout is a JSON array of ${length} records")
endif()
