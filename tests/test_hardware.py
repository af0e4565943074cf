"""The machine's facts from fake /proc/cpuinfo and sysfs contents: CPU generations of Intel and AMD (model
numbers where the flags agree, flags where a hypervisor misreports the model), caches, usable cores."""

import os

import pytest

from schedule_gym import hardware
from schedule_gym.backends import PROFILES, MockBackend
from schedule_gym.hardware import GENERATIONS, identify_cpu, parse_cpuinfo

# the flags of an Intel Xeon guest whose hypervisor reports family 6 model 167 (a Rocket Lake client's model)
XEON_GUEST_FLAGS = (
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ss ht syscall nx "
    "pdpe1gb rdtscp lm constant_tsc rep_good nopl xtopology nonstop_tsc cpuid tsc_known_freq pni pclmulqdq ssse3 fma "
    "cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt tsc_deadline_timer aes xsave avx f16c rdrand hypervisor lahf_lm abm "
    "3dnowprefetch cpuid_fault fsgsbase tsc_adjust bmi1 hle avx2 smep bmi2 erms invpcid rtm avx512f avx512dq rdseed "
    "adx smap avx512ifma clflushopt clwb avx512cd sha_ni avx512bw avx512vl xsaveopt xsavec xgetbv1 xsaves avx_vnni "
    "avx512_bf16 arat avx512vbmi umip avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni avx512_bitalg avx512_vpopcntdq "
    "rdpid cldemote movdiri movdir64b fsrm serialize tsxldtrk amx_bf16 avx512_fp16 amx_tile amx_int8 arch_capabilities"
)
V3 = "fpu sse sse2 ssse3 sse4_1 sse4_2 popcnt cx16 avx fma f16c movbe abm bmi1 bmi2 avx2"
V4 = V3 + " avx512f avx512dq avx512cd avx512bw avx512vl"
CLX = V4 + " avx512_vnni"
ICX = CLX + " avx512ifma avx512vbmi avx512_vbmi2 gfni vaes vpclmulqdq avx512_bitalg avx512_vpopcntdq"
SPR = ICX + " avx512_bf16 avx512_fp16 amx_tile amx_bf16 amx_int8 avx_vnni serialize"
GNR = SPR + " amx_fp16"
ZEN3 = V3 + " vaes vpclmulqdq"
ZEN4 = ICX + " avx512_bf16"
ZEN5 = ZEN4 + " avx_vnni avx512_vp2intersect"


def cpuinfo(vendor, family, model, flags, stepping=1):
    """A two-processor /proc/cpuinfo text."""
    block = (f"processor\t: {{n}}\nvendor_id\t: {vendor}\ncpu family\t: {family}\nmodel\t\t: {model}\n"
             f"model name\t: a CPU\nstepping\t: {stepping}\ncache size\t: 1024 KB\nflags\t\t: {flags}\n\n")
    return block.format(n=0) + block.format(n=1)


INTEL, AMD = "GenuineIntel", "AuthenticAMD"


@pytest.mark.parametrize(
    "vendor, family, model, flags, name, by",
    [
        # Intel Xeons by model number, the flags agreeing
        (INTEL, 6, 85, V4, "skylake-avx512", "model"),
        (INTEL, 6, 85, CLX, "cascadelake", "model"),
        (INTEL, 6, 85, CLX + " avx512_bf16", "cooperlake", "model"),
        (INTEL, 6, 106, ICX, "icelake-server", "model"),
        (INTEL, 6, 143, SPR, "sapphirerapids", "model"),
        (INTEL, 6, 207, SPR, "emeraldrapids", "model"),
        (INTEL, 6, 173, GNR, "graniterapids", "model"),
        # Intel clients
        (INTEL, 6, 167, ICX, "rocketlake", "model"),
        (INTEL, 6, 151, V3 + " avx_vnni", "alderlake", "model"),
        (INTEL, 6, 158, V3, "skylake", "model"),
        # a model number the flags contradict does not win: they tell what they can
        (INTEL, 6, 167, XEON_GUEST_FLAGS, "sapphirerapids", "flags"),  # AMX and AVX512-FP16: SPR or later
        (INTEL, 6, 167, GNR, "graniterapids", "flags"),
        (INTEL, 6, 143, GNR, "graniterapids", "flags"),
        (INTEL, 6, 143, ICX + " avx512_bf16 avx512_fp16", "x86-64-v4", "flags"),  # AMX hidden: no generation
        (INTEL, 6, 85, V3, "x86-64-v3", "flags"),  # AVX-512 hidden
        (INTEL, 6, 999, CLX, "x86-64-v4", "flags"),  # a model this code does not know
        # AMD by family, as far as the vector ISA agrees
        (AMD, 25, 33, ZEN3, "znver3", "model"),
        (AMD, 25, 17, ZEN4, "znver4", "model"),
        (AMD, 25, 17, V4, "znver4", "model"),  # a guest that hides AVX-512's extensions
        (AMD, 26, 2, ZEN5, "znver5", "model"),
        (AMD, 26, 2, V3, "x86-64-v3", "flags"),  # a Zen 5 guest without AVX-512
        (AMD, 25, 17, SPR, "sapphirerapids", "flags"),  # AMX is no Zen's
        (AMD, 23, 49, V3, "znver2", "model"),
        (AMD, 23, 8, V3, "znver1", "model"),
        # nothing to go by
        (INTEL, 6, 85, "fpu sse sse2", "unknown", "none"),
        ("", 0, 0, "", "unknown", "none"),
    ],
)
def test_cpu_generations_by_model_where_the_flags_agree_else_by_flags(vendor, family, model, flags, name, by):
    identity = identify_cpu(parse_cpuinfo(cpuinfo(vendor, family, model, flags)))
    assert (identity.name, identity.by) == (name, by)
    assert (identity.vendor, identity.family, identity.model) == (vendor, family, model)
    assert identity.describe().startswith(f"{name} (") and f"model {model})" in identity.describe()
    if name != "unknown":  # what the name promises, these flags show: code built for it runs here
        assert (GENERATIONS[name].needs or GENERATIONS[name].has) <= set(flags.split())


