// Backend choice for a validated call (shared by select_backend and attention_forward).
#pragma once

#include <string>

#include "common/params.h"
#include "flashcore/flashcore.h"

namespace flashcore::detail {

// Resolves args.backend (kAuto or explicit) for already-validated params; throws Error saying
// what is missing when no backend can run the call.
Backend choose_backend(const AttentionParams& params, const AttentionArgs& args);

// Why `backend` cannot run the call's sequence layout (varlen, kv cache, paged), or "" when it
// can. cpu, reference and sm80 run them all; sm90's answer is sm90_layout_unsupported_reason.
std::string layout_unsupported_reason(Backend backend, const AttentionParams& params);
std::string sm90_layout_unsupported_reason(const AttentionParams& params);

}  // namespace flashcore::detail
