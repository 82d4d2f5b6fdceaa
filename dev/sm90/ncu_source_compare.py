"""Where two sm90 kernels' time goes, instruction by instruction: stall samples and executed
instructions from Nsight Compute's SASS source page, split by role, set side by side.

On the device machine, one launch of each kernel (docs/kernels.md, runs 207 and 213):

    ncu --clock-control base --set full --import-source no --kernel-name regex:sm90_forward \
        --launch-skip 3 --launch-count 1 -o A python3 calls.py varlen
    ncu -i A.ncu-rep --page source --csv --print-source sass > A.csv     # likewise B
    python3 dev/sm90/ncu_source_compare.py A.csv B.csv --names varlen dense

Roles: the producer warpgroup's code follows its register release (USETMAXREG.DEALLOC); the
rest is the consumers', of which the step loop is the body of the backward branch that holds
wgmma (HGMMA; QGMMA in fp8) and branches back most often. Printed: each role's stall samples by
reason, the barrier waits' samples and retries (SYNCS TRYWAIT: the try and the retry loop
elsewhere), and the blocks of aligned instructions (difflib over opcodes) whose samples differ
most.
"""
import argparse
import collections
import csv
import difflib
import re

STALL_PREFIX = "stall_"
NOT_ISSUED = "(Not Issued)"


class Kernel:
    def __init__(self, path):
        rows = list(csv.reader(open(path)))
        header_at = next(i for i, row in enumerate(rows) if row and row[0] == "Address")
        header, body = rows[header_at], [row for row in rows[header_at + 1:] if len(row) > 5]
        column = {name: i for i, name in enumerate(header)}
        self.reasons = [name for name in header
                        if name.startswith(STALL_PREFIX) and NOT_ISSUED not in name]
        self.base = int(body[0][0], 16)  # branch targets are absolute addresses
        number = lambda text: int(text.replace(",", "") or 0)  # noqa: E731
        self.instructions = []
        for row in body:
            text = row[column["Source"]].strip()
            self.instructions.append({
                "address": int(row[0], 16) - self.base,
                "text": text,
                "opcode": re.sub(r"^@!?U?P\w+\s+", "", text).split()[0],
                "executed": number(row[column["Instructions Executed"]]),
                "samples": number(row[column["Warp Stall Sampling (All Samples)"]]),
                "stalls": {name[len(STALL_PREFIX):]: number(row[column[name]])
                           for name in self.reasons},
            })
        self.producer_from = next((i["address"] for i in self.instructions
                                   if "USETMAXREG.DEALLOC" in i["text"]), None)
        self.step_loop = self._step_loop()

    def _step_loop(self):
        """(first, last) address of the wgmma loop whose backward branch runs most often (the
        innermost: the tile loop around it branches back once a tile), or None."""
        index = {i["address"]: n for n, i in enumerate(self.instructions)}
        best = None
        for n, instruction in enumerate(self.instructions):
            target = re.search(r"BRA\s.*?0x([0-9a-f]+)", instruction["text"])
            first = int(target.group(1), 16) - self.base if target else None
            if first is None or first not in index or first >= instruction["address"]:
                continue
            body = self.instructions[index[first]:n + 1]
            if any(re.search(r"\b[HQ]GMMA", i["text"]) for i in body):
                executed = instruction["executed"]
                if best is None or executed > best[0]:
                    best = (executed, first, instruction["address"])
        return None if best is None else best[1:]

    def role(self, instruction):
        if self.producer_from is not None and instruction["address"] >= self.producer_from:
            return "producer"
        if self.step_loop and self.step_loop[0] <= instruction["address"] <= self.step_loop[1]:
            return "step loop"
        return "consumers, rest"


def by_role(kernel):
    totals = collections.defaultdict(collections.Counter)
    for instruction in kernel.instructions:
        role = totals[kernel.role(instruction)]
        role["samples"] += instruction["samples"]
        role["executed"] += instruction["executed"]
        role.update(instruction["stalls"])
    return totals