def test_an_arm_cpuinfo_and_an_unreadable_one_are_unknown(monkeypatch, tmp_path):
    arm = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd sve\nCPU implementer\t: 0x41\n"
    assert identify_cpu(parse_cpuinfo(arm)).name == "unknown"
    monkeypatch.setattr(hardware, "CPUINFO_PATH", str(tmp_path / "missing"))
    hardware._cpuinfo.cache_clear()
    try:
        assert hardware.cpu_name() == "unknown" and hardware.cpu_has("avx512f")  # cannot tell: True
    finally:
        hardware._cpuinfo.cache_clear()


def test_cpu_name_reads_the_first_processor_of_the_file(monkeypatch, tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text(cpuinfo(INTEL, 6, 207, SPR))
    monkeypatch.setattr(hardware, "CPUINFO_PATH", str(path))
    hardware._cpuinfo.cache_clear()
    try:
        assert hardware.cpu_name() == "emeraldrapids" and hardware.cpu_identity().by == "model"
        assert hardware.cpu_has("amx_tile") and not hardware.cpu_has("amx_fp16")
        assert hardware.vector_bits() == 512 and hardware.cpu_has_avx512()
    finally:
        hardware._cpuinfo.cache_clear()


def fake_cpuinfo(monkeypatch, text):
    fields = parse_cpuinfo(text)
    monkeypatch.setattr(hardware, "_cpuinfo", lambda: fields)


@pytest.mark.parametrize(
    "text, profile",
    [
        (cpuinfo(INTEL, 6, 167, XEON_GUEST_FLAGS), "sapphirerapids-2core-fitted"),  # fitted to this Xeon
        (cpuinfo(INTEL, 6, 151, V3 + " avx_vnni"), "avx2-2core-nominal"),
        (cpuinfo(INTEL, 6, 85, V3), "avx2-2core-nominal"),
        (cpuinfo(AMD, 25, 17, ZEN4), "znver4-2core-fitted"),
        (cpuinfo(AMD, 26, 2, ZEN5), "znver5-2core-fitted"),
        ("", "avx512-2core-nominal"),  # nothing readable: "unknown", and AVX-512 is not ruled out
    ],
)
def test_the_mocks_profile_follows_the_detected_cpu(monkeypatch, text, profile):
    fake_cpuinfo(monkeypatch, text)
    assert MockBackend().profile is PROFILES[profile]


def test_every_generation_is_consistent():
    for name, gen in GENERATIONS.items():
        assert gen.name == name and gen.has <= hardware.MARKER_FLAGS
        assert gen.needs is None or gen.needs <= gen.has
        assert gen.vector_bits == (512 if gen.avx512 else 256) == (512 if hardware.cpu_has_avx512(name) else 256)
    for names in hardware.INTEL_MODELS.values():
        assert all(n in GENERATIONS for n in names)
    assert {n for n, _ in hardware.BY_FLAGS} <= set(GENERATIONS)


@pytest.mark.tvm
def test_every_name_is_a_cpu_llvm_knows():
    codegen = pytest.importorskip("tvm.target.codegen")
    triple = codegen.llvm_get_system_triple()
    assert [n for n in GENERATIONS if not codegen.llvm_is_valid_cpu(n, triple)] == []


def write_cache(root, index, level, kind, size, shared):
    folder = root / f"index{index}"
    folder.mkdir(parents=True)
    (folder / "level").write_text(f"{level}\n")
    (folder / "type").write_text(f"{kind}\n")
    (folder / "size").write_text(f"{size}\n")
    (folder / "shared_cpu_list").write_text(f"{shared}\n")


def test_cache_levels_from_sysfs(tmp_path):
    write_cache(tmp_path, 0, 1, "Data", "48K", "0")
    write_cache(tmp_path, 1, 1, "Instruction", "64K", "0")
    write_cache(tmp_path, 2, 2, "Unified", "2048K", "0")
    write_cache(tmp_path, 3, 3, "Unified", "480M", "0-1,4-5")
    caches = hardware.cpu_caches(tmp_path)
    assert [(c.level, c.size_bytes, c.shared_by) for c in caches] == [
        (1, 48 * 1024, 1), (2, 2 * 1024 ** 2, 1), (3, 480 * 1024 ** 2, 4)]
    assert hardware.cpu_caches(tmp_path / "absent") == ()
    (tmp_path / "index2" / "size").write_text("lots\n")  # an unreadable level is left out, not guessed
    assert [c.level for c in hardware.cpu_caches(tmp_path)] == [1, 3]


def test_usable_cores_follow_the_affinity_mask(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 3, 5})
    assert hardware.usable_cores() == 3
    monkeypatch.delattr(os, "sched_getaffinity")
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    assert hardware.usable_cores() == 6
