#!/usr/bin/env python3
"""The KV step loop of each general sm90 kernel in a cuobjdump SASS dump (dev/sm90/
compile_instances.sh writes one per instance): what docs/kernels.md counts when it says "a step
of N instructions", and where ptxas put the waits. Needs no GPU.

    python3 dev/sm90/sass_steps.py SASS [--layout Dense] [--ops 12] [--against OTHER_SASS]

A step loop is a backward branch whose body holds two or more wgmma (HGMMA / QGMMA) and no
loop of its own. A loop runs as many KV steps as its wgmma are multiples of the fewest any step
loop of the kernel holds (a loop of steps unrolled in pairs holds twice a step's). A kernel's
unmasked step is the loop of the fewest instructions a step; the masked steps' loop is longer,
and the tile loop around them is not innermost. Per kernel (its tuning row: head_dim, causal,
row index, input bytes; the output types are kernels of their own, numbered in dump order):
  step       instructions a step: the loop's length over its steps ("a loop of N steps" beside
             it where N > 1; the positions below are then within the whole loop)
  depbar     positions of WARPGROUP.DEPBAR in it: the S wait, then the P V wait (the softmax
             before the second runs beside the consumer's own P V)
  fmnmx, mufu  first and last position of the row maxima and the exponentials
  turn       positions of the turn's named-barrier sync (BAR.SYNC) and of the first arrival
             after it (BAR.ARV): what the consumer issues while the others wait for their turn
             ("-" in rows without ping-pong turns)
  max reg    the highest register index before the producer's setmaxnreg dealloc (ptxas lays
             the consumers out first): the consumers' footprint against their budget
  stl        local-memory stores, and how many lie among the consumers' instructions
With --ops N the step's N most frequent instruction families; with --against, each family's
count in the other dump's same kernel beside it (A B builds of one instance).
"""
import argparse
import collections
import re
import sys

FUNCTION = re.compile(r"^\s+Function : (\S+)")
INSTRUCTION = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
# The tuning row in the mangled name: Sm90TableRow<head_dim, causal, index, input_bytes>.
ROW = re.compile(r"Sm90TableRowILi(\d+)ELb([01])ELi(\d+)ELi(\d+)EE")
LAYOUT = re.compile(r"sm90_forward_kernelINS0_\d+(Sm90\w+?Layout)")
PREDICATE = re.compile(r"^@!?U?P[T0-9]+\s+")
BRANCH_TARGET = re.compile(r"\bBRA\b.*?0x([0-9a-f]+)")
REGISTER = re.compile(r"\bR(\d+)\b")
WGMMA = ("HGMMA", "QGMMA")


def parse_functions(lines):
    """{mangled name: [(address, instruction text), ...]} in dump order."""
    functions = {}
    current = None
    for line in lines:
        match = FUNCTION.match(line)
        if match:
            current = functions.setdefault(match.group(1), [])
            continue
        match = INSTRUCTION.match(line)
        if match and current is not None:
            current.append((int(match.group(1), 16), match.group(2)))
    return functions


def opcode(text):
    """The instruction family: HGMMA, FFMA, SYNCS, ... (predicate and modifiers dropped)."""
    words = PREDICATE.sub("", text).split()
    return words[0].split(".")[0] if words else ""


def backward_branches(instructions):
    """(index of the branch, index of its target) for every branch to an earlier instruction."""
    index_of = {address: i for i, (address, _) in enumerate(instructions)}
    found = []
    for i, (address, text) in enumerate(instructions):
        match = BRANCH_TARGET.search(text)
        if not match:
            continue
        target = int(match.group(1), 16)
        if target <= address and target in index_of:
            found.append((i, index_of[target]))
    return found


def step_loops(instructions):
    """Every innermost loop body with two or more wgmma, with its wgmma count."""
    branches = backward_branches(instructions)
    loops = []
    for end, start in branches:
        if any(start <= s and e < end for e, s in branches if (e, s) != (end, start)):
            continue  # a loop inside this one: not a step loop
        body = instructions[start:end + 1]
        wgmma = sum(1 for _, t in body if opcode(t) in WGMMA)
        if wgmma >= 2:
            loops.append((body, wgmma))
    return loops


def step_loop(instructions):
    """The unmasked step loop and the KV steps it runs a pass: of the step loops, the one of the
    fewest instructions a step. ([], 1) if none."""
    loops = step_loops(instructions)
    if not loops:
        return [], 1
    fewest = min(wgmma for _, wgmma in loops)
    with_steps = [(body, max(1, round(wgmma / fewest))) for body, wgmma in loops]
    return min(with_steps, key=lambda loop: (len(loop[0]) / loop[1], len(loop[0])))


def positions(body, prefix):
    """Positions in the step of the instructions whose opcode, predicate dropped, starts so."""
    return [i for i, (_, text) in enumerate(body) if PREDICATE.sub("", text).startswith(prefix)]


