# CLI tests of flashcore-bench (label cpu: they run anywhere, on the CPU backend when no GPU).
set(expect_exit ${CMAKE_CURRENT_SOURCE_DIR}/tests/expect_exit.cmake)

# Runs flashcore-bench with ARGS and checks the exit code and a pattern in stdout + stderr.
# Arguments travel to the script joined by "|" (a ";" list does not survive add_test intact).
# Options (keywords, never flashcore-bench flags, which all start with "--"):
#   FORBID regex   the output must not match it (e.g. the usage text after an error)
#   ENV var=value  environment of the run (CUDA_VISIBLE_DEVICES=-1 hides every GPU)
#   STDOUT_JSON    stdout alone must parse as JSON
function(flashcore_bench_test name expected_exit pattern)
  cmake_parse_arguments(PARSE_ARGV 3 opt "STDOUT_JSON" "FORBID;ENV" "")
  string(REPLACE ";" "|" joined_args "${opt_UNPARSED_ARGUMENTS}")
  add_test(NAME ${name} COMMAND ${CMAKE_COMMAND}
           -DCOMMAND=$<TARGET_FILE:flashcore-bench> "-DARGS=${joined_args}"
           -DEXPECTED_EXIT=${expected_exit} "-DPATTERN=${pattern}" "-DFORBID=${opt_FORBID}"
           -DSTDOUT_JSON=${opt_STDOUT_JSON} -P ${expect_exit})
  set_tests_properties(${name} PROPERTIES LABELS cpu)
  if(opt_ENV)
    set_tests_properties(${name} PROPERTIES ENVIRONMENT "${opt_ENV}")
  endif()
endfunction()

# The no-flag default passes (the README's main job).
flashcore_bench_test(bench_default 0 "all results pass")
# --help: usage, examples (default, one config, the standard grid with --json, --json -) and
# the exit codes.
string(CONCAT help_pattern "usage: flashcore-bench.*examples:.*--grid standard --json .*"
       "--json - .*exit code: 0 all results pass; 1 a failed check.*2 a usage error")
flashcore_bench_test(bench_help 0 "${help_pattern}" --help)
# Bad flags: exit 2 with a message naming the flag and the value.
flashcore_bench_test(bench_bad_head_dim 2 "--head-dim expects an integer.*got 'abc'" --head-dim abc)
# head_dim is bounded by the kernels' largest (it used to accept 100000 and run for minutes).
flashcore_bench_test(bench_head_dim_too_large 2
                     "--head-dim expects an integer in \\[1, 256\\], got '100000': 256 is"
                     --head-dim 100000)
flashcore_bench_test(bench_bad_backend 2 "--backend expects .*got 'nope'" --backend nope)
flashcore_bench_test(bench_bad_dtype 2 "--dtype expects fp16, bf16, fp32 or fp8, got 'int8'"
                     --dtype int8)
flashcore_bench_test(bench_unknown_flag 2 "unknown flag '--frobnicate'" --frobnicate)
# An error prints itself and a pointer to --help, not the whole usage text.
flashcore_bench_test(bench_error_is_short 2
                     "error: unknown flag '--frobnicate'.run flashcore-bench --help for usage"
                     --frobnicate FORBID "usage: flashcore-bench")
flashcore_bench_test(bench_missing_value 2 "--seqlen needs a value" --seqlen)
flashcore_bench_test(bench_zero_batch 2 "--batch expects an integer in \\[1," --batch 0)
flashcore_bench_test(bench_grid_with_shape 2 "--grid standard defines its own shapes"
                     --grid standard --seqlen 128)
flashcore_bench_test(bench_standard_on_cpu 2 "sized for GPUs" --grid standard --backend cpu)
flashcore_bench_test(bench_llm_on_cpu 2 "--grid llm is sized for GPUs" --grid llm --backend cpu)
# --dtype picks the default config's dtype (it used to filter an fp16-only grid down to zero
# configs, and zero configs "passed"). No GPU visible, so auto runs the cpu backend, which takes
# fp32; on a GPU, auto would refuse fp32.
flashcore_bench_test(bench_default_fp32 0
                     "2 config\\(s\\) x 2 backend\\(s\\).*fp32.*all results pass"
                     --dtype fp32 ENV CUDA_VISIBLE_DEVICES=-1)
# FP8 (issue 26): inputs quantized per (batch, kv head), out bf16, the FP8 rule; the cpu backend
# (auto without a GPU) and the reference run it, dense and paged.
flashcore_bench_test(bench_fp8_cpu 0 "fp8_e4m3->bf16 causal +\\| auto:cpu .*pass.*all results pass"
                     --dtype fp8 --seqlen 200 --heads-q 8 --heads-kv 2 --causal --backend auto
                     ENV CUDA_VISIBLE_DEVICES=-1)
flashcore_bench_test(bench_fp8_paged 0 "paged page16 .*fp8_e4m3->bf16 .*pass.*all results pass"
                     --dtype fp8 --layout paged --seqlens 5,100,37 --heads-q 8 --heads-kv 2
                     --backend cpu)
# A filter that leaves no config of a grid is a usage error, never a pass.
flashcore_bench_test(bench_grid_filtered_empty 2 "--dtype fp32 leaves none of the 20 configs"
                     --grid small --dtype fp32)
# heads_q must be a multiple of heads_kv: a usage error naming both, before any run.
flashcore_bench_test(bench_heads_not_multiple 2 "--heads-q 7 is not a multiple of --heads-kv 3"
                     --heads 7 --heads-kv 3 FORBID "config +\\|")
