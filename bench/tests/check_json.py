"""Checks a flashcore-bench --json file: valid JSON, one passing record per run, all fields."""
import json
import sys

REQUIRED = ["batch", "seqlen_q", "seqlen_k", "heads_q", "heads_kv", "head_dim", "dtype",
            "causal", "backend", "backend_ran", "device", "commit", "median_ms", "tflops",
            "max_err_out", "tol_out", "max_err_lse", "tol_lse", "pass"]

with open(sys.argv[1]) as f:
    records = json.load(f)
assert isinstance(records, list) and records, f"expected a non-empty array, got {records!r}"
for record in records:
    missing = [key for key in REQUIRED if key not in record]
    assert not missing, f"record {record} lacks {missing}"
    assert record["pass"] is True, f"record did not pass: {record}"
    assert record["median_ms"] > 0 and record["tflops"] > 0, record
backends = sorted({r["backend"] for r in records})
print(f"{len(records)} records OK, backends {backends}")
