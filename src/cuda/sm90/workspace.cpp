// Host side of the sm90 backend's workspace: the split-KV partials a call needs, from the same
// plan the launcher follows (kv_split_plan.h). The API layer asks through launchers.h and never
// sees the tuning table.
#include <climits>

#include "cuda/launchers.h"
#include "cuda/sm90/kv_split_plan.h"

namespace flashcore::detail {

size_t sm90_split_kv_workspace_bytes(const Sm90WorkspaceQuery& query) {
  const bool in_range = query.batch > 0 && query.seqlen_q > 0 && query.heads_q > 0 &&
                        query.head_dim > 0 && query.batch <= INT_MAX &&
                        query.heads_q <= INT_MAX && query.head_dim <= INT_MAX &&
                        query.seqlen_q <= kSm90MaxPackedSeqlenQ;
  if (!in_range) return 0;
  if (query.seqlen_k < 0 || query.heads_kv < 0) {
    return static_cast<size_t>(sm90_kv_split_workspace_bound(
        query.batch, query.heads_q, query.seqlen_q, query.head_dim, query.num_sms));
  }
  if (query.seqlen_k > INT_MAX || query.heads_kv > INT_MAX) return 0;
  const Sm90KvSplitPlan plan = sm90_kv_split_plan(
      int(query.batch), int(query.heads_q), int(query.heads_kv), int(query.seqlen_q),
      int(query.seqlen_k), int(query.head_dim), query.causal_mask, query.num_sms);
  return static_cast<size_t>(sm90_kv_split_workspace_bytes(
      plan, int(query.batch), int(query.heads_q), int(query.seqlen_q), int(query.head_dim)));
}

}  // namespace flashcore::detail
