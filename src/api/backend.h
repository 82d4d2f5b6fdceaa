// Backend choice for a validated call (shared by select_backend and attention_forward).
#pragma once

#include <string>

#include "api/validate_serving.h"
#include "common/params.h"
#include "flashcore/flashcore.h"

namespace flashcore::detail {

// Resolves args.backend (kAuto or explicit) for already-validated params; throws Error saying
// what is missing when no backend can run the call.
Backend choose_backend(const AttentionParams& params, const AttentionArgs& args);

// Why `backend` cannot run calls of this input dtype and sequence layout, as a whole sentence, or
// "" when it can. These are facts about the backend's kernels, not about this machine (that is
// backend_unavailable_reason). cpu, reference and sm90 run every dtype and layout; sm80 runs
// every layout in fp16/bf16.
std::string unsupported_reason(Backend backend, DType dtype, const ServingLayout& layout);

// Throws when no CUDA backend that `requested` allows (an explicit sm80/sm90, or both for auto)
// runs this dtype and layout: an explicit backend gives its own reason, auto the reason of sm90
// (first) and sm80. Never a silent fallback to a backend the caller did not ask for.
void check_cuda_backends_run(Backend requested, DType dtype, const ServingLayout& layout);

}  // namespace flashcore::detail