# --heads and --seqlen set both fields, and the specific flags win in either order.
flashcore_bench_test(bench_paired_flags_any_order 0
                     "b1 sq33 sk70 hq4 hkv2 d32 fp16 +\\| cpu.*all results pass"
                     --backend cpu --seqlen-k 70 --seqlen 33 --heads-kv 2 --heads 4 --head-dim 32
                     --iters 1)
# --heads-q alone is plain attention (hkv = hq), not a ratio against the default 4 kv heads.
flashcore_bench_test(bench_heads_q_alone 0
                     "b1 sq16 sk16 hq6 hkv6 d32 fp16 +\\| cpu.*all results pass"
                     --backend cpu --heads-q 6 --seqlen 16 --head-dim 32 --iters 1)
# An explicit GPU backend without a GPU is a usage error that says so, not the first CUDA call's
# error in an ERROR row. CUDA_VISIBLE_DEVICES=-1 hides every GPU, so this holds on any machine
# and any build (without CUDA the reason is the build itself).
foreach(gpu_backend sm80 sm90)
  flashcore_bench_test(bench_no_gpu_${gpu_backend} 2
                       "--backend ${gpu_backend}: no CUDA device: use --backend cpu or reference"
                       --backend ${gpu_backend} --seqlen 64
                       ENV CUDA_VISIBLE_DEVICES=-1 FORBID "config +\\|")
endforeach()
# A config larger than the machine's memory is refused before it runs (512 TB of inputs).
flashcore_bench_test(bench_too_large_for_memory 2
                     "b1000000 sq1000000 .* needs .* GiB of host memory.*lower --batch"
                     --backend cpu --batch 1000000 --seqlen 1000000 FORBID "config +\\|")
# A single GQA causal config with seqlen_q != seqlen_k on the CPU backend.
flashcore_bench_test(bench_single_cpu 0 "all results pass"
                     --backend cpu --batch 2 --seqlen-q 33 --seqlen-k 70 --heads-q 4 --heads-kv 2
                     --head-dim 32 --causal --dtype bf16 --iters 2)

# An unwritable --json path is a usage error before any run, naming the path and the OS error.
flashcore_bench_test(bench_json_unwritable 2
                     "--json .*/no-such-dir/out.json: cannot open for writing: No such file"
                     --backend cpu --seqlen 64 --iters 1
                     --json ${CMAKE_CURRENT_BINARY_DIR}/no-such-dir/out.json FORBID "config +\\|")
flashcore_bench_test(bench_json_empty_path 2 "--json needs a file name, or - for standard output"
                     --json=)
# --json - is standard output, which then holds the JSON alone (the table goes to stderr).
flashcore_bench_test(bench_json_stdout 0 "all results pass"
                     --backend cpu --seqlen 64 --heads 2 --head-dim 32 --iters 1 --json -
                     STDOUT_JSON)
# --json writes records that parse back and hold what the docs promise.
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  set(json_file ${CMAKE_CURRENT_BINARY_DIR}/bench_json_test.json)
  flashcore_bench_test(bench_json_write 0 "wrote .*bench_json_test.json"
                       --backend cpu --batch 1 --seqlen 100 --heads 2 --head-dim 32 --iters 2
                       --json ${json_file})
  set_tests_properties(bench_json_write PROPERTIES FIXTURES_SETUP bench_json)
  add_test(NAME bench_json_parse COMMAND ${Python3_EXECUTABLE}
           ${CMAKE_CURRENT_SOURCE_DIR}/tests/check_json.py ${json_file})
  set_tests_properties(bench_json_parse PROPERTIES LABELS cpu FIXTURES_REQUIRED bench_json)
endif()
# Serving layouts (--layout): a ragged varlen batch (a 0-length sequence included) and a paged
# decode step run on the cpu backend and pass the per-sequence check; their flag errors are
# usage errors.
flashcore_bench_test(bench_varlen_cpu 0
                     "varlen q\\[65,17,1,0\\] k\\[65,17,1,0\\] hq4 hkv2 d32 fp16 causal +\\| cpu.*all results pass"
                     --layout varlen --seqlens 65,17,1,0 --heads-q 4 --heads-kv 2 --head-dim 32
                     --causal --backend cpu --iters 1)
flashcore_bench_test(bench_paged_decode_cpu 0
                     "paged page16 q3x\\[1\\] k3x\\[100\\] hq8 hkv2 d64 fp16 +\\| cpu.*all results pass"
                     --layout paged --page-size 16 --batch 3 --seqlen-k 100 --heads-q 8
                     --heads-kv 2 --backend cpu --iters 1)
flashcore_bench_test(bench_paged_json 0 "\"layout\": \"paged\", \"seqlens_q\": \\[1, 1\\]"
                     --layout paged --page-size 1 --seqlens 5,9 --backend cpu --iters 1
                     --json - STDOUT_JSON)
flashcore_bench_test(bench_seqlens_without_layout 2 "--seqlens needs --layout" --seqlens 4,5)
flashcore_bench_test(bench_seqlens_with_batch 2 "the batch is the number of --seqlens entries"
                     --layout varlen --seqlens 4,5 --batch 3)
flashcore_bench_test(bench_page_size_zero 2 "--page-size expects an integer in \\[1," --layout paged
                     --page-size 0)
flashcore_bench_test(bench_bad_layout 2 "--layout expects dense, varlen, cache or paged, got 'x'"
                     --layout x)