def barrier_waits(kernel):
    """TRYWAIT instructions that ran: the samples of the branch after each (where a waiting warp
    sits) and the executions of the same barrier's retry loop."""
    waits = collections.OrderedDict()
    for n, instruction in enumerate(kernel.instructions):
        if "TRYWAIT" not in instruction["text"] or not instruction["executed"]:
            continue
        operand = re.search(r"\[(.*?)\]", instruction["text"]).group(1)
        after = kernel.instructions[n + 1]["samples"] if n + 1 < len(kernel.instructions) else 0
        # The first TRYWAIT of an operand is the try (the retry loops sit at the kernel's end).
        entry = waits.setdefault(operand,
                                 {"tries": 0, "samples": 0, "role": kernel.role(instruction)})
        entry["tries"] += instruction["executed"]
        entry["samples"] += after + instruction["samples"]
    return waits


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--names", nargs=2, default=("A", "B"))
    parser.add_argument("--blocks", type=int, default=12, help="aligned blocks to list")
    args = parser.parse_args()
    kernels = [Kernel(args.a), Kernel(args.b)]
    a_name, b_name = args.names

    print(f"{'':18s} {a_name:>12s} {b_name:>12s}")
    for label, key in (("instructions", None), ("executed", "executed"), ("samples", "samples")):
        values = [len(k.instructions) if key is None else sum(i[key] for i in k.instructions)
                  for k in kernels]
        print(f"{label:18s} {values[0]:12d} {values[1]:12d}")
    roles = [by_role(k) for k in kernels]
    for role in ("step loop", "consumers, rest", "producer"):
        print(f"\n{role}: samples {roles[0][role]['samples']} / {roles[1][role]['samples']}, "
              f"executed {roles[0][role]['executed']} / {roles[1][role]['executed']}")
        reasons = sorted(kernels[0].reasons, key=lambda r: -abs(
            roles[0][role][r[len(STALL_PREFIX):]] - roles[1][role][r[len(STALL_PREFIX):]]))
        for reason in reasons[:6]:
            name = reason[len(STALL_PREFIX):]
            print(f"  {name:18s} {roles[0][role][name]:8d} {roles[1][role][name]:8d}")

    for kernel, name in zip(kernels, args.names):
        print(f"\nbarrier waits, {name} (tries include the retries; samples where it waits)")
        for operand, wait in barrier_waits(kernel).items():
            print(f"  [{operand:18s}] {wait['role']:16s} tries {wait['tries']:9d} "
                  f"samples {wait['samples']:6d}")

    opcodes = [[i["opcode"] for i in k.instructions] for k in kernels]
    matcher = difflib.SequenceMatcher(None, *opcodes, autojunk=False)
    blocks = []
    for tag, a0, a1, b0, b1 in matcher.get_opcodes():
        a_part, b_part = kernels[0].instructions[a0:a1], kernels[1].instructions[b0:b1]
        a_samples = sum(i["samples"] for i in a_part)
        b_samples = sum(i["samples"] for i in b_part)
        first = (a_part or b_part)[0]
        blocks.append((a_samples - b_samples, tag, a_part, b_part, a_samples, b_samples, first))
    blocks.sort(key=lambda block: -abs(block[0]))
    print(f"\naligned blocks whose samples differ most ({a_name} - {b_name})")
    for delta, tag, a_part, b_part, a_samples, b_samples, first in blocks[:args.blocks]:
        where = kernels[0 if a_part else 1].role(first)
        print(f"  {delta:+6d} {tag:8s} {where:16s} {a_name} {len(a_part)} instr at "
              f"{a_part[0]['address'] if a_part else -1:#x}, {b_name} {len(b_part)} at "
              f"{b_part[0]['address'] if b_part else -1:#x}: {first['text'][:48]}")


if __name__ == "__main__":
    main()
