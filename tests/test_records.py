"""Record files: durable appends, precise errors for bad lines, replay and resume."""

import gzip
import json
import signal
import subprocess
import sys
import textwrap

import pytest

from schedule_gym import MeasureResult, MockBackend, TileSpace, TilingEnv, gemm, make_backend
from schedule_gym.backends import LatencyBackend, MissingRecordError, ReplayBackend
from schedule_gym.records import RecordFileError, RecordStore

TASK = gemm(64, 32, 64)


class Counting(LatencyBackend):
    name = "counting"
    deterministic = True

    def __init__(self):
        self.inner, self.asked = MockBackend(), []

    def record_context(self, task):
        return self.inner.record_context(task)

    def measure(self, task, configs, on_result=None):
        self.asked.extend(configs)
        return self.inner.measure(task, configs, on_result)


def fill(path, n=20, profile="auto"):
    backend = ReplayBackend(path, delegate=MockBackend(profile))
    env = TilingEnv(TASK, backend=backend)
    env.reset(seed=0)
    env.session.measure([env.space.config(i) for i in range(n)])
    backend.close()


def test_append_and_reload(tmp_path):
    path = tmp_path / "r.jsonl"
    fill(path, 20, "znver5-2core-fitted")
    store = RecordStore(path)
    assert len(store) == 21  # s0 and 20 more
    (target, template), = {(t, v) for (_, t, v) in store.contexts()}
    assert target == "mock:znver5-2core-fitted" and template == "mock-cpu-v2"
    record = store.get(TASK, target, template, TilingEnv(TASK).space.config(3))
    pinned = MockBackend("znver5-2core-fitted")
    assert record.result.latency_s == pinned.measure(TASK, [record.result.config])[0].latency_s
    line = json.loads(path.read_text().splitlines()[0])
    assert line["schema"] == "schedule-gym/record/v1" and line["protocol"]["noise"] == 0.0 and line["time"] > 0


def test_resumed_run_measures_nothing_twice(tmp_path):
    path = tmp_path / "r.jsonl"
    fill(path, 30)
    delegate = Counting()
    env = TilingEnv(TASK, backend=ReplayBackend(path, delegate=delegate))
    env.reset(seed=0)
    env.session.measure([env.space.config(i) for i in range(40)])
    assert len(delegate.asked) == 10  # only the 10 configs the first run did not measure
    assert len(RecordStore(path)) == 41


def test_make_backend_with_records_consults_them(tmp_path):
    path = tmp_path / "r.jsonl"
    fill(path, 5)
    backend = make_backend("mock", records=str(path))
    assert isinstance(backend, ReplayBackend) and isinstance(backend.delegate, MockBackend)
    env = gymnasium_env(backend_options={"records": str(path)})
    env.reset(seed=0)
    assert len(RecordStore(path)) == 6


def gymnasium_env(**kwargs):
    import gymnasium

    import schedule_gym  # noqa: F401

    return gymnasium.make("schedule_gym/Gemm-v0", m=64, k=32, n=64, **kwargs)


def test_replay_without_delegate_serves_records_and_names_misses(tmp_path):
    path = tmp_path / "r.jsonl"
    fill(path, 10)
    mock_env, replay_env = TilingEnv(TASK), TilingEnv(TASK, backend="replay", backend_options={"records": str(path)})
    a, b = mock_env.reset(seed=0), replay_env.reset(seed=0)
    assert a[1]["latency_s"] == b[1]["latency_s"]
    assert replay_env.session.measure([replay_env.space.config(7)])[0].latency_s == mock_env.session.measure([mock_env.space.config(7)])[0].latency_s
    missing = replay_env.space.config(500)
    with pytest.raises(MissingRecordError, match=r"config \(\(.*\)\) of task 'gemm-64x32x64' is not in the records"):
        replay_env.session.measure([missing])


