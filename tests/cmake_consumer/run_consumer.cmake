# cmake -P script: install the flashcore build at FLASHCORE_BUILD_DIR into a scratch prefix, then
# configure, build and run the consumer project against it.
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
if(NOT CONFIG)
  set(CONFIG Release)
endif()

function(run_step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE status)
  if(NOT status EQUAL 0)
    list(JOIN ARGN " " command)
    message(FATAL_ERROR "failed (${status}): ${command}")
  endif()
endfunction()

run_step(${CMAKE_COMMAND} --install ${FLASHCORE_BUILD_DIR} --prefix ${prefix} --config ${CONFIG})
run_step(${CMAKE_COMMAND} -S ${CONSUMER_SOURCE_DIR} -B ${WORK_DIR}/build
         -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=${CONFIG}
         -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER})
run_step(${CMAKE_COMMAND} --build ${WORK_DIR}/build --config ${CONFIG})
run_step(${WORK_DIR}/build/consumer)
