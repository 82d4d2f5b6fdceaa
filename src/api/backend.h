// Backend choice for a validated call (shared by select_backend and attention_forward).
#pragma once

#include "common/params.h"
#include "flashcore/flashcore.h"

namespace flashcore::detail {

// Resolves args.backend (kAuto or explicit) for already-validated params; throws Error saying
// what is missing when no backend can run the call.
Backend choose_backend(const AttentionParams& params, const AttentionArgs& args);

}  // namespace flashcore::detail
