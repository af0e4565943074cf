"""Tuning a whole model: the scheduler's rounds over its tasks, shared records, resume, the rebuilt model,
and ``schedule-gym tune-model``."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tvm")

from schedule_gym.cli import main  # noqa: E402
from schedule_gym.models.build import compile_model, profile_model, run_model, schedule_kernels  # noqa: E402
from schedule_gym.models.pipeline import check_outputs, load_model, torch_outputs  # noqa: E402
from schedule_gym.models.tuning import tune_model  # noqa: E402
from schedule_gym.records import RecordStore  # noqa: E402

pytestmark = pytest.mark.tvm


@pytest.fixture(scope="module")
def tiny_cnn():
    return load_model("tiny-cnn")


def test_budget_is_spread_over_every_task_and_spent_exactly(tiny_cnn) -> None:
    mapped = tiny_cnn.mapped
    result = tune_model(mapped, 80, agent="random", backend="mock", round_measurements=8)
    assert result.measurements == 80
    assert {t.name for t in result.tasks} == {t.task.name for t in mapped.tasks}
    assert all(t.measurements >= 8 for t in result.tasks)  # the warm-up gives every task a round
    assert len(result.history) == 10
    est = result.estimated_latency_s
    assert est == pytest.approx(sum(t.weight * t.best_latency_s for t in result.tasks))
    # the scheduler's last estimate is the result's
    assert result.history[-1]["estimated_latency_s"] == pytest.approx(est)
    # seeded: the same run again gives the same allocation and configs
    again = tune_model(mapped, 80, agent="random", backend="mock", round_measurements=8)
    assert [t.measurements for t in again.tasks] == [t.measurements for t in result.tasks]
    assert again.configs == result.configs


def test_real_tuning_resumes_from_its_records_and_the_rebuilt_model_equals_pytorch(tiny_cnn, tmp_path) -> None:
    records = tmp_path / "model.jsonl"
    options = {"num_threads": 1, "protocol": {"min_repeat_ms": 2, "repeat": 1}}
    # finalists=0: the picks are the records' fastest (re-timed finalists are timed afresh by each run)
    first = tune_model(tiny_cnn.mapped, 24, agent="random", backend="tvm", backend_options=options,
                       records=str(records), round_measurements=8, finalists=0)
    lines = records.read_text().splitlines()
    assert len(lines) == 24 and first.measurements == 24
    # the same run again is served from the records: nothing new is measured, the same configs come out
    second = tune_model(tiny_cnn.mapped, 24, agent="random", backend="tvm", backend_options=options,
                        records=str(records), round_measurements=8, finalists=0)
    assert records.read_text().splitlines() == lines
    assert second.configs == first.configs
    # a larger budget measures only the new configs
    third = tune_model(tiny_cnn.mapped, 32, agent="random", backend="tvm", backend_options=options,
                       records=str(records), round_measurements=8)
    assert len(records.read_text().splitlines()) == 32 and third.measurements == 32  # re-timing records nothing
    # by default each task's three fastest configs were timed again (3 rounds) and the model is built with the picks
    assert all(len(t.finalists) == min(3, t.measurements) for t in third.tasks)
    assert all(len(f.rounds_s) == 3 and f.retimed_s is not None for t in third.tasks for f in t.finalists)
    assert third.configs == {t.name: t.finalists[0].config for t in third.tasks if t.finalists}
    assert any(t.finalists for t in third.tasks)
    from schedule_gym.backends.tvm.targets import host_llvm_target

    executable = compile_model(schedule_kernels(tiny_cnn.mapped, third.configs), host_llvm_target(1))
    outputs = run_model(executable, tiny_cnn.spec.inputs)
    assert check_outputs(outputs, torch_outputs(tiny_cnn.spec)) is None
    assert len(RecordStore(records)) == 32


def test_profile_times_every_kernel_where_it_runs_and_names_its_task(tiny_cnn) -> None:
    from schedule_gym.backends.tvm.targets import host_llvm_target

    mapped = tiny_cnn.mapped
    executable = compile_model(schedule_kernels(mapped, untuned="s0"), host_llvm_target(1))
    kernels = profile_model(executable, tiny_cnn.spec.inputs, runs=3, tasks=mapped.kernel_tasks())
    by_task = {k.task: k for k in kernels if k.task is not None}
    # every task's kernel, called as often per run as the task's weight says
    assert {name: k.calls for name, k in by_task.items()} == mapped.task_weights()
    assert all(k.seconds > 0 for k in kernels)
    assert [k.seconds for k in kernels] == sorted((k.seconds for k in kernels), reverse=True)
    # the operators left to TVM and the VM's builtins are there too, with no task
    assert any(k.task is None and not k.symbol.startswith("vm.") for k in kernels)
    assert any(k.symbol.startswith("vm.builtin") for k in kernels)
    # the hook is taken off again: the model still runs and still equals PyTorch
    assert check_outputs(run_model(executable, tiny_cnn.spec.inputs), torch_outputs(tiny_cnn.spec)) is None
    with pytest.raises(ValueError, match="runs must be >= 1.*runs=0"):
        profile_model(executable, tiny_cnn.spec.inputs, runs=0)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"budget": 0}, "budget must be a positive"),
        ({"budget": 10, "agent": "nope"}, "unknown agent 'nope'"),
        ({"budget": 10, "agent": "csp"}, "loop orders"),
        ({"budget": 10, "strategy": "greedy"}, "greedy"),
    ],
)
def test_bad_tuning_arguments_are_named(tiny_cnn, kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        tune_model(tiny_cnn.mapped, **kwargs)


def test_tune_model_command_tunes_rebuilds_checks_and_writes_its_result(tmp_path, capsys) -> None:
    out = tmp_path / "r.json"
    code = main(["tune-model", "--model", "tiny-cnn", "--budget", "24", "--agent", "random", "--backend", "mock",
                 "--round", "8", "--threads", "1", "--repeat", "2", "--result", str(out)])
    text = capsys.readouterr().out
    assert code == 0, text
    assert "mapped" in text and "round" in text and "outputs equal PyTorch's" in text
    data = json.loads(out.read_text())
    assert data["check"] == "ok" and data["measurements"] == 24 and data["latency_s"]["tuned (schedule-gym)"]["median"] > 0


def test_tune_model_command_gives_every_task_a_round_by_default_and_says_so(tmp_path, capsys) -> None:
    # a budget below 16 x tasks: the default round of 16 would leave a task of tiny-mlp without a measurement
    out = tmp_path / "r.json"
    code = main(["tune-model", "--model", "tiny-mlp", "--budget", "6", "--agent", "random", "--backend", "mock",
                 "--no-build", "--quiet", "--result", str(out)])
    text = capsys.readouterr().out
    assert code == 0, text
    assert ("rounds of 3 measurements (the default 16 lowered so that the budget of 6 gives each of the 2 tasks a "
            "round; --round to choose)") in text
    data = json.loads(out.read_text())
    assert data["round"] == 3 and [t["measurements"] for t in data["tasks"]] == [3, 3]
    assert all(t["best_config"] is not None for t in data["tasks"]) and "got no measurement" not in text
    # a --round too large for the budget is kept, with a word on what it leaves out
    assert main(["tune-model", "--model", "tiny-mlp", "--budget", "6", "--round", "6", "--agent", "random",
                 "--backend", "mock", "--no-build", "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "the budget of 6 leaves some of the 2 tasks without a round (at most 3 per round would reach all)" in text
    assert "1 task(s) got no measurement" in text


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--model", "resnet1000", "--budget", "5"], "unknown model 'resnet1000'"),
        (["--model", "tiny-cnn", "--budget", "0"], "--budget and --round must be positive"),
        (["--model", "tiny-cnn", "--budget", "5", "--round", "0"], "--budget and --round must be positive"),
        (["--model", "tiny-cnn", "--budget", "5", "--threads", "0"], "--threads must be a positive integer, got 0"),
        (["--model", "tiny-cnn", "--budget", "5", "--repeat", "0"], "--repeat must be a positive integer, got 0"),
        (["--model", "tiny-cnn", "--budget", "5", "--analytical", "-1"],
         "--analytical must be a non-negative number of configs, got -1"),
        (["--model", "tiny-cnn", "--budget", "5", "--backend", "mock", "--backend-param", "nosie=1"],
         "unknown option 'nosie' for backend 'mock'; its options: records, profile, noise, seed, repeats"),
        (["--model", "tiny-cnn", "--budget", "5", "--result", "/dev/null/r.json"], "--result /dev/null/r.json cannot be written: /dev/null is a file, not a folder"),
        (["--model", "tiny-cnn", "--budget", "5", "--agent", "nope", "--backend", "mock"], "unknown agent 'nope'"),
    ],
)
def test_tune_model_command_names_bad_input(argv, message, capsys) -> None:
    assert main(["tune-model", *argv]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and captured.err.count("\n") == 1
    assert "imported and mapped" not in captured.out  # found before the model is imported


@pytest.mark.parametrize("model", ["tiny-mobilenet", "tiny-bert"])
def test_packed_model_tunes_real_packed_kernels_and_equals_pytorch(model, tmp_path) -> None:
    """``MappedModel.packed()``: every task with a packed template (NHWC conv2d with groups=1 or depthwise, dense,
    batch matmul) is tuned and built with it — the records name its packed template, conv2d's v5 and dense's v8 (their
    weights packed once: the measurements gave the kernels packed weights), tiny-mobilenet's depthwise convolutions
    too; the rebuilt model still equals PyTorch's outputs."""
    from schedule_gym.backends.tvm.targets import host_llvm_target
    from schedule_gym.operators.conv2d import is_depthwise
    from schedule_gym.templates import has_packed_template

    loaded = load_model(model)
    packed = loaded.mapped.packed()
    assert [t.function for t in packed.tasks] == [t.function for t in loaded.mapped.tasks]
    kinds = {t.task.name.endswith("-packed") for t in packed.tasks}
    assert True in kinds
    for before, after in zip(loaded.mapped.tasks, packed.tasks):
        assert after.task.name.endswith("-packed") == has_packed_template(before.task)
    depthwise = [t.task for t in packed.tasks if t.task.op == "conv2d" and is_depthwise(t.task)]
    assert bool(depthwise) == (model == "tiny-mobilenet") and all(t.name.endswith("-packed") for t in depthwise)
    records = tmp_path / "model.jsonl"
    options = {"num_threads": 1, "protocol": {"min_repeat_ms": 2, "repeat": 1}}
    result = tune_model(packed, 4 * len(packed.tasks), agent="random", backend="tvm", backend_options=options,
                        records=str(records), round_measurements=4)
    templates = {r.task.name: r.template for r in RecordStore(records)}
    for t in packed.tasks:
        packed_version = {"conv2d": "v5", "dense": "v8"}.get(t.task.op, "v4")
        want = f"{t.task.op}-cpu-{packed_version if t.task.name.endswith('-packed') else 'v1'}"
        assert templates[t.task.name] == want
    executable = compile_model(schedule_kernels(packed, result.configs), host_llvm_target(1))
    assert check_outputs(run_model(executable, loaded.spec.inputs), torch_outputs(loaded.spec)) is None


