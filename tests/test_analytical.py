"""BLIS's analytical model of the packed templates (templates/analytical.py) and its picks in model tuning."""

from __future__ import annotations

import json

import pytest

from schedule_gym import batch_matmul, conv2d, dense, gemm
from schedule_gym.operators import packed_task
from schedule_gym.spaces import TileSpace
from schedule_gym.templates.analytical import MicroArch, analytical_configs, micro_tiles

AVX2 = MicroArch(lanes=8, registers=16, fma_units=2, fma_latency=4, l1_bytes=32 * 1024, l2_bytes=512 * 1024, cores=2)
AVX512 = MicroArch(lanes=16, registers=32, fma_units=2, fma_latency=4, l1_bytes=48 * 1024, l2_bytes=2048 * 1024,
                   cores=2)


@pytest.mark.parametrize("arch", [AVX2, AVX512], ids=["avx2", "avx512"])
@pytest.mark.parametrize("rows, cols", [(128, 768), (196, 256), (7, 512), (1, 1000)])
def test_micro_tiles_fit_the_registers_and_divide_the_extents(arch, rows, cols) -> None:
    tiles = micro_tiles(arch, rows, cols)
    assert tiles
    for mr, nr in tiles:
        assert rows % mr == 0 and cols % nr == 0
        vectors = -(-nr // arch.lanes)
        if cols % arch.lanes == 0:  # whole vectors (v3 writes any number of them out)
            assert nr % arch.lanes == 0
        else:  # part of one vector
            assert nr < arch.lanes and nr & (nr - 1) == 0
        assert mr * vectors + vectors + 1 <= arch.registers


def test_the_best_micro_tile_hides_the_fma_latency_with_the_most_fmas_per_load() -> None:
    # AVX2, 2 FMA units of latency 4: 8 accumulators needed. 4 x 24 (12 accumulators, 3 vectors of B and a
    # broadcast: all 16 registers) has 1.71 FMAs per load, 4 x 16 and 2 x 32 have 1.33 (8 x 8: 0.89)
    assert micro_tiles(AVX2, 128, 768)[:3] == [(4, 24), (4, 16), (2, 32)]
    # where the rows allow 6: 6 x 16, 12 accumulators, 1.5 FMAs per load, behind 4 x 24
    assert micro_tiles(AVX2, 96, 768)[:2] == [(4, 24), (6, 16)]
    # AVX-512: 4 x 96 (24 accumulators, 6 vectors of B: 31 of 32 registers, 2.4 FMAs per load), then 8 x 48
    # (2.18) and 4 x 64 (2.0)
    assert micro_tiles(AVX512, 128, 768)[:3] == [(4, 96), (8, 48), (4, 64)]


def test_part_of_a_vector_is_the_widest_part_that_divides_the_columns() -> None:
    # 4 columns on AVX2's 8 lanes: 14 x 4 and 8 x 4 fill half of each FMA (and hide its latency), before
    # 14 x 2 and 14 x 1 (a quarter and an eighth)
    assert micro_tiles(AVX2, 56, 4)[:4] == [(14, 4), (8, 4), (14, 2), (8, 2)]


@pytest.mark.parametrize("arch", [AVX2, AVX512], ids=["avx2", "avx512"])
@pytest.mark.parametrize("task", [
    conv2d(1, 56, 56, 128, 128, 3, padding=1, groups=32, layout="NHWC"),  # ResNeXt-50's first: 4 channels a group
    conv2d(1, 14, 14, 512, 512, 3, padding=1, groups=32, layout="NHWC"),  # 16 a group
    conv2d(1, 28, 28, 512, 512, 3, stride=2, padding=1, groups=32, layout="NHWC"),
], ids=lambda t: t.name)
def test_grouped_picks_keep_each_micro_tile_within_one_group(task, arch) -> None:
    """A micro-tile across groups reads a different input channel in each lane (slow); the picks' NR divides a
    group's output channels, and uses as many of its lanes as a group allows."""
    group_columns = task.extent_of["co"] // task.param("groups")
    picks = analytical_configs(packed_task(task), arch, count=4)
    assert len(picks) == 4
    for config in picks:
        nr = dict(zip(task.dim_names, config))["co"][-1]
        assert group_columns % nr == 0 and nr % min(group_columns, arch.lanes) == 0


@pytest.mark.parametrize("task", [
    dense(128, 768, 768, bias=True), dense(128, 3072, 768), dense(1, 2048, 1000, bias=True), gemm(1024, 1024, 1024),
    batch_matmul(12, 128, 64, 128, transpose_b=True), batch_matmul(12, 128, 128, 64),
    conv2d(1, 56, 56, 64, 64, 3, stride=1, padding=1, layout="NHWC"),
    conv2d(1, 28, 28, 256, 256, 3, stride=2, padding=1, layout="NHWC"),
    conv2d(1, 7, 7, 512, 2048, 1, layout="NHWC"),
], ids=lambda t: t.name)
@pytest.mark.parametrize("arch", [AVX2, AVX512], ids=["avx2", "avx512"])
def test_picks_are_distinct_valid_configs_that_keep_every_core_busy(task, arch) -> None:
    packed = packed_task(task)
    picks = analytical_configs(packed, arch, count=4)
    assert 1 <= len(picks) <= 4 and len(set(picks)) == len(picks)
    space = TileSpace(packed)
    for config in picks:
        assert space.validate(config) == config
        f = dict(zip(packed.dim_names, config))
        if packed.op == "conv2d":
            blocks = f["n"][0] * f["h"][0] * f["w"][0] * f["co"][0]
            kc, nr, mr, window = f["rc"][1], f["co"][2], f["w"][2], f["rh"][0] * f["rw"][0]
        else:
            # GEMM's v6 runs its row blocks in parallel (one block's micro-tile columns where it has one), the others
            # their row and column blocks together
            if packed.op == "gemm":
                blocks = f["m"][0] if f["m"][0] > 1 else f["n"][1]
            else:
                blocks = f.get("b", (1,))[0] * f["m"][0] * f["n"][0]
            kc, nr, mr, window = f["k"][1], f["n"][2], f["m"][2], 1
        assert blocks >= arch.cores
        # the KC-deep micro-panels fit 3/4 of L1 unless even the smallest depth cannot
        assert window * kc * (nr + 2 * mr) * 4 <= 0.75 * arch.l1_bytes or kc == 1


def test_kc_is_the_deepest_divisor_that_fits_l1() -> None:
    picks = analytical_configs(packed_task(dense(128, 768, 768)), AVX2, count=1)
    (m0, m1, mr), (k0, kc), (n0, n1, nr) = picks[0]
    assert (mr, nr) == (4, 24)
    # 192 x (24 + 8) x 4 bytes = 24 KiB fits 3/4 of 32 KiB; the next divisor of 768, 256, does not (32 KiB)
    assert kc == 192 and k0 == 4


def test_each_matmul_tile_also_gets_a_deeper_kc_third() -> None:
    """The L1 rule leaves AVX-512's wide tiles shallow (4 x 64 in 32 KiB: KC = 64); each tile's third pick is the
    deepest KC whose micro-panel of B alone fits L1, with its own best blocks, so the first measurements include it.
    The first four picks are the L1 rule's, as before the deeper one."""
    zen4 = MicroArch(lanes=16, registers=32, fma_units=1, fma_latency=4, l1_bytes=32 * 1024, l2_bytes=1024 * 1024,
                     cores=2)
    four, six = (analytical_configs(packed_task(gemm(1024, 1024, 1024)), zen4, count=c) for c in (4, 6))
    assert six[:4] == four
    for config in four:
        (_, _, mr), (_, kc), (_, _, nr) = config
        assert kc * (nr + 2 * mr) * 4 <= 0.75 * zen4.l1_bytes
    (_, _, mr), (k0, kc), (_, _, nr) = six[4]
    assert (mr, nr) == (four[0][0][2], four[0][2][2]) == (4, 64)  # the best tile, deeper
    assert kc == 128 and k0 == 8 and kc * nr * 4 <= zen4.l1_bytes < 2 * kc * nr * 4
    assert six[5][1] == (4, 256) and six[5][2][2] == 32  # the second tile (8 x 32): 256 x 32 x 4 bytes = 32 KiB
    # where the L1 rule already gives the deepest divisor, no deeper pick: the picks vary the blocks alone
    shallow = analytical_configs(packed_task(dense(128, 32, 768)), zen4, count=6)
    assert len(shallow) == 6 and {kc for _, (_, kc), _ in shallow} == {32}


def test_matmul_picks_split_columns_since_v4_reads_a_in_place() -> None:
    """The matmul templates (v4) pack only B, once per row block: where the columns hold enough micro-tiles to keep
    two blocks per core, each micro-tile's first pick keeps one row block (the later ones vary the block counts).
    (Counting A's packing too, as for v3, a 512-row layer split its rows four ways instead: 512 x 1 + 128 x 4
    elements packed against 512 x 4 + 128 x 1.)"""
    firsts = analytical_configs(packed_task(dense(512, 256, 128)), AVX512, count=4)[:2]  # the best of each tile
    assert any(nr == 32 for _, _, (_, _, nr) in firsts)
    for (m0, _, _), _, (n0, _, nr) in firsts:
        if 128 // nr >= 2 * AVX512.cores:
            assert (m0, n0) == (1, 128 // nr)


def test_wide_dense_picks_keep_cs_block_in_l2_and_read_the_weight_once() -> None:
    """A dense layer accumulates each parallel block's MC x NC block of C over its reduction blocks: GPT-2's LM head
    (128 x 768 x 50,304) had picks of four column blocks, 6.4 MB of C each re-read from memory per reduction block.
    Its picks now keep the block within L2, and, as for every dense layer, one row block, which streams the weight
    once (each row block reads all of its columns of the weight)."""
    picks = analytical_configs(packed_task(dense(128, 768, 50304)), AVX2, count=4)
    assert picks[0] == ((1, 32, 4), (4, 192), (262, 8, 24))
    for (m0, m1, mr), (k0, _), (_, n1, nr) in picks:
        assert m0 == 1 and (k0 == 1 or m1 * mr * n1 * nr * 4 <= AVX2.l2_bytes)
    for (m0, m1, mr), _, (_, n1, nr) in analytical_configs(packed_task(dense(200, 768, 3072)), AVX2, count=4):
        assert m0 == 1 and 200 * n1 * nr * 4 <= AVX2.l2_bytes


def test_gemm_picks_split_rows_since_v6_packs_b_once_for_every_row_block() -> None:
    """GEMM's v6 runs its row blocks in parallel (with one, its micro-tile columns), packs B once and A once per column
    block: its picks keep one column block and as many row blocks as keep every core busy (two each first), where a
    dense layer of the same shape (v8: its column and row blocks in parallel, no copy of its weight) has picks that
    split the columns."""
    picks = analytical_configs(packed_task(gemm(1024, 1024, 1024)), AVX2, count=4)
    assert picks[0] == ((4, 64, 4), (4, 256), (1, 64, 16))  # 4 x 16 tile, KC = 256 from L1, MC = 256 from L2
    for (m0, _, _), _, (n0, _, _) in picks:
        assert m0 % AVX2.cores == 0 and n0 == 1
    few_rows = analytical_configs(packed_task(gemm(64, 512, 2048)), AVX512, count=4)
    assert all(n0 == 1 for _, _, (n0, _, _) in few_rows)
    for (m0, _, _), _, (_, n1, _) in few_rows:  # the row blocks keep the cores busy, or one block's columns do
        assert (m0 if m0 > 1 else n1) >= 2 * AVX512.cores
    dense_picks = analytical_configs(packed_task(dense(64, 512, 2048, bias=False)), AVX512, count=4)
    assert any(n0 > 1 for _, _, (n0, _, _) in dense_picks)  # v8: column blocks keep the cores busy


def test_no_picks_for_tasks_without_a_packed_template_and_bad_counts_are_named() -> None:
    assert analytical_configs(dense(128, 768, 768), AVX2) == []  # v1's form, not the packed one
    assert analytical_configs(conv2d(1, 56, 56, 32, 32, 3, groups=32, layout="NHWC"), AVX2) == []
    assert analytical_configs(packed_task(dense(128, 768, 768)), AVX2, count=0) == []
    with pytest.raises(ValueError, match="count must be a non-negative integer, got -1"):
        analytical_configs(packed_task(dense(128, 768, 768)), AVX2, count=-1)
    with pytest.raises(ValueError, match="MicroArch.registers must be a positive integer, got 0"):
        MicroArch(lanes=8, registers=0, fma_units=2, fma_latency=4, l1_bytes=1, l2_bytes=1, cores=1)


def test_host_facts_are_read_from_the_machine() -> None:
    from schedule_gym import hardware

    arch = MicroArch.of_host(cores=3)
    assert arch.lanes == hardware.vector_bits() // 32 and arch.cores == 3
    assert arch.registers == (32 if arch.lanes == 16 else 16)


@pytest.fixture(scope="module")
def tiny_bert_packed():
    pytest.importorskip("torch")
    pytest.importorskip("tvm")
    from schedule_gym.models.pipeline import load_model

    return load_model("tiny-bert").mapped.packed()


def _tune_on_the_mock(packed, records, agent: str, **kwargs):
    """80 measurements over tiny BERT's packed tasks in rounds of 16, 3 picks each; the result and the records."""
    from schedule_gym.models.tuning import tune_model

    result = tune_model(packed, 80, agent=agent, backend="mock", records=str(records), round_measurements=16,
                        analytical=3, **kwargs)
    return result, [json.loads(line) for line in records.read_text().splitlines()]


def test_model_tuning_measures_the_picks_first_within_the_budget(tiny_bert_packed, tmp_path) -> None:
    from schedule_gym.models.tuning import tune_model

    packed = tiny_bert_packed
    result, lines = _tune_on_the_mock(packed, tmp_path / "picks.jsonl", "random")
    assert result.measurements == 80 and all(t.measurements == 16 for t in result.tasks)
    assert len(lines) == 80
    arch = MicroArch.of_host()
    for model_task in packed.tasks:
        task = model_task.task
        picks = [list(map(list, c)) for c in analytical_configs(task, arch, 3)]
        mine = [line["config"] for line in lines if line["task_def"]["name"] == task.name]
        assert mine[: len(picks)] == picks  # measured first, in their order
        best = min(line["latency_s"] for line in lines if line["task_def"]["name"] == task.name)
        assert next(t for t in result.tasks if t.name == task.name).best_latency_s == best  # the best of both
    alone = tune_model(packed, 80, agent="random", backend="mock", round_measurements=16, analytical=0)
    assert alone.measurements == 80
    with pytest.raises(ValueError, match="analytical must be a non-negative number of configs, got -2"):
        tune_model(packed, 80, agent="random", backend="mock", analytical=-2)


def test_an_agent_told_start_analytical_searches_from_the_best_pick(tiny_bert_packed, tmp_path) -> None:
    from schedule_gym.models.tuning import ANALYTICAL_START

    packed = tiny_bert_packed
    result, lines = _tune_on_the_mock(packed, tmp_path / "start.jsonl", "gbfs", agent_params={"start": ANALYTICAL_START})
    assert result.measurements == 80
    arch = MicroArch.of_host()
    for model_task in packed.tasks:
        task = model_task.task
        space = TileSpace(task)
        mine = [(tuple(map(tuple, line["config"])), line["latency_s"]) for line in lines
                if line["task_def"]["name"] == task.name]
        picks = analytical_configs(task, arch, 3)
        best_pick = min(mine[: len(picks)], key=lambda m: m[1])[0]
        # after the picks: s0 (every agent measures it first), then G-BFS's first batch: neighbours of the best pick
        after = [config for config, _ in mine[len(picks):]]
        neighbours = {config for _, config in space.neighbours(best_pick)}
        first_batch = [c for c in after if c != space.initial_config()][:3]
        assert first_batch and all(c in neighbours for c in first_batch)
