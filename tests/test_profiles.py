"""The mock's CPU profile follows the machine: selection by CPU name, the user's calibrated profile, its file."""

import json
from dataclasses import replace
from pathlib import Path

import gymnasium
import pytest

import schedule_gym  # noqa: F401  (registers the environments)
from schedule_gym import cache, gemm, hardware
from schedule_gym.backends import PROFILES, MockBackend, ReplayBackend, make_backend
from schedule_gym.backends.mock.profile import CPUProfile, read_profile, write_profile
from schedule_gym.backends.mock.selection import FITTED_FOR_CPU, PROFILES_DIR, nominal_profile_name, select_profile
from schedule_gym.records import RecordStore

TASK = gemm(64, 32, 64)


def fake_cpu(monkeypatch, name, avx512=None):
    """Pretend to run on the CPU ``name``; ``avx512`` sets what /proc/cpuinfo reports (for unknown CPUs)."""
    monkeypatch.setattr(hardware, "cpu_name", lambda: name)
    if avx512 is not None:
        monkeypatch.setattr(hardware, "cpu_has", lambda flag: avx512 if flag == "avx512f" else True)


@pytest.fixture
def user_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.mark.parametrize(
    "cpu, avx512, expected",
    [
        ("znver5", None, "znver5-2core-fitted"),
        ("znver3", None, "znver3-2core-fitted"),
        ("znver4", None, "znver4-2core-fitted"),
        ("sapphirerapids", None, "sapphirerapids-2core-fitted"),
        ("emeraldrapids", None, "sapphirerapids-2core-fitted"),
        ("unknown", True, "avx512-2core-nominal"),
        ("unknown", False, "avx2-2core-nominal"),
    ],
)
def test_auto_picks_the_profile_of_the_cpu(monkeypatch, user_cache, cpu, avx512, expected):
    fake_cpu(monkeypatch, cpu, avx512)
    backend = MockBackend()
    assert backend.profile is PROFILES[expected] and backend.profile.name == expected
    assert backend.record_context(TASK) == (f"mock:{expected}", "mock-cpu-v2")
    assert MockBackend(profile="auto").profile is PROFILES[expected]
    assert make_backend("mock").profile is PROFILES[expected]
    assert select_profile(cpu)[0] is PROFILES[expected]  # the same, by name, without faking
    env = gymnasium.make("schedule_gym/Gemm-v0", m=64, k=32, n=64)  # registered ids use the mock's default
    assert env.unwrapped.backend.profile.name == expected
    env.close()
    vec = gymnasium.make_vec("schedule_gym/Gemm-v0", num_envs=2, m=64, k=32, n=64)
    vec.reset(seed=0)
    vec.close()


#: The digests of the shipped profiles' numbers, as they were when the profiles were Python constants. Records
#: of mock measurements name a shipped profile (``mock:<name>``): its numbers may never change under its name.
SHIPPED_DIGESTS = {
    "avx2-2core-nominal": "2f6b2384cc",
    "avx512-2core-nominal": "2735446f8b",
    "znver3-2core-fitted": "a6d39f9935",
    "znver4-2core-fitted": "fee5e17379",
    "sapphirerapids-2core-fitted": "6eea7d76f8",
    "znver5-2core-fitted": "2d0da6944b",
}


def test_shipped_profiles_are_data_files_with_pinned_numbers():
    assert {name: profile.digest() for name, profile in PROFILES.items()} == SHIPPED_DIGESTS
    assert sorted(path.stem for path in PROFILES_DIR.glob("*.json")) == sorted(SHIPPED_DIGESTS)
    for name, profile in PROFILES.items():
        assert profile.name == name and read_profile(PROFILES_DIR / f"{name}.json") == profile
        assert MockBackend(profile=name).record_context(TASK)[0] == f"mock:{name}"  # no digest: shipped


def test_a_shipped_profile_file_is_named_after_its_profile(tmp_path, monkeypatch):
    from schedule_gym.backends.mock import selection

    write_profile(PROFILES["avx2-2core-nominal"], tmp_path / "other.json")
    monkeypatch.setattr(selection, "PROFILES_DIR", tmp_path)
    with pytest.raises(ValueError, match=r"other.json holds profile 'avx2-2core-nominal'; a shipped profile's file is named after it"):
        selection._shipped_profiles()


def test_every_fitted_cpu_maps_to_a_shipped_profile_of_its_isa():
    for cpu, name in FITTED_FOR_CPU.items():
        assert PROFILES[name].vector_bits == (512 if hardware.cpu_has_avx512(cpu) else 256)
    assert nominal_profile_name("znver4") == "avx512-2core-nominal"  # the ISA's, where no fit is shipped
    assert nominal_profile_name("znver3") == "avx2-2core-nominal"


def test_explicit_profiles_are_used_as_given_on_any_cpu(monkeypatch, user_cache):
    fake_cpu(monkeypatch, "znver3")
    write_profile(PROFILES["avx2-2core-nominal"], cache.profile_path("znver3"))  # a cached one never overrides a name
    for name, profile in PROFILES.items():
        backend = MockBackend(profile=name)
        assert backend.profile is profile and backend.profile_origin == "named"
        assert backend.record_context(TASK)[0] == f"mock:{name}"
    custom = replace(PROFILES["avx512-2core-nominal"], name="1core", cores=1)
    assert MockBackend(profile=custom).profile is custom
    with pytest.raises(ValueError, match=r"unknown CPU profile 'znver9'; known profiles: 'auto' \(by this CPU\)"):
        MockBackend(profile="znver9")


