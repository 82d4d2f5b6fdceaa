// Backend::kCPU: tiled online-softmax attention with float32 accumulation on host threads.
#pragma once

#include "common/params.h"

namespace flashcore::detail {

// Any head_dim, fp16/bf16/fp32 and fp8 e4m3 (with its descales; out bf16/fp16), strides, GQA,
// bottom-right causal; rows with no visible key get out = 0 and lse = -inf. Threads split
// (batch, head, query block).
void run_cpu_backend(const AttentionParams& params);

}  // namespace flashcore::detail