def test_records_of_another_task_are_a_precise_error(tmp_path):
    path = tmp_path / "r.jsonl"
    fill(path, 3)
    env = TilingEnv(gemm(64, 64, 64), backend="replay", backend_options={"records": str(path)})
    with pytest.raises(RecordFileError, match=r"hold no measurements of task 'gemm-64x64x64'.*they hold tasks \['gemm\[m64/4,k32/2r"):
        env.reset(seed=0)


def test_corrupt_and_foreign_lines_name_the_file_and_line(tmp_path):
    path = tmp_path / "r.jsonl"
    fill(path, 3)
    lines = path.read_text().splitlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([lines[0], lines[1][: len(lines[1]) // 2], lines[2]]) + "\n")
    with pytest.raises(RecordFileError, match=rf"{bad}:2: not JSON"):
        RecordStore(bad)
    foreign = tmp_path / "foreign.jsonl"
    foreign.write_text(lines[0] + "\n" + json.dumps({"input": "x", "result": [1.0]}) + "\n")
    with pytest.raises(RecordFileError, match=rf"{foreign}:2: not a schedule-gym record \(schema None"):
        RecordStore(foreign)
    mangled = tmp_path / "mangled.jsonl"
    record = json.loads(lines[0])
    record["config"] = [[64, 1, 1, 1], [32, 1]]
    record["task_def"]["dims"][0][1] = "many"
    mangled.write_text(json.dumps(record) + "\n")
    with pytest.raises(RecordFileError, match=rf"{mangled}:1: bad record"):
        RecordStore(mangled)


def test_interrupted_last_line_is_dropped_and_cut_before_the_next_append(tmp_path):
    path = tmp_path / "r.jsonl"
    fill(path, 4)
    complete = path.read_text()
    path.write_text(complete + complete.splitlines()[0][:40])  # a write cut short by a kill
    store = RecordStore(path)
    assert len(store) == 5
    first = next(iter(store))
    store.append(first.task, first.backend, first.target, first.template, first.result)
    text = path.read_text()
    assert text.startswith(complete) and text.count("\n") == 6
    assert len(RecordStore(path)) == 5  # the re-appended record replaces its older line


CHILD = textwrap.dedent(
    """
    import sys
    from schedule_gym import MockBackend, TilingEnv, gemm
    from schedule_gym.backends import ReplayBackend
    env = TilingEnv(gemm(64, 32, 64), backend=ReplayBackend(sys.argv[1], delegate=MockBackend()))
    env.reset(seed=0)
    i = 0
    while True:
        env.session.measure([env.space.config(i)])
        print(env.session.num_measurements, flush=True)
        i += 1
    """
)


def test_killing_the_writer_loses_at_most_the_record_in_flight(tmp_path):
    path = tmp_path / "r.jsonl"
    reported = 0
    with subprocess.Popen([sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE, text=True) as proc:
        for line in proc.stdout:
            reported = int(line)
            if reported >= 300:
                break
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    # The child runs on between our read and the kill, so it may have written more than it reported;
    # what must hold is that every reported measurement is there, and that the file is a clean prefix
    # of the run: s0 (measured by reset), then configs 0, 1, 2, ... each once, none torn (a torn last
    # line is dropped on load).
    store = RecordStore(path)
    space = TilingEnv(gemm(64, 32, 64)).space
    written = {space.index(record.result.config) for record in store}
    s0 = space.index(space.initial_config())
    others = sorted(written - {s0})
    assert len(store) >= reported and len(written) == len(store)
    assert s0 in written and others == list(range(len(others)))


def test_compressed_tables_are_read_only(tmp_path):
    path = tmp_path / "r.jsonl"
    fill(path, 3)
    gz = tmp_path / "r.jsonl.gz"
    with gzip.open(gz, "wt") as f:
        f.write(path.read_text())
    store = RecordStore(gz)
    assert len(store) == 4 and store.read_only
    first = next(iter(store))
    with pytest.raises(RecordFileError, match="read-only"):
        store.append(first.task, first.backend, first.target, first.template, first.result)
    with pytest.raises(RecordFileError, match="need a writable record file"):
        ReplayBackend(gz, delegate=MockBackend())
    with pytest.raises(RecordFileError, match="does not exist"):
        RecordStore(tmp_path / "nope.jsonl.gz")


def test_unreadable_record_files_name_the_file_and_line(tmp_path):
    path = tmp_path / "r.jsonl"
    fill(path, 2)
    good = path.read_bytes()
    junk = tmp_path / "junk.jsonl"
    junk.write_bytes(good + b"\xff\xfe\x00binary\n")
    junk_line = good.count(b"\n") + 1
    with pytest.raises(RecordFileError, match=rf"{junk}:{junk_line}: not UTF-8 text \(byte 0"):
        RecordStore(junk)
    not_gzip = tmp_path / "plain.jsonl.gz"
    not_gzip.write_bytes(good)
    with pytest.raises(RecordFileError, match=rf"{not_gzip}: not a readable gzip file"):
        RecordStore(not_gzip)
    truncated = tmp_path / "cut.jsonl.gz"
    truncated.write_bytes(gzip.compress(good)[:-12])
    with pytest.raises(RecordFileError, match=rf"{truncated}: not a readable gzip file"):
        RecordStore(truncated)
    folder = tmp_path / "folder.jsonl"
    folder.mkdir()
    with pytest.raises(RecordFileError, match=rf"{folder}: is a directory"):
        RecordStore(folder)
    wrong = tmp_path / "wrong.jsonl"
    record = json.loads(good.split(b"\n")[0])
    record["task_def"] = [1, 2]
    wrong.write_text(json.dumps(record) + "\n")
    with pytest.raises(RecordFileError, match=rf"{wrong}:1: bad record"):
        RecordStore(wrong)


def test_a_record_whose_config_is_not_of_its_task_is_reported(tmp_path):
    path = tmp_path / "r.jsonl"
    fill(path, 1)
    lines = path.read_text().splitlines()
    record = json.loads(lines[-1])
    record["config"][0] = [record["config"][0][0] * 2, *record["config"][0][1:]]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([*lines, json.dumps(record)]) + "\n")
    with pytest.raises(RecordFileError, match=rf"{bad}:{len(lines) + 1}: bad record \(config .* does not belong to task .*multiply to"):
        RecordStore(bad)
    record["config"][0] = [2.5, *record["config"][0][1:]]
    bad.write_text("\n".join([*lines, json.dumps(record)]) + "\n")
    with pytest.raises(RecordFileError, match=r"needs \d positive integer factors, got \[2.5"):
        RecordStore(bad)


class _TimeoutsBelow(MockBackend):
    """The mock, except that every config times out in its build when ``build_timeout_s`` < 10."""

    def __init__(self, build_timeout_s):
        super().__init__()
        self.build_timeout_s = build_timeout_s
        self.measured = 0

    def protocol_dict(self):
        return {**super().protocol_dict(), "build_timeout_s": self.build_timeout_s}

    def measure(self, task, configs, on_result=None):
        self.measured += len(configs)
        if self.build_timeout_s >= 10:
            return super().measure(task, configs, on_result)
        out = []
        for i, config in enumerate(configs):
            out.append(MeasureResult.failure(config, f"build timed out after {self.build_timeout_s:g} s", "timeout"))
            if on_result is not None:
                on_result(i, out[-1])
        return out


def test_a_recorded_timeout_is_retried_by_a_run_with_a_longer_timeout(tmp_path):
    path = tmp_path / "r.jsonl"
    config = TileSpace(TASK).config(5)
    for timeout_s, measured, ok in ((1, 1, False), (1, 0, False), (0.5, 0, False), (30, 1, True), (60, 0, True)):
        delegate = _TimeoutsBelow(timeout_s)
        backend = ReplayBackend(path, delegate=delegate)
        (result,) = backend.measure(TASK, [config])
        assert (delegate.measured, result.ok) == (measured, ok), timeout_s
        backend.close()
    (record,) = [r for r in RecordStore(path) if r.result.config == config]
    assert record.result.ok and record.protocol["build_timeout_s"] == 30