def test_the_users_calibrated_profile_wins(monkeypatch, user_cache):
    fake_cpu(monkeypatch, "znver5")
    shipped = MockBackend()
    calibrated = CPUProfile.from_dict({**PROFILES["znver5-2core-fitted"].to_dict(), "name": "znver5-2core-calibrated",
                                       "spill_cost": 3.0})
    path = write_profile(calibrated, user_cache / "profiles" / "znver5.json")
    assert path == cache.profile_path("znver5")
    backend = MockBackend()
    assert backend.profile == calibrated and backend.profile.name == "znver5-2core-calibrated"
    assert str(path) in backend.profile_origin
    # the target names the profile and the digest of its numbers: its records never mix with the shipped one's
    target = backend.record_context(TASK)[0]
    assert target == f"mock:znver5-2core-calibrated@{calibrated.digest()}" != shipped.record_context(TASK)[0]
    records = user_cache / "r.jsonl"
    space = backend.space(TASK)
    configs = [space.config(i) for i in range(0, 60, 3)]  # includes configs with register spills
    for delegate in (shipped, backend):
        replay = ReplayBackend(records, delegate=delegate)
        replay.measure(TASK, configs)
        replay.close()
    store = RecordStore(records)
    assert {t for _, t, _ in store.contexts()} == {"mock:znver5-2core-fitted", target}
    assert len(store) == 2 * len(configs)
    # the same name with other numbers (a refit, a hand edit) is another target too
    refit = CPUProfile.from_dict({**calibrated.to_dict(), "spill_cost": 5.0})
    assert MockBackend(profile=refit).record_context(TASK)[0] != target
    # another CPU does not read this CPU's file
    fake_cpu(monkeypatch, "znver3")
    assert MockBackend().profile.name == "znver3-2core-fitted"


def test_cache_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "a"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_dir() == tmp_path / "a"
    assert cache.profile_path("znver3") == tmp_path / "a" / "profiles" / "znver3.json"
    monkeypatch.delenv(cache.CACHE_ENV)
    assert cache.cache_dir() == tmp_path / "xdg" / "schedule-gym"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.cache_dir() == tmp_path / "home" / ".cache" / "schedule-gym"
    with pytest.raises(ValueError, match="a CPU name must be a plain non-empty name"):
        cache.profile_path("../x")


def test_profile_files_round_trip_every_field(tmp_path):
    for name, profile in PROFILES.items():
        path = write_profile(profile, tmp_path / f"{name}.json")
        data = json.loads(path.read_text())
        assert set(data) == set(profile.to_dict())
        assert read_profile(path) == profile and read_profile(path).digest() == profile.digest()


def _good():
    return PROFILES["znver3-2core-fitted"].to_dict()


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda d: d.pop("freq_ghz"), r"field 'freq_ghz' is missing"),
        (lambda d: d.update(freq_ghz="3.5"), r"field 'freq_ghz' must be a finite number, got '3.5'"),
        (lambda d: d.update(freq_ghz=0), r"field 'freq_ghz' must be positive"),
        (lambda d: d.update(overlap=-1.0), r"field 'overlap' must be non-negative"),
        (lambda d: d.update(cores=2.5), r"field 'cores' must be a positive integer, got 2.5"),
        (lambda d: d.update(cores=True), r"field 'cores' must be a positive integer, got True"),
        (lambda d: d.update(name=""), r"field 'name' must be a non-empty string"),
        (lambda d: d.update(turbo=True), r"unknown field 'turbo'"),
        (lambda d: d.update(caches=[]), r"field 'caches' must be a non-empty list"),
        (lambda d: d["caches"][1].pop("shared"), r"field 'caches'\[1\]: field 'shared' is missing"),
        (lambda d: d["caches"][0].update(size_bytes="32K"),
         r"field 'caches'\[0\]: field 'size_bytes' must be a positive integer"),
        (lambda d: d["caches"][2].update(fill_bytes_per_cycle=None),
         r"field 'caches'\[2\]: field 'fill_bytes_per_cycle' must be a finite number"),
    ],
)
def test_a_malformed_cached_profile_names_the_file_and_the_field(monkeypatch, user_cache, change, message):
    fake_cpu(monkeypatch, "znver3")
    data = _good()
    data["caches"] = [dict(c) for c in data["caches"]]
    change(data)
    path = cache.profile_path("znver3")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=rf"mock profile file {path}: {message}"):
        MockBackend()
    MockBackend(profile="znver3-2core-fitted")  # naming a profile does not read the cache


@pytest.mark.parametrize(
    "text, message",
    [("{not json", "is not valid JSON"), ("[1, 2]", "must be a JSON object, got list"), (b"\xff\xfe", "cannot be read")],
)
def test_a_cached_profile_that_is_not_a_profile_is_a_clear_error(monkeypatch, user_cache, text, message):
    fake_cpu(monkeypatch, "znver5")
    path = cache.profile_path("znver5")
    path.parent.mkdir(parents=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(ValueError, match=f"mock profile file {path}.*{message}"):
        MockBackend()


def test_a_profile_file_is_data_only(tmp_path):
    path = tmp_path / "p.json"
    Path(path).write_text(json.dumps({**_good(), "name": "__import__('os').system('false')"}))
    assert read_profile(path).name == "__import__('os').system('false')"  # a string, never evaluated
