"""dev/sm90/sass_steps.py on a small hand-written SASS dump: the step loop it picks, the waits'
positions, the consumers' register and local stores, and the comparison of two dumps."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "dev", "sm90"))
import sass_steps  # noqa: E402

ROW = "Sm90TableRowILi64ELb0ELi2ELi1EE"
KERNEL = ("_ZN9flashcore6detail19sm90_forward_kernelINS0_15Sm90DenseLayoutENS0_12Sm90Mainloop"
          f"INS0_14Sm90TileConfigINS0_12{ROW}EEEv")
SERVING = KERNEL.replace("15Sm90DenseLayout", "17Sm90ServingLayout")


def dump(name, body):
    """A cuobjdump-style function: one instruction every 16 bytes."""
    lines = [f"\t\tFunction : {name}"]
    for i, text in enumerate(body):
        lines.append(f"        /*{16 * i:04x}*/                   {text} ;")
    return lines


def kernel_body(step_extra=()):
    """setmaxnreg, a consumer spill, an outer loop around a shorter step loop, the producer."""
    step = ["QGMMA.64x160x32.F32.E4M3.E4M3 R24, gdesc[UR24], RZ, !UPT",
            "QGMMA.64x64x32.F32.E4M3.E4M3 R104, R152, gdesc[UR20], R104, gsb0",
            "WARPGROUP.ARRIVE",
            "WARPGROUP.DEPBAR.LE gsb0, 0x1",
            "FMNMX R3, R24, R25, !PT",
            "MUFU.EX2 R24, R24",
            "@!P0 WARPGROUP.DEPBAR.LE gsb0, 0x0",
            "MUFU.EX2 R25, R25",
            *step_extra]
    head = ["USETMAXREG.TRY_ALLOC.CTAPOOL 0xa0", "STL [R1], R200", "NOP"]
    outer_start = len(head)
    inner_start = outer_start + 1
    body = head + ["IADD3 R0, R0, 0x1, RZ"] + step
    body.append(f"@P1 BRA 0x{16 * inner_start:x}")  # the step loop
    body += ["QGMMA.64x64x32.F32.E4M3.E4M3 R104, R152, gdesc[UR20], R104",
             "QGMMA.64x64x32.F32.E4M3.E4M3 R104, R152, gdesc[UR20], R104"]
    body.append(f"@P2 BRA 0x{16 * outer_start:x}")  # the tile loop, longer
    body += ["USETMAXREG.DEALLOC.CTAPOOL 0x18", "STL [R1+0x8], R7", "EXIT"]
    return body


def write(tmp_path, name, lines):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_picks_the_shortest_loop_with_two_wgmma(tmp_path):
    path = write(tmp_path, "a.sass", dump(KERNEL, kernel_body()) + dump("_Z6helperv", ["EXIT"]))
    found = sass_steps.kernels(path, "Dense")
    assert list(found) == ["hd64 non-causal row 2 1B"]
    k = found["hd64 non-causal row 2 1B"]
    assert k["step"] == 9  # the eight step instructions and the branch back
    assert k["depbar"] == [3, 6]  # the S wait, then the P V wait; not the ARRIVE
    assert k["fmnmx"] == (4, 4) and k["mufu"] == (5, 7)
    assert k["max_reg"] == 200  # before the producer's dealloc
    assert k["stl"] == 2 and k["consumer_stl"] == 1
    assert k["ops"]["QGMMA"] == 2 and k["ops"]["MUFU"] == 2


def test_layout_filter(tmp_path):
    path = write(tmp_path, "a.sass", dump(SERVING, kernel_body()))
    assert sass_steps.kernels(path, "Dense") == {}
    assert list(sass_steps.kernels(path, "Serving")) == ["hd64 non-causal row 2 1B"]
    assert list(sass_steps.kernels(path, "")) == ["hd64 non-causal row 2 1B"]


def test_repeated_rows_are_numbered(tmp_path):
    lines = dump(KERNEL, kernel_body()) + dump(KERNEL + "x", kernel_body())
    path = write(tmp_path, "a.sass", lines)
    assert list(sass_steps.kernels(path, "Dense")) == ["hd64 non-causal row 2 1B",
                                                       "hd64 non-causal row 2 1B #2"]


def test_against_lists_the_families_that_differ(tmp_path):
    base = write(tmp_path, "base.sass", dump(KERNEL, kernel_body()))
    cand = write(tmp_path, "cand.sass", dump(KERNEL, kernel_body(["PRMT R152, R24, 0x5410, R25"])))
    lines = sass_steps.report(cand, "Dense", 0, base)
    assert lines[0].startswith("hd64 non-causal row 2 1B: step 10,")
    assert lines[1].startswith("  against: step 9,")
    assert lines[2] == "  families that differ: PRMT 0->1"


def test_no_kernel_is_an_error(tmp_path, capsys):
    path = write(tmp_path, "a.sass", dump("_Z6helperv", ["EXIT"]))
    assert sass_steps.main([path]) == 1
    assert "no sm90_forward_kernel" in capsys.readouterr().err


def test_a_loop_of_two_steps_counts_per_step(tmp_path):
    """Steps unrolled in pairs: a loop of twice a step's wgmma is two steps, and its length a step
    beats a masked single-step loop that is shorter as a whole."""
    step = ["QGMMA.64x160x32.F32.E4M3.E4M3 R24, gdesc[UR24], RZ, !UPT",
            "QGMMA.64x64x32.F32.E4M3.E4M3 R104, R152, gdesc[UR20], R104, gsb0",
            "WARPGROUP.DEPBAR.LE gsb0, 0x1",
            "MUFU.EX2 R24, R24",
            "WARPGROUP.DEPBAR.LE gsb0, 0x0"]
    masked = step[:3] + ["FSEL R24, R24, -INF, P0"] * 4 + step[3:]  # 9, and the branch: 10
    body = ["USETMAXREG.TRY_ALLOC.CTAPOOL 0xa0", "NOP"]
    masked_start = len(body)
    body += masked + [f"@P1 BRA 0x{16 * masked_start:x}"]
    pair_start = len(body)
    body += step + step + [f"@P1 BRA 0x{16 * pair_start:x}"]  # 11: 5.5 a step
    body += ["USETMAXREG.DEALLOC.CTAPOOL 0x18", "EXIT"]
    path = write(tmp_path, "a.sass", dump(KERNEL, body))
    k = sass_steps.kernels(path, "Dense")["hd64 non-causal row 2 1B"]
    assert k["steps"] == 2 and k["step"] == 5.5
    assert k["depbar"] == [2, 4, 7, 9]  # within the whole loop
    line = sass_steps.report(path, "Dense", 0, None)[0]
    assert line.startswith("hd64 non-causal row 2 1B: step 5.5 (a loop of 2 steps), depbar")


def test_a_loop_around_a_loop_is_not_a_step_loop(tmp_path):
    """The tile loop holds the step loop: however few instructions it has a wgmma, it is not
    picked."""
    step = ["QGMMA.64x160x32.F32.E4M3.E4M3 R24, gdesc[UR24], RZ, !UPT",
            "QGMMA.64x64x32.F32.E4M3.E4M3 R104, R152, gdesc[UR20], R104, gsb0",
            "MUFU.EX2 R24, R24", "MUFU.EX2 R25, R25", "MUFU.EX2 R26, R26"]
    body = ["NOP"]
    outer_start = len(body)
    body += ["QGMMA.64x64x32.F32.E4M3.E4M3 R104, R152, gdesc[UR20], R104"] * 8
    inner_start = len(body)
    body += step + [f"@P1 BRA 0x{16 * inner_start:x}"]
    body += [f"@P2 BRA 0x{16 * outer_start:x}", "EXIT"]
    path = write(tmp_path, "a.sass", dump(KERNEL, body))
    k = sass_steps.kernels(path, "Dense")["hd64 non-causal row 2 1B"]
    assert k["steps"] == 1 and k["step"] == 6


def test_the_turn_spans_the_sync_to_the_next_arrival(tmp_path):
    """A ping-pong step: the turn runs from BAR.SYNC to the first BAR.ARV after it (an arrival
    before the sync, of another barrier, is not its end); a step without turns has none."""
    turns = ["BAR.ARV R21, 0x100", "BAR.SYNC.DEFER_BLOCKING R0, 0x100", "IADD3 R1, R1, 0x1, RZ",
             "@!P0 BAR.ARV R20, 0x100"]
    path = write(tmp_path, "a.sass", dump(KERNEL, kernel_body(turns)))
    k = sass_steps.kernels(path, "Dense")["hd64 non-causal row 2 1B"]
    assert k["turn"] == (9, 11)  # after the eight step instructions and the early arrival
    assert ", turn 9-11, " in sass_steps.report(path, "Dense", 0, None)[0]
    plain = write(tmp_path, "b.sass", dump(KERNEL, kernel_body()))
    assert sass_steps.kernels(plain, "Dense")["hd64 non-causal row 2 1B"]["turn"] is None
