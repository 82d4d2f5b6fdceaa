// The table of compiled CUDA kernel variants: (backend, dtype, head_dim, causal) -> launcher.
#pragma once

#include <vector>

#include "common/params.h"

namespace flashcore::detail {

using KernelLauncher = void (*)(const AttentionParams&);

// The launcher compiled for this variant, or nullptr when it was not compiled in.
KernelLauncher find_kernel(Backend backend, DType dtype, int head_dim, bool causal);

// Head dims with at least one compiled variant for this backend, ascending.
// (Collected once: the table is fixed at build time.)
const std::vector<int>& compiled_head_dims(Backend backend);

}  // namespace flashcore::detail
