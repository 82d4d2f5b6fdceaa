"""Markdown table of decode_graph_timing.py, paged_decode_graph_timing.py or
varlen_graph_timing.py runs: a baseline build against a candidate, each run one or more times in
one device call (A B A B), per pattern and shape (per cache layout and shape; per batch and
dtype).

    python3 dev/sm90/summarize_graph_timing.py --base old.json old2.json --new new.json new2.json

Per row: FlashCore us/call of each build (mean of its runs), new / base, and the new build's
speedup over cuDNN and FA2 (their us/call from the new build's runs, measured beside it); for
varlen runs each build's varlen call against its dense call on the same sequences.
"""
import argparse
import json
import statistics


def record_key(record):
    if "shape" in record:  # varlen_graph_timing.py
        return record["shape"]
    return (record.get("pattern", "b2b"), record["batch"], record["seqlen_k"], record["heads_q"],
            record["heads_kv"])


def load(paths):
    runs = [json.load(open(path)) for path in paths]
    table = {}
    for run in runs:
        for record in run["records"]:
            key = record_key(record)
            for name, us in record["us_per_call"].items():
                table.setdefault(key, {}).setdefault(name, []).append(us)
    return runs[0]["device"], {key: {name: statistics.mean(v) for name, v in cells.items()}
                               for key, cells in table.items()}


def print_layouts(device, base, new):
    """paged_decode_graph_timing.py runs: one FlashCore call per cache layout, no anchors."""
    print(f"{device}: us per call, decode replayed as CUDA graphs, per cache layout\n")
    print("| batch | keys | layout | base | new | new / base | new / new contiguous |")
    print("|---|---|---|---|---|---|---|")
    for key in sorted(new, key=lambda k: (-k[1], k[2])):
        _, batch, seqlen_k, _, _ = key
        for name, us in new[key].items():
            print(f"| {batch} | {seqlen_k} | {name} | {base[key][name]:.2f} | {us:.2f} "
                  f"| {us / base[key][name]:.3f} | {new[key]['contiguous'] / us:.3f} |")


def print_varlen(device, base, new):
    """varlen_graph_timing.py runs: varlen and dense calls on the same sequences, per dtype."""
    print(f"{device}: us per call, prefill replayed as CUDA graphs, varlen against dense\n")
    print("| sequences | dtype | base dense / varlen | new dense / varlen | varlen new / base "
          "| varlen / dense speed, base | new |")
    print("|---|---|---|---|---|---|---|")
    for shape, cells in new.items():
        for name in cells:
            if not name.startswith("varlen_"):
                continue
            dtype, dense = name[len("varlen_"):], "dense_" + name[len("varlen_"):]
            varlen_base, varlen_new = base[shape][name], cells[name]
            if dense in cells:
                dense_base, dense_new = base[shape][dense], cells[dense]
                print(f"| {shape} | {dtype} | {dense_base:.1f} / {varlen_base:.1f} "
                      f"| {dense_new:.1f} / {varlen_new:.1f} | {varlen_new / varlen_base:.3f} "
                      f"| {dense_base / varlen_base:.3f} | {dense_new / varlen_new:.3f} |")
            else:  # a ragged batch has no dense twin
                print(f"| {shape} | {dtype} | {varlen_base:.1f} | {varlen_new:.1f} "
                      f"| {varlen_new / varlen_base:.3f} | | |")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", nargs="+", required=True)
    parser.add_argument("--new", nargs="+", required=True)
    args = parser.parse_args()
    device, base = load(args.base)
    _, new = load(args.new)
    if all(isinstance(key, str) for key in new):
        print_varlen(device, base, new)
        return
    if not any("flashcore" in cells for cells in new.values()):
        print_layouts(device, base, new)
        return
    print(f"{device}: us per call, decode replayed as CUDA graphs (seqlen_q 1, d128, bf16)\n")
    print("| pattern | batch | keys | heads q / kv | base | new | new / base | cuDNN | FA2 "
          "| speedup vs cuDNN | vs FA2 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for key in sorted(new, key=lambda k: (k[0], k[3] == k[4], k[1], k[2])):
        pattern, batch, seqlen_k, heads_q, heads_kv = key
        fc_new, fc_base = new[key]["flashcore"], base[key]["flashcore"]
        cudnn, fa2 = new[key]["cudnn"], new[key]["fa2"]
        print(f"| {pattern} | {batch} | {seqlen_k} | {heads_q} / {heads_kv} | {fc_base:.2f} "
              f"| {fc_new:.2f} | {fc_new / fc_base:.3f} | {cudnn:.2f} | {fa2:.2f} "
              f"| {cudnn / fc_new:.2f} | {fa2 / fc_new:.2f} |")


if __name__ == "__main__":
    main()
