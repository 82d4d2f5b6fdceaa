"""Accuracy figures and the printed table for benchmark_llama.py.

Accuracy puts every implementation's logits next to SDPA's and next to a float32 reference, so
FlashCore's error is read against the noise of the low precision itself (SDPA's own error vs
fp32), not as a bare number.

Logit tensors are [batch, vocab] (prefill last token) or [batch, 1 + steps, vocab]
(teacher-forced: index 0 is the prefill's last token, index s the s-th decode step).
"""


def max_abs(a, b):
    return (a - b).abs().max().item()


def top2_margin(logits):
    """Gap between the largest and second-largest logit (a near-tie when small)."""
    top = logits.float().topk(2, dim=-1).values
    return top[..., 0] - top[..., 1]


def prefill_accuracy(logits, ref):
    """{label: {max_abs_err_vs_fp32, max_abs_diff_vs_sdpa}} for last-token prefill logits."""
    result = {}
    for label, lg in logits.items():
        result[label] = {
            "max_abs_err_vs_fp32": max_abs(lg, ref) if ref is not None else None,
            "max_abs_diff_vs_sdpa": max_abs(lg, logits["sdpa"]),
        }
    return result


def decode_accuracy(logits, ref):
    """Teacher-forced decode accuracy per implementation.

    All implementations decoded the same tokens, so position s of one is comparable with position
    s of another. Agreement counts decode steps (and batch rows) whose argmax equals SDPA's /
    the fp32 reference's; disagreements list each differing step with the reference's top-2
    margin there (small margins are near-ties that bf16 noise flips, not bugs).
    """
    sdpa = logits["sdpa"][:, 1:]
    ref_steps = ref.shape[1] - 1 if ref is not None else 0
    ref_dec = ref[:, 1:] if ref is not None else None
    # Top-2 margins from the most accurate logits there are: fp32 where it ran, else SDPA's.
    margins = top2_margin(sdpa)
    if ref_steps:
        margins[:, :ref_steps] = top2_margin(ref_dec)
    result = {}
    for label, lg in logits.items():
        dec = lg[:, 1:]
        if dec.shape[1] == 0:
            result[label] = {"steps": 0}
            continue
        arg = dec.argmax(dim=-1)
        same_as_sdpa = arg == sdpa.argmax(dim=-1)
        entry = {
            "steps": dec.shape[1],
            "argmax_agreement_vs_sdpa": same_as_sdpa.float().mean().item(),
            "max_abs_diff_vs_sdpa": max_abs(dec, sdpa),
            "per_step_max_abs_diff_vs_sdpa": (dec - sdpa).abs().amax(dim=(0, 2)).tolist(),
        }
        if ref_steps:
            arg_ref = ref_dec.argmax(dim=-1)
            err = (dec[:, :ref_steps] - ref_dec).abs()
            entry.update({
                "fp32_steps": ref_steps,
                "argmax_agreement_vs_fp32": (arg[:, :ref_steps] == arg_ref).float().mean().item(),
                "max_abs_err_vs_fp32": err.max().item(),
                "per_step_max_abs_err_vs_fp32": err.amax(dim=(0, 2)).tolist(),
            })
        entry["disagreements_vs_sdpa"] = [
            {"step": step + 1, "batch": row, "top2_margin": margins[row, step].item(),
             "margin_from": "fp32" if step < ref_steps else "sdpa"}
            for row, step in (~same_as_sdpa).nonzero().tolist()]
        result[label] = entry
    return result


def fmt(value, spec):
    return "-" if value is None else format(value, spec)


def print_report(report, args):
    print(f"\n{report['device']}  Llama {args.layers} layers, hidden {args.hidden}, "
          f"{args.heads}/{args.kv_heads} heads, {args.dtype}, batch {args.batch}, "
          f"prompt {args.prompt}, {args.decode_steps} decode steps; torch SDPA picks "
          f"{report['sdpa_backend_chosen']}")
    print("| attention | prefill ms | decode ms/step (free-running, sequential) | decode ms/step "
          "(teacher-forced, interleaved, synced) | host ms/step | prefill max abs err vs fp32 | "
          "decode max abs err vs fp32 | decode argmax agreement vs sdpa / vs fp32 |")
    print("|---|---|---|---|---|---|---|---|")
    for label, r in report["implementations"].items():
        tf = r["teacher_forced"]
        print(f"| {label} | {r['prefill_ms']:.2f} | {r['decode_ms_per_step']:.3f} | "
              f"{r['decode_ms_per_step_synced_interleaved']:.3f} | "
              f"{r['decode_host_ms_per_step']:.3f} | "
              f"{fmt(r['prefill_logits_max_abs_err_vs_fp32'], '.4g')} | "
              f"{fmt(tf.get('max_abs_err_vs_fp32'), '.4g')} | "
              f"{fmt(tf.get('argmax_agreement_vs_sdpa'), '.3f')} / "
              f"{fmt(tf.get('argmax_agreement_vs_fp32'), '.3f')} |")
    print(f"FlashCore vs sdpa: prefill {report['prefill_speedup_vs_sdpa']:.3f}x; decode "
          f"{report['decode_speedup_vs_sdpa']:.3f}x free-running, "
          f"{report['decode_speedup_vs_sdpa_synced_interleaved']:.3f}x synced interleaved; "
          f"prefill logits max |diff| {report['prefill_logits_max_abs_diff_vs_sdpa']:.4g}")
    print(f"free-running greedy agreement {report['greedy_token_agreement']:.3f} (first "
          f"difference at step {report['first_greedy_difference_at_step']}: after one near-tie "
          f"flip the streams differ, so read the teacher-forced agreement "
          f"{report['teacher_forced_argmax_agreement_vs_sdpa']:.3f})")
    for label, r in report["implementations"].items():
        for d in r["teacher_forced"].get("disagreements_vs_sdpa", []):
            print(f"  teacher-forced flip {label} step {d['step']} row {d['batch']}: top-2 margin "
                  f"{d['top2_margin']:.4g} ({d['margin_from']})")
    for label, r in report["implementations"].items():
        if "profile_verdict" in r:
            print(f"decode step, {label}: {r['profile_verdict']}")
    if report["sdpa_backends_skipped"]:
        print(f"SDPA backends not run: {report['sdpa_backends_skipped']}")
