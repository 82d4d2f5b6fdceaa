// The dtype rules of a call and the FP8 descale factors (flashcore.h, "FP8").
//
// q, k and v share one dtype; with fp8_e4m3 inputs out is bf16 or fp16 (it names the output
// type), otherwise out is q's dtype. q_descale / k_descale / v_descale are float32 [batch,
// heads_kv] on q's device and only exist for fp8 inputs. Every error names the argument and
// its value.
#pragma once

#include <cstdint>

#include "common/params.h"
#include "flashcore/flashcore.h"

namespace flashcore::detail {

// dtypes of q, k, v and out (k_new/v_new are checked with the other append tensors).
void check_dtypes(const AttentionArgs& args);

// The descale tensors: set only with fp8 q; float32, shape [batch, heads_kv], strides >= 0,
// 4-byte aligned, on q's device, not overlapping what the call writes (out, lse, an appended
// cache).
void check_descales(const AttentionArgs& args, int64_t batch, int64_t heads_kv);

// out_dtype and the descale pointers and strides of params.
void fill_fp8_params(const AttentionArgs& args, AttentionParams& params);

}  // namespace flashcore::detail