def test_compile_model_applies_a_metaschedule_database_then_the_default_schedules(tiny_cnn) -> None:
    """A fused function with a MetaSchedule record gets the record's schedule and keeps it (the default
    schedules take only the rest), and the model built with the database still equals PyTorch."""
    import tvm
    import tvm.s_tir as s_tir
    from tvm.s_tir import meta_schedule as ms

    from schedule_gym.backends.tvm.targets import host_llvm_target
    from schedule_gym.models.build import _schedule_passes, fused_module

    target = tvm.target.Target(host_llvm_target(1))
    fused = fused_module(tiny_cnn.canonical, target)  # its functions are the database's workloads
    task = next(t for t in ms.relax_integration.extract_tasks(fused, target, {}) if t.task_name == "mean")
    sch = s_tir.Schedule(task.dispatched[0])
    sch.parallel(sch.fuse(*sch.get_loops(sch.get_sblock("T_divide"))))
    database = ms.database.MemoryDatabase()
    workload = database.commit_workload(task.dispatched[0])
    database.commit_tuning_record(ms.database.TuningRecord(sch.trace, workload, [1e-3], target))

    def scheduled(schedule_rest: bool) -> dict:
        with target, database:
            mod = tvm.transform.Sequential(_schedule_passes(target, schedule_rest, True))(tiny_cnn.canonical)
        return {gv.name_hint: f for gv, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)}

    alone, with_rest = scheduled(False), scheduled(True)
    assert alone["mean"].attrs.get("tirx.is_scheduled") and "T.parallel" in alone["mean"].script()
    assert with_rest["mean"].script() == alone["mean"].script()  # the default schedules left it as it was
    convs = [name for name in alone if name.startswith("fused_conv2d")]
    assert convs and all("T.parallel" not in alone[name].script() for name in convs)  # no record: unscheduled
    assert all("T.parallel" in with_rest[name].script() for name in convs)  # until the default schedules
    executable = compile_model(tiny_cnn.canonical, host_llvm_target(1), database=database)
    assert not check_outputs(run_model(executable, tiny_cnn.spec.inputs), torch_outputs(tiny_cnn.spec))


def test_pytorch_is_timed_after_tvms_idle_workers_have_stopped_spinning(monkeypatch) -> None:
    from types import SimpleNamespace

    from schedule_gym.models import pipeline

    events = []
    module = torch.nn.Linear(4, 4)
    spec = SimpleNamespace(module=lambda *x: events.append("run") or module(*x), inputs=(torch.randn(2, 4),))
    monkeypatch.setattr(pipeline.time, "sleep", lambda s: events.append(("sleep", s)))
    times = pipeline.torch_latency(spec, 1, repeat=2, min_seconds=0.001)
    assert len(times) == 2 and all(t > 0 for t in times)
    assert events[0] == ("sleep", pipeline.SETTLE_S) and pipeline.SETTLE_S >= 0.5  # the sleep comes before any run
    assert events.count(("sleep", pipeline.SETTLE_S)) == 1 and "run" in events[1:]
    events.clear()
    pipeline.torch_latency(spec, 1, repeat=1, min_seconds=0.001, settle_s=0.0)
    assert events[0] == ("sleep", 0.0)