def depbar_positions(body):
    """WARPGROUP.DEPBAR (the waits), not WARPGROUP.ARRIVE (the fence before an issue)."""
    return positions(body, "WARPGROUP.DEPBAR")


def turn_span(body):
    """(BAR.SYNC, the first BAR.ARV after it) positions in the step, or None."""
    syncs = positions(body, "BAR.SYNC")
    arrivals = [i for i in positions(body, "BAR.ARV") if syncs and i > syncs[0]]
    return (syncs[0], arrivals[0]) if arrivals else None


def kernel_label(name, seen):
    row = ROW.search(name)
    if row:
        mask = "causal" if row.group(2) == "1" else "non-causal"
        label = f"hd{row.group(1)} {mask} row {row.group(3)} {row.group(4)}B"
    else:
        label = name[:60]
    seen[label] += 1
    return label if seen[label] == 1 else f"{label} #{seen[label]}"


def summarize(instructions):
    body, steps = step_loop(instructions)
    dealloc = next((i for i, (_, t) in enumerate(instructions) if "USETMAXREG.DEALLOC" in t),
                   len(instructions))
    max_reg = max((int(r) for _, t in instructions[:dealloc] for r in REGISTER.findall(t)),
                  default=-1)
    alloc = next((i for i, (_, t) in enumerate(instructions) if "USETMAXREG.TRY_ALLOC" in t or
                  "USETMAXREG.ALLOC" in t), None)
    stl = [i for i, (_, t) in enumerate(instructions) if opcode(t) == "STL"]
    consumer_stl = [i for i in stl if alloc is not None and alloc < i < dealloc]
    fmnmx, mufu = positions(body, "FMNMX"), positions(body, "MUFU")
    return {
        "step": len(body) / steps if steps > 1 else len(body),
        "steps": steps,
        "depbar": depbar_positions(body),
        "fmnmx": (fmnmx[0], fmnmx[-1]) if fmnmx else None,
        "mufu": (mufu[0], mufu[-1]) if mufu else None,
        "turn": turn_span(body),
        "max_reg": max_reg,
        "stl": len(stl),
        "consumer_stl": len(consumer_stl),
        "ops": collections.Counter(opcode(t) for _, t in body),
    }


def kernels(path, layout):
    with open(path) as f:
        functions = parse_functions(f)
    seen = collections.Counter()
    out = {}
    for name, instructions in functions.items():
        if "sm90_forward_kernel" not in name:
            continue
        found = LAYOUT.search(name)
        if layout and (not found or found.group(1) != f"Sm90{layout}Layout"):
            continue
        out[kernel_label(name, seen)] = summarize(instructions)
    return out


def span(pair):
    return f"{pair[0]}-{pair[1]}" if pair else "-"


def report(path, layout, ops, against):
    mine = kernels(path, layout)
    other = kernels(against, layout) if against else {}
    lines = []
    for label, k in mine.items():
        unrolled = f" (a loop of {k['steps']} steps)" if k["steps"] > 1 else ""
        lines.append(f"{label}: step {k['step']}{unrolled}, depbar {k['depbar']}, "
                     f"fmnmx {span(k['fmnmx'])}, "
                     f"mufu {span(k['mufu'])}, turn {span(k['turn'])}, "
                     f"max reg R{k['max_reg']}, stl {k['stl']} "
                     f"({k['consumer_stl']} among the consumers)")
        if against and label in other:
            o = other[label]
            lines.append(f"  against: step {o['step']}, depbar {o['depbar']}, "
                         f"turn {span(o['turn'])}, max reg "
                         f"R{o['max_reg']}, stl {o['stl']} "
                         f"({o['consumer_stl']} among the consumers)")
            families = sorted(set(k["ops"]) | set(o["ops"]),
                              key=lambda f: -max(k["ops"][f], o["ops"][f]))
            changed = [f"{f} {o['ops'][f]}->{k['ops'][f]}" for f in families
                       if k["ops"][f] != o["ops"][f]]
            lines.append("  families that differ: " + (", ".join(changed) if changed else "none"))
        elif ops:
            top = ", ".join(f"{f} {n}" for f, n in k["ops"].most_common(ops))
            lines.append(f"  {top}")
    return lines


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sass")
    parser.add_argument("--layout", default="Dense",
                        help="the layout in the kernel's name: Dense, or Serving (every "
                             "serving kernel); '' for every one")
    parser.add_argument("--ops", type=int, default=0, help="print the step's N commonest families")
    parser.add_argument("--against", help="another dump of the same instance, to compare with")
    args = parser.parse_args(argv)
    lines = report(args.sass, args.layout, args.ops, args.against)
    if not lines:
        print(f"no sm90_forward_kernel with layout {args.layout!r} in {args.sass}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
